"""Code problems read from data files, in the usual column layouts, normalized to `CodeTests`.

Layouts, recognized by their columns (one per row, so a file may mix them):
- graft's own: `prompt`, `tests` (an object or its JSON, `graft.verify.code.verifier`),
  optional `reference`;
- MBPP: `text` (or `prompt`), `code`, `test_list` (assert statements), optional
  `test_setup_code`; the entry function is the `def` of `code` that the tests call (without
  one: the one name the tests call that nothing defines, else any such name the response
  defines), and the tests see the solution module's names, as MBPP's harness runs them;
- HumanEval: `prompt`, `canonical_solution`, `test` (a `check(candidate)` function),
  `entry_point`; the prompt is the tests' `prelude` (its imports and helpers, for the checks
  and ahead of the candidate's program, as HumanEval's harness runs `prompt + completion`);
- TACO / APPS: `question`, `input_output` (JSON with `inputs`, `outputs` and, for function
  problems, `fn_name`), optional `solutions` (JSON list; the first is the reference);
- LiveCodeBench: `question_content`, `public_test_cases` (JSON list of `input`, `output`,
  `testtype`), optional `metadata` with `func_name`.
Each problem keeps the dataset's own id (`task_id`, `problem_id`, `question_id`, `id` or `name`,
the first present) to name it in messages. A source is a local .jsonl (or .jsonl.gz)/.parquet
file, or a Hugging Face dataset name (`openai/openai_humaneval`)
pinned to a full commit id in `task.code.revision` (a name without one is refused: the data could
change under a run), read with `datasets` (the `datasets` extra: `pip install -e '.[datasets]'`
in a clone, and a network or the local cache). The tests use small files written in these layouts.

`check_references` runs each problem's reference solution against its own tests in the sandbox,
through the same harness as a response: a problem whose reference does not pass is left out, as
an unparseable math gold is, and listed (id, row, why: `wrong`, `runtime_error`, `timeout`, or
`check_error: NameError (...)` when the check itself failed) in a JSONL file that the warning
names.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from graft.config import CodeDataConfig, ConfigError
from graft.config.checks import names_a_dataset
from graft.errors import DataError
from graft.sandbox import Limits
from graft.tasks.math_data import _read_jsonl, read_hub
from graft.types import Problem
from graft.verify.code.blocks import solution_names, top_level_names
from graft.verify.code.verifier import (
    CodeTestError,
    CodeTests,
    parse_tests,
    run_tests,
    with_prelude,
)

LAYOUTS = ("graft", "mbpp", "humaneval", "taco", "livecodebench")
ID_COLUMNS = ("task_id", "problem_id", "question_id", "id", "name")


@dataclass(frozen=True)
class CodeProblem:
    prompt: str
    tests: CodeTests
    reference: str | None
    layout: str
    id: str = ""
    """The dataset's own id of the problem (`ID_COLUMNS`), "" when it has none."""
    row: int = field(default=0, compare=False)
    """Its row in the file it was read from (0: not read from a file)."""

    def name(self) -> str:
        """How messages name it: its id, else its row."""
        return self.id or (f"row {self.row}" if self.row else "a problem")


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of a .jsonl, .jsonl.gz or .parquet file; DataError names the file and
    row."""
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        try:
            yield from _read_jsonl(path, 0)
        except (OSError, EOFError) as exc:
            raise DataError(f"unreadable code data file {path}: {exc}") from None
        return
    if path.suffix.lower() != ".parquet":
        raise DataError(f"unsupported code data file {path}: use .jsonl, .jsonl.gz or .parquet")
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise DataError(f"unreadable Parquet file {path}: {' '.join(str(exc).split())}") from None
    yield from enumerate(rows, start=1)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _mbpp_entry(tests: list[str], setup: str, code: str | None) -> str:
    """The function MBPP's tests are for: the first the tests call that the reference `code`
    defines; without one, the only name the tests call that nothing defines; else "" (any
    such name the response defines, `graft.verify.code.verifier.entry_names`)."""
    for i, test in enumerate(tests):
        if not isinstance(test, str):
            raise CodeTestError(f"tests: test_list[{i}] is not a string")
        try:
            compile(test, f"test_list[{i}]", "exec")
        except (SyntaxError, ValueError) as err:
            raise CodeTestError(f"tests: test_list[{i}] is not Python ({err})") from None
    wanted = solution_names(tests, (setup,))
    if not wanted:
        raise CodeTestError(f"tests: no function call of the solution's in {tests[0][:60]!r}")
    defined = top_level_names(code) if isinstance(code, str) else set()
    return next((n for n in wanted if n in defined), wanted[0] if len(wanted) == 1 else "")


def row_id(row: dict[str, Any]) -> str:
    """The dataset's own id of a row (`ID_COLUMNS`, the first present), "" when none."""
    for column in ID_COLUMNS:
        value = row.get(column)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""


