"""graft's math grader against math-verify on the project's hand-labelled grader cases.

The cases are the `CASES` lists of tests/test_grader*.py (found by glob, so a new file of cases
counts as soon as it exists): each a response, its gold, the problem text and the verdict a
careful human grader gives. A case labelled `correct` deserves reward 1; every other label
(`wrong`, `no_answer`, `error`) deserves 0. Each grader gives each case a reward of 0 or 1:
- math-verify as its own documentation shows it: `verify(parse("$" + gold + "$"),
  parse(response))` with its defaults (its signal-based timeouts, so in the main thread); an
  exception is reward 0;
- each graft verifier named by `--verifiers` (default `math,math_careful`: the training verdict
  and the careful one), through
  `graft.verify.registry.resolve_verifier(name)(response, gold, problem)`.
For each grader: the cases it agrees with the label on, its false positives (reward 1 where the
label says 0: the reward a policy could learn to earn without deserving it) and its false
negatives (reward 0 for a right answer). The cases were written to probe graft's grader, many of
them the very ways math-verify alone is fooled, so they measure the gap on those classes, not
either grader's accuracy on real responses. Prints a markdown table; `--by-class` adds one per
case class, `--list-disagreements` lists the cases where math-verify and the first graft
verifier differ, `--json PATH` writes the numbers.

    .venv/bin/python benchmarks/grader_cases.py
    .venv/bin/python benchmarks/grader_cases.py --by-class --list-disagreements --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
LABELS = ("correct", "wrong", "no_answer", "timeout", "error")
MATH_VERIFY = "math-verify"


@dataclasses.dataclass(frozen=True)
class Case:
    """One hand-labelled case: `label` is the careful grader's category."""

    cls: str
    response: str
    gold: str
    problem: str
    label: str
    reason: str = ""
    source: str = ""

    @property
    def deserved(self) -> bool:
        """Does the response deserve reward 1?"""
        return self.label == "correct"


class Judged(NamedTuple):
    """A grader's reward for one case, and what it said (for people)."""

    correct: bool
    note: str


Grader = Callable[[str, str, str], Judged]


@dataclasses.dataclass(frozen=True)
class Counts:
    """A grader's agreement with the labels over some cases."""

    cases: int
    agree: int
    false_positives: int
    false_negatives: int

    @property
    def agree_pct(self) -> float:
        return 100.0 * self.agree / self.cases if self.cases else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {**dataclasses.asdict(self), "agree_pct": round(self.agree_pct, 2)}


# ------------------------------------------------------------------------------------ the cases


def as_case(item: object, source: str) -> Case | None:
    """A test file's tuple as a `Case`, or None for a shape this script does not know. The shapes:
    (class, response, gold, problem, (category, reason)), (class, response, gold, problem,
    category, reason) and (class, response, gold, category, reason) (no problem text)."""
    if (
        not isinstance(item, tuple)
        or len(item) < 5
        or not all(isinstance(x, str) for x in item[:3])
    ):
        return None
    cls, response, gold, *rest = item
    if len(rest) == 2 and isinstance(rest[1], tuple) and len(rest[1]) == 2:
        problem, (label, reason) = rest
    elif len(rest) == 3:
        problem, label, reason = rest
    elif len(rest) == 2:
        problem, (label, reason) = "", rest
    else:
        return None
    fields = (problem, label, reason)
    if not all(isinstance(x, str) for x in fields) or label not in LABELS:
        return None
    return Case(cls, response, gold, problem, label, reason, source)


