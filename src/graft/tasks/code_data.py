"""Code problems read from data files, in the usual column layouts, normalized to `CodeTests`.

Layouts, recognized by their columns (one per row, so a file may mix them):
- graft's own: `prompt`, `tests` (an object or its JSON, `graft.tasks.code`), optional `reference`;
- MBPP: `text` (or `prompt`), `code`, `test_list` (assert statements), optional
  `test_setup_code`; the function's name is read from the first test;
- HumanEval: `prompt`, `canonical_solution`, `test` (a `check(candidate)` function),
  `entry_point`;
- TACO / APPS: `question`, `input_output` (JSON with `inputs`, `outputs` and, for function
  problems, `fn_name`), optional `solutions` (JSON list; the first is the reference);
- LiveCodeBench: `question_content`, `public_test_cases` (JSON list of `input`, `output`,
  `testtype`), optional `metadata` with `func_name`.
A source is a local .jsonl/.parquet file, or a Hugging Face dataset name (`openai/openai_humaneval`)
pinned to a full commit id in `task.code.revision` (a name without one is refused: the data could
change under a run), read with `datasets` (`pip install graft-rl[datasets]`, and a network or the
local cache). The tests use small files written in these layouts.

`check_references` runs each problem's reference solution against its own tests in the sandbox:
a problem whose reference fails is reported and left out, as an unparseable math gold is.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft.config import CodeDataConfig, ConfigError
from graft.config.checks import names_a_dataset
from graft.errors import DataError
from graft.tasks.code import CodeTestError, CodeTests, parse_tests, run_tests
from graft.tasks.math_data import _read_jsonl, read_hub
from graft.types import Problem

LAYOUTS = ("graft", "mbpp", "humaneval", "taco", "livecodebench")


@dataclass(frozen=True)
class CodeProblem:
    prompt: str
    tests: CodeTests
    reference: str | None
    layout: str


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of a .jsonl or .parquet file; DataError names the file and row."""
    if path.suffix.lower() == ".jsonl":
        yield from _read_jsonl(path, 0)
        return
    if path.suffix.lower() != ".parquet":
        raise DataError(f"unsupported code data file {path}: use .jsonl or .parquet")
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:
        raise DataError(f"unreadable Parquet file {path}: {' '.join(str(exc).split())}") from None
    yield from enumerate(rows, start=1)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _called_name(statement: str) -> str:
    """The function an `assert f(...) == ...` statement calls first."""
    for node in ast.walk(ast.parse(statement)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id
    raise CodeTestError(f"tests: no function call in {statement[:60]!r}")


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
    layout = layout_of(row)
    if layout == "graft":
        return CodeProblem(
            str(row["prompt"]), parse_tests(row["tests"]), row.get("reference"), layout
        )
    if layout == "mbpp":
        tests = list(row["test_list"] or [])
        if not tests:
            raise CodeTestError("tests: test_list is empty")
        spec = {"form": "assert", "function": _called_name(tests[0]), "tests": tests,
                "setup": row.get("test_setup_code") or ""}  # fmt: skip
        prompt = str(row.get("text") or row.get("prompt") or "")
        return CodeProblem(prompt, parse_tests(spec), row.get("code"), layout)
    if layout == "humaneval":
        spec = {"form": "assert", "function": row["entry_point"],
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
            out.append(normalize(row))
        except (CodeTestError, KeyError, TypeError, ValueError, SyntaxError) as err:
            what = err if isinstance(err, CodeTestError) else f"{type(err).__name__}: {err}"
            raise DataError(f"{key}: row {n} of {where}: {what}") from None
    if not out:
        raise DataError(f"{key}: {where} has no rows")
    return tuple(out)


def check_references(
    problems: tuple[CodeProblem, ...], *, where: str, unsafe: bool = False
) -> tuple[tuple[CodeProblem, ...], dict[str, int]]:
    """Problems whose reference passes its own tests (or that have none), and counts."""
    kept, failed, checked = [], [], 0
    for i, problem in enumerate(problems):
        if problem.reference is None:
            kept.append(problem)
            continue
        checked += 1
        ok, reason, _ = run_tests(problem.reference, problem.tests, unsafe=unsafe)
        if ok:
            kept.append(problem)
        else:
            failed.append(f"#{i + 1} ({reason})")
    if failed:
        print(
            f"warning: {where}: left out {len(failed)} of {checked} problems whose reference "
            f"solution fails its own tests: {', '.join(failed[:5])}"
            + (" ..." if len(failed) > 5 else ""),
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
        if self.cfg.check_references:
            problems, _ = check_references(
                problems, where=key, unsafe=self.cfg.sandbox == "unsafe_local"
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