def layout_of(row: dict[str, Any]) -> str:
    if "tests" in row and "prompt" in row:
        return "graft"
    if "test_list" in row:
        return "mbpp"
    if "entry_point" in row and "test" in row:
        return "humaneval"
    if "input_output" in row:
        return "taco"
    if "public_test_cases" in row:
        return "livecodebench"
    raise CodeTestError(
        f"no known layout in the columns {sorted(row)}: expected one of {list(LAYOUTS)} "
        "(graft: prompt + tests; MBPP: test_list; HumanEval: test + entry_point; "
        "TACO: input_output; LiveCodeBench: public_test_cases)"
    )


def _io_tests(inputs: list, outputs: list, fn_name: str | None) -> CodeTests:
    if fn_name:
        return parse_tests({"form": "call", "function": fn_name, "calls": inputs, "expected": [
            o[0] if isinstance(o, list) and len(o) == 1 else o for o in outputs]})  # fmt: skip
    as_text = [x if isinstance(x, str) else "\n".join(map(str, x)) for x in inputs]
    want = [x if isinstance(x, str) else "\n".join(map(str, x)) for x in outputs]
    return parse_tests({"form": "stdio", "stdin": as_text, "stdout": want})


def normalize(row: dict[str, Any]) -> CodeProblem:
    """A row of any known layout as a CodeProblem; CodeTestError says what is wrong."""
    return replace(_normalize(row), id=row_id(row))


def _normalize(row: dict[str, Any]) -> CodeProblem:
    layout = layout_of(row)
    if layout == "graft":
        return CodeProblem(
            str(row["prompt"]), parse_tests(row["tests"]), row.get("reference"), layout
        )
    if layout == "mbpp":
        tests = list(row["test_list"] or [])
        if not tests:
            raise CodeTestError("tests: test_list is empty")
        setup = row.get("test_setup_code") or ""
        spec = {"form": "assert", "function": _mbpp_entry(tests, setup, row.get("code")),
                "tests": tests, "setup": setup}  # fmt: skip
        prompt = str(row.get("text") or row.get("prompt") or "")
        return CodeProblem(prompt, parse_tests(spec), row.get("code"), layout)
    if layout == "humaneval":
        spec = {"form": "assert", "function": row["entry_point"], "prelude": row["prompt"],
                "tests": [f"{row['test']}\ncheck(candidate)"]}  # fmt: skip
        reference = f"{row['prompt']}{row.get('canonical_solution') or ''}"
        return CodeProblem(str(row["prompt"]), parse_tests(spec), reference, layout)
    if layout == "taco":
        io = _json(row["input_output"]) or {}
        if not isinstance(io, dict) or "inputs" not in io or "outputs" not in io:
            raise CodeTestError("tests: input_output needs inputs and outputs")
        solutions = _json(row.get("solutions") or "[]") or []
        tests = _io_tests(io["inputs"], io["outputs"], io.get("fn_name"))
        return CodeProblem(str(row["question"]), tests, solutions[0] if solutions else None, layout)
    cases = _json(row["public_test_cases"]) or []
    if not cases:
        raise CodeTestError("tests: public_test_cases is empty")
    func = (_json(row.get("metadata") or "{}") or {}).get("func_name")
    if any(c.get("testtype") == "functional" for c in cases) and func:
        inputs = [[json.loads(line) for line in c["input"].splitlines()] for c in cases]
        outputs = [json.loads(c["output"]) for c in cases]
        return CodeProblem(
            str(row["question_content"]), _io_tests(inputs, outputs, func), None, layout
        )
    tests = _io_tests([c["input"] for c in cases], [c["output"] for c in cases], None)
    return CodeProblem(str(row["question_content"]), tests, None, layout)