def import_file(path: Path) -> ModuleType:
    """A test module imported from its file (tests/ on sys.path: they import each other)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"grader_cases_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def load_cases(paths: Iterable[Path]) -> tuple[list[Case], dict[str, dict[str, int]]]:
    """The cases of every file with a `CASES` list, and per file how many were read and how many
    skipped (an element of unknown shape)."""
    cases: list[Case] = []
    per_file: dict[str, dict[str, int]] = {}
    for path in sorted(paths):
        items = getattr(import_file(path), "CASES", None)
        if not isinstance(items, list | tuple):
            continue
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        read = [as_case(item, name) for item in items]
        cases += [c for c in read if c is not None]
        per_file[name] = {"cases": sum(c is not None for c in read), "skipped": read.count(None)}
    return cases, per_file


# ---------------------------------------------------------------------------------- the graders


def math_verify_grader() -> Grader:
    """math-verify with its defaults, the gold wrapped in `$...$` to be read as LaTeX."""
    from math_verify import parse, verify

    def judge(response: str, gold: str, problem: str) -> Judged:
        try:
            right = bool(verify(parse(f"${gold}$"), parse(response)))
        except Exception as exc:  # math-verify's own errors and timeouts: reward 0
            return Judged(False, f"raised {type(exc).__name__}")
        return Judged(right, "correct" if right else "wrong")

    return judge


def graft_grader(name: str) -> Grader:
    """The graft verifier called `name` (ValueError or ImportError for a name that is neither
    built in nor an import path)."""
    from graft.verify.registry import resolve_verifier

    verifier = resolve_verifier(name)
    verifier.prepare()

    def judge(response: str, gold: str, problem: str) -> Judged:
        try:
            verdict = verifier(response, gold, problem)
        except Exception as exc:  # the pool would count it an error: reward 0
            return Judged(False, f"raised {type(exc).__name__}")
        note = verdict.category + (f"/{verdict.reason}" if verdict.reason else "")
        return Judged(verdict.correct, note)

    return judge


def graders_for(names: Sequence[str]) -> dict[str, Grader]:
    """math-verify, then each graft verifier of `names` that resolves (an error line for each
    that does not)."""
    graders = {MATH_VERIFY: math_verify_grader()}
    for name in names:
        try:
            graders[f"graft {name}"] = graft_grader(name)
        except (ValueError, ImportError) as exc:
            print(f"error: verifier {name!r} skipped: {exc}", file=sys.stderr)
    return graders


def judge_all(
    cases: Sequence[Case], graders: dict[str, Grader], *, progress: bool = True
) -> dict[str, list[Judged]]:
    """Every grader's verdict on every case, in the main thread (math-verify's timeouts are
    signals)."""
    verdicts: dict[str, list[Judged]] = {name: [] for name in graders}
    with tqdm(total=len(cases) * len(graders), disable=not progress, unit="case") as bar:
        for name, grader in graders.items():
            bar.set_description(name)
            for case in cases:
                verdicts[name].append(grader(case.response, case.gold, case.problem))
                bar.update()
    return verdicts


# ---------------------------------------------------------------------------------- the counts


def count(deserved: Sequence[bool], rewarded: Sequence[bool]) -> Counts:
    """Agreement of a grader's rewards with the labels, case by case."""
    if len(deserved) != len(rewarded):
        raise ValueError(f"{len(deserved)} labels but {len(rewarded)} verdicts")
    pairs = list(zip(deserved, rewarded))
    return Counts(
        cases=len(pairs),
        agree=sum(d == r for d, r in pairs),
        false_positives=sum(r and not d for d, r in pairs),
        false_negatives=sum(d and not r for d, r in pairs),
    )


def count_by_class(
    classes: Sequence[str], deserved: Sequence[bool], rewarded: Sequence[bool]
) -> dict[str, Counts]:
    """`count` within each class, classes in order of first appearance."""
    rows: dict[str, list[int]] = {}
    for i, cls in enumerate(classes):
        rows.setdefault(cls, []).append(i)
    return {
        cls: count([deserved[i] for i in idx], [rewarded[i] for i in idx])
        for cls, idx in rows.items()
    }


def summarize(
    cases: Sequence[Case], verdicts: dict[str, list[Judged]], *, by_class: bool = False
) -> dict[str, dict]:
    """Per grader, its counts over all cases (and per class)."""
    deserved = [c.deserved for c in cases]
    out: dict[str, dict] = {}
    for name, judged in verdicts.items():
        rewarded = [j.correct for j in judged]
        out[name] = count(deserved, rewarded).as_dict()
        if by_class:
            classes = [c.cls for c in cases]
            per = count_by_class(classes, deserved, rewarded)
            out[name]["by_class"] = {cls: c.as_dict() for cls, c in per.items()}
    return out


