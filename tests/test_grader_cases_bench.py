"""benchmarks/grader_cases.py: its counts, on three cases counted by hand, and the shapes of the
grader test files' cases it reads."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "grader_cases.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("grader_cases", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def three(bench):
    """A right answer, a wrong one, and a hedge math-verify scores correct and graft does not."""
    return [
        bench.Case("right", "So \\boxed{12}.", "12", "", "correct"),
        bench.Case("wrong", "So \\boxed{13}.", "12", "", "wrong", "one_answer"),
        bench.Case("hedge", "The answer is \\boxed{14}, or maybe 15.", "14", "", "wrong", "hedge"),
    ]


def test_the_counts_on_three_cases_are_the_hand_counted_ones(bench, tmp_path, capsys):
    out = tmp_path / "counts.json"
    argv = ["--no-progress", "--verifiers", "math", "--by-class", "--list-disagreements"]
    argv += ["--json", str(out)]
    result = bench.main(argv, cases=three(bench))
    graders = result["graders"]
    assert list(graders) == ["math-verify", "graft math"]
    counts = {name: {k: g[k] for k in ("cases", "agree", "false_positives", "false_negatives")}
              for name, g in graders.items()}  # fmt: skip
    assert counts == {
        "math-verify": {"cases": 3, "agree": 2, "false_positives": 1, "false_negatives": 0},
        "graft math": {"cases": 3, "agree": 3, "false_positives": 0, "false_negatives": 0},
    }
    assert graders["math-verify"]["by_class"]["hedge"]["false_positives"] == 1
    assert graders["math-verify"]["by_class"]["right"]["agree"] == 1
    assert json.loads(out.read_text())["graders"] == graders
    printed = capsys.readouterr().out
    assert "| math-verify | 3 | 2 | 66.7 | 1 | 0 |" in printed
    assert "| graft math | 3 | 3 | 100.0 | 0 | 0 |" in printed
    assert "1 cases where math-verify and graft math differ" in printed
    assert "| hedge | `The answer is \\boxed{14}, or maybe 15.` | `14` | wrong |" in printed


def test_by_default_both_graft_verdicts_are_counted(bench):
    """The training verdict withholds the reward from a right box followed by another value; the
    careful reading does not: one false negative for `math`, none for `math_careful`."""
    tail = bench.Case("tail", "So \\boxed{12}. He kept 12 and sold 36.", "12", "", "correct")
    graders = bench.main(["--no-progress"], cases=[tail])["graders"]
    assert list(graders) == ["math-verify", "graft math", "graft math_careful"]
    assert graders["graft math"]["false_negatives"] == 1
    assert graders["graft math_careful"]["agree"] == 1


def test_an_unknown_verifier_is_skipped_with_an_error(bench, capsys):
    result = bench.main(["--no-progress", "--verifiers", "math,no_such"], cases=three(bench)[:1])
    assert list(result["graders"]) == ["math-verify", "graft math"]
    assert "verifier 'no_such' skipped" in capsys.readouterr().err


def test_counting_is_a_pure_function(bench):
    deserved = [True, True, False, False, True]
    rewarded = [True, False, True, False, True]
    assert bench.count(deserved, rewarded) == bench.Counts(5, 3, 1, 1)
    per = bench.count_by_class(["a", "b", "a", "b", "a"], deserved, rewarded)
    assert per == {"a": bench.Counts(3, 2, 1, 0), "b": bench.Counts(2, 1, 0, 1)}
    assert bench.count([], []).cases == 0
    with pytest.raises(ValueError):
        bench.count([True], [])


def test_each_shape_of_the_grader_test_files_is_read_and_others_are_skipped(bench):
    new = ("c", "r", "g", "p", ("wrong", "hedge"))
    flat = ("c", "r", "g", "p", "no_answer", "retracted")
    no_problem = ("c", "r", "g", "correct", "")
    assert bench.as_case(new, "f") == bench.Case("c", "r", "g", "p", "wrong", "hedge", "f")
    assert bench.as_case(flat, "f") == bench.Case("c", "r", "g", "p", "no_answer", "retracted", "f")
    assert bench.as_case(no_problem, "f") == bench.Case("c", "r", "g", "", "correct", "", "f")
    for odd in [("c", "r"), ("c", "r", "g", "p", "maybe", ""), ["c", "r", "g", "correct", ""]]:
        assert bench.as_case(odd, "f") is None