def load_code_problems(
    path: str, *, key: str, cfg: CodeDataConfig | None = None, split: str = "train"
) -> tuple[CodeProblem, ...]:
    """Every problem of a file, or of a Hugging Face dataset's `split` at `cfg.revision`; a
    malformed row ends in one DataError naming file (or dataset) and row."""
    if names_a_dataset(path) and cfg is not None:
        rows: Iterator[tuple[int, dict[str, Any]]] = read_hub(path, split, cfg, key, ())
        where = f"dataset {path!r} split {split!r} at revision {cfg.revision}"
    else:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{key}: code data file not found: {path}")
        rows, where = read_rows(p), path
    out = []
    for n, row in rows:
        try:
            out.append(replace(normalize(row), row=n))
        except (CodeTestError, KeyError, TypeError, ValueError, SyntaxError) as err:
            what = err if isinstance(err, CodeTestError) else f"{type(err).__name__}: {err}"
            raise DataError(f"{key}: row {n} of {where}: {what}") from None
    if not out:
        raise DataError(f"{key}: {where} has no rows")
    return tuple(out)


def _reference_failure(problem: CodeProblem, unsafe: bool) -> dict[str, Any] | None:
    """None when `problem`'s reference passes its tests, else what to list about it."""
    run = run_tests(
        with_prelude(problem.tests, problem.reference or ""), problem.tests, unsafe=unsafe
    )
    if run.passed:
        return None
    why = f"{run.reason}: {run.detail}" if run.detail else run.reason
    return {"id": problem.id, "row": problem.row, "layout": problem.layout, "reason": run.reason,
            "why": why, "passed": round(run.share, 4)}  # fmt: skip


def _report_path(report: str | Path | None, where: str) -> Path:
    if report:
        return Path(report).expanduser()
    slug = "".join(c if c.isalnum() else "_" for c in where).strip("_") or "code"
    handle, name = tempfile.mkstemp(prefix=f"graft-left-out-{slug}-", suffix=".jsonl")
    os.close(handle)
    return Path(name)


def write_left_out(failed: list[dict[str, Any]], report: str | Path | None, where: str) -> Path:
    """The JSONL list of the problems left out (one line each), at `report` or, when None, a
    new file in the system's temp folder; DataError names the path it could not write."""
    path = _report_path(report, where)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(f) + "\n" for f in failed))
    except OSError as err:
        raise DataError(f"{where}: cannot write the list of left-out problems to {path}: "
                        f"{err.strerror or err}") from None  # fmt: skip
    return path