# ---------------------------------------------------------------------------------- the output

HEADER = ("cases", "agree", "agree %", "false positives", "false negatives")


def table_row(first: Sequence[str], counts: dict) -> str:
    cells = [
        *first,
        str(counts["cases"]),
        str(counts["agree"]),
        f"{counts['agree_pct']:.1f}",
        str(counts["false_positives"]),
        str(counts["false_negatives"]),
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(summary: dict[str, dict], *, by_class: bool = False) -> str:
    """The graders' table; with `by_class`, one row per class and grader after it."""
    lines = ["| grader | " + " | ".join(HEADER) + " |", "|---" * (len(HEADER) + 1) + "|"]
    lines += [table_row([name], counts) for name, counts in summary.items()]
    if by_class:
        lines += ["", "| class | grader | " + " | ".join(HEADER) + " |"]
        lines.append("|---" * (len(HEADER) + 2) + "|")
        classes = next(iter(summary.values()), {}).get("by_class", {})
        for cls in classes:
            for name, counts in summary.items():
                lines.append(table_row([cls, name], counts["by_class"][cls]))
    return "\n".join(lines)


def short(text: str, width: int = 70) -> str:
    """`text` on one line of a markdown table cell, clipped to about `width` characters."""
    clipped = text if len(text) <= width else text[: width - 3] + "..."
    return clipped.replace("\n", "\\n").replace("|", "\\|")


def disagreements(
    cases: Sequence[Case], verdicts: dict[str, list[Judged]], first: str, second: str
) -> list[str]:
    """One markdown row per case where the two graders' rewards differ."""
    lines = [
        f"| class | response | gold | label | {first} | {second} |",
        "|---|---|---|---|---|---|",
    ]
    for case, a, b in zip(cases, verdicts[first], verdicts[second]):
        if a.correct != b.correct:
            cells = (case.cls, f"`{short(case.response)}`", f"`{short(case.gold, 30)}`")
            lines.append("| " + " | ".join((*cells, case.label, a.note, b.note)) + " |")
    return lines


def describe(per_file: dict[str, dict[str, int]], cases: Sequence[Case]) -> str:
    files = ", ".join(f"{name} ({n['cases']})" for name, n in per_file.items())
    skipped = sum(n["skipped"] for n in per_file.values())
    right = sum(c.deserved for c in cases)
    return (
        f"{len(cases)} cases ({right} labelled correct, {len(cases) - right} not) from {files};"
        f" {skipped} skipped (unknown shape)"
    )


# ---------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--verifiers",
        default="math,math_careful",
        help="graft verifiers, comma-separated (default: math,math_careful)",
    )
    parser.add_argument("--by-class", action="store_true", help="a table per case class too")
    parser.add_argument(
        "--list-disagreements",
        action="store_true",
        help="the cases where math-verify and the first graft verifier differ",
    )
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, cases: Sequence[Case] | None = None) -> dict:
    """Run the comparison and print it; `cases` replaces the test files' cases (for tests).
    Returns what `--json` writes."""
    args = parse_args(argv)
    if cases is None:
        cases, per_file = load_cases(TESTS.glob("test_grader*.py"))
    else:
        per_file = {"(given)": {"cases": len(cases), "skipped": 0}}
    names = [n.strip() for n in args.verifiers.split(",") if n.strip()]
    graders = graders_for(names)
    start = time.perf_counter()
    verdicts = judge_all(cases, graders, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    summary = summarize(cases, verdicts, by_class=args.by_class)
    print(describe(per_file, cases) + f"; judged in {seconds:.1f} s\n")
    print(markdown(summary, by_class=args.by_class))
    if args.list_disagreements and len(graders) > 1:
        first, second = list(graders)[:2]
        rows = disagreements(cases, verdicts, first, second)
        print(f"\n{len(rows) - 2} cases where {first} and {second} differ:\n")
        print("\n".join(rows))
    result = {"files": per_file, "seconds": round(seconds, 2), "graders": summary}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