def check_references(
    problems: tuple[CodeProblem, ...],
    *,
    where: str,
    unsafe: bool = False,
    report: str | Path | None = None,
) -> tuple[tuple[CodeProblem, ...], dict[str, int]]:
    """Problems whose reference passes its own tests (or that have none), and counts. Those
    left out are named by their dataset's id in a warning, and every one is listed in the JSONL
    file `report` (None: a new file in the temp folder; the warning says where)."""
    kept, failed, checked = [], [], 0
    for problem in problems:
        if problem.reference is None:
            kept.append(problem)
            continue
        checked += 1
        failure = _reference_failure(problem, unsafe)
        if failure is None:
            kept.append(problem)
        else:
            failed.append({"name": problem.name(), **failure})
    if failed:
        path = write_left_out(failed, report, where)
        reasons = Counter(f["reason"] for f in failed)
        shown = ", ".join(f"{f['name']} ({f['why']})" for f in failed[:5])
        print(
            f"warning: {where}: left out {len(failed)} of {checked} problems whose reference "
            f"solution does not pass its own tests in graft's harness "
            f"({', '.join(f'{r} {n}' for r, n in reasons.most_common())}): {shown}"
            + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
            + f"; all listed in {path}",
            file=sys.stderr,
        )
    counts = {"problems": len(problems), "references_checked": checked, "left_out": len(failed)}
    return tuple(kept), counts


UNSAFE_WARNING = (
    "WARNING: {key}=unsafe_local: candidate programs run WITHOUT isolation; they can read and "
    "write this machine's files, use its network and signal its processes"
)


def code_verifier(sandbox: str, key: str) -> str:
    """The verifier for a code task's `sandbox` setting (`key` names it): `code`, refused in one
    line where the machine cannot isolate programs, or `code_unsafe_local`, with a loud
    warning."""
    from graft.sandbox import isolation_problem

    if sandbox == "unsafe_local":
        print(UNSAFE_WARNING.format(key=key), file=sys.stderr)
        return "code_unsafe_local"
    problem = isolation_problem()
    if problem:
        raise ConfigError(f"{key}: cannot isolate programs here: {problem}")
    return "code"


class CodeTask:
    """Code problems from data files (module docstring), judged by the `code` verifier in the
    sandbox; refuses to start where the machine cannot isolate programs (one line saying how
    to get isolation), unless `sandbox: unsafe_local`, which warns."""

    name = "code"

    def __init__(self, cfg: CodeDataConfig) -> None:
        self.cfg = cfg
        read = {  # every file read and checked before any program runs
            name: load_code_problems(
                getattr(cfg, name),
                key=f"task.code.{name}",
                cfg=cfg,
                split=getattr(cfg, f"{name}_split"),
            )
            for name in ("train", "test", "val")
            if getattr(cfg, name)
        }
        self.verifier = code_verifier(cfg.sandbox, "task.code.sandbox")
        self._sets: dict[str, tuple[Problem, ...]] = {"train": (), "test": (), "val": ()}
        for name, problems in read.items():
            self._sets[name] = self._prepare(problems, getattr(cfg, name), f"task.code.{name}")

    def _prepare(
        self, problems: tuple[CodeProblem, ...], path: str, key: str
    ) -> tuple[Problem, ...]:
        if self.cfg.limit:
            problems = problems[: self.cfg.limit]
        if self.cfg.stdout_bytes != Limits().stdout_bytes:
            problems = tuple(
                replace(p, tests=replace(p.tests, stdout_bytes=self.cfg.stdout_bytes))
                for p in problems
            )
        if self.cfg.check_references:
            folder = self.cfg.left_out_dir
            problems, _ = check_references(
                problems,
                where=key,
                unsafe=self.cfg.sandbox == "unsafe_local",
                report=Path(folder).expanduser() / f"left_out_{key.rsplit('.', 1)[-1]}.jsonl"
                if folder
                else None,
            )
        if not problems:
            raise DataError(f"{key}: no problem of {path} is left")
        return tuple(
            Problem(p.prompt.strip() + self.cfg.suffix, p.tests.to_gold()) for p in problems
        )

    def train_problems(self) -> tuple[Problem, ...]:
        return self._sets["train"]

    def test_problems(self) -> tuple[Problem, ...]:
        return self._sets["test"]

    def val_problems(self) -> tuple[Problem, ...]:
        return self._sets["val"]
