"""MathTask: the shipped fixture, JSONL and Parquet files, and a clear error per bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graft.config import MathDataConfig, TaskConfig
from graft.errors import DataError
from graft.tasks import build_task
from graft.tasks.math_data import FIXTURE_PATH, MathTask
from graft.verify.math.grader import verify_math

SUFFIX = MathDataConfig().suffix


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_fixture_loads_and_every_gold_verifies():
    task = MathTask(MathDataConfig(train=str(FIXTURE_PATH)))
    problems = task.train_problems()
    assert task.name == "math" and task.verifier == "math"
    assert len(problems) == 22
    assert task.test_problems() == ()
    assert problems[0].prompt == "What is the value of $2^{10}$?" + SUFFIX
    assert problems[0].gold == "1024" and problems[0].skill == "prealgebra"
    assert {p.skill for p in problems} == {
        "prealgebra",
        "algebra",
        "geometry",
        "number_theory",
        "counting",
    }
    assert len({p.id for p in problems}) == 22
    for p in problems:
        assert verify_math(f"So the answer is $\\boxed{{{p.gold}}}$.", p.gold).category == "correct"
        assert verify_math("I give up.", p.gold).category == "no_answer"


def test_fixture_is_package_data():
    assert FIXTURE_PATH.is_file()
    assert FIXTURE_PATH.parent.name == "data" and FIXTURE_PATH.parent.parent.name == "graft"


def test_jsonl_columns_limit_and_values(tmp_path):
    rows = [
        {"question": " What is 6 times 7? ", "solution": 42, "skill": "mul"},
        {"question": "Half of one?", "solution": "\\frac{1}{2}"},
        {"question": "Third?", "solution": "Hence $\\boxed{\\frac{1}{3}}$."},
    ]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    with path.open("a") as f:
        f.write("\n  \n")  # trailing blank lines are skipped
    cfg = MathDataConfig(
        train=str(path), problem_column="question", answer_column="solution", suffix=" Answer:"
    )
    problems = MathTask(cfg).train_problems()
    assert [p.prompt for p in problems] == [
        "What is 6 times 7? Answer:",
        "Half of one? Answer:",
        "Third? Answer:",
    ]
    # Numbers become text; a MATH-style solution is reduced to its last boxed answer.
    assert [p.gold for p in problems] == ["42", "\\frac{1}{2}", "\\frac{1}{3}"]
    assert [p.skill for p in problems] == ["mul", "", ""]
    limited = MathTask(
        MathDataConfig(
            train=str(path), problem_column="question", answer_column="solution", limit=2
        )
    )
    assert len(limited.train_problems()) == 2


def test_parquet_train_and_test(tmp_path):
    table = pa.table(
        {
            "problem": ["1+1?", "2+2?", "3+3?"],
            "answer": ["2", "4", "6"],
            "level": ["Level 1", "Level 1", "Level 2"],
        }
    )
    pq.write_table(table, tmp_path / "train.parquet")
    write_jsonl(tmp_path / "test.jsonl", [{"problem": "5+5?", "answer": "10"}])
    cfg = MathDataConfig(
        train=str(tmp_path / "train.parquet"), test=str(tmp_path / "test.jsonl"), limit=2
    )
    task = build_task(TaskConfig(name="math", math=cfg))
    assert isinstance(task, MathTask)
    assert [(p.prompt, p.gold, p.skill) for p in task.train_problems()] == [
        ("1+1?" + SUFFIX, "2", ""),
        ("2+2?" + SUFFIX, "4", ""),
    ]
    assert [p.gold for p in task.test_problems()] == ["10"]


def test_parquet_skill_column(tmp_path):
    table = pa.table({"problem": ["a", "b"], "answer": ["1", "2"], "skill": ["x", None]})
    pq.write_table(table, tmp_path / "s.parquet")
    problems = MathTask(MathDataConfig(train=str(tmp_path / "s.parquet"))).train_problems()
    assert [p.skill for p in problems] == ["x", ""]


# ---------------------------------------------------------------------------- errors


def error_of(cfg: MathDataConfig, kind: type[Exception] = ValueError) -> str:
    with pytest.raises(kind) as info:
        MathTask(cfg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_files_name_the_path_and_the_key(tmp_path):
    missing = tmp_path / "nope.jsonl"
    message = error_of(MathDataConfig(train=str(missing)), FileNotFoundError)
    assert "task.math.train" in message and str(missing) in message
    write_jsonl(tmp_path / "ok.jsonl", [{"problem": "p", "answer": "1"}])
    missing = tmp_path / "gone.parquet"
    cfg = MathDataConfig(train=str(tmp_path / "ok.jsonl"), test=str(missing))
    message = error_of(cfg, FileNotFoundError)
    assert "task.math.test" in message and str(missing) in message
    assert "task.math.train" in error_of(MathDataConfig(train=""))


def test_unreadable_json_names_line_and_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "p", "answer": "1"}\n\n{"problem": "q", "answer": \n')
    message = error_of(MathDataConfig(train=str(path)))
    assert "line 3" in message and str(path) in message and "JSON" in message
    path.write_text('{"problem": "p", "answer": "1"}\n["not", "an", "object"]\n')
    message = error_of(MathDataConfig(train=str(path)))
    assert "line 2" in message and "list" in message


def test_missing_column_lists_the_columns(tmp_path):
    path = write_jsonl(tmp_path / "cols.jsonl", [{"question": "p", "answer": "1"}])
    message = error_of(MathDataConfig(train=str(path)))
    assert "'problem'" in message and str(path) in message
    assert "'answer'" in message and "'question'" in message
    pq.write_table(pa.table({"problem": ["p"], "final": ["1"]}), tmp_path / "cols.parquet")
    message = error_of(MathDataConfig(train=str(tmp_path / "cols.parquet")))
    assert "'answer'" in message and "cols.parquet" in message
    assert "['problem', 'final']" in message


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ({"problem": "", "answer": "1"}, "problem"),
        ({"problem": "   ", "answer": "1"}, "problem"),
        ({"problem": "p", "answer": None}, "answer"),
        ({"problem": "p", "answer": ""}, "answer"),
        ({"problem": None, "answer": "1"}, "problem"),
    ],
)
def test_empty_or_null_values_name_the_row(tmp_path, row, what):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"problem": "ok", "answer": "1"}, row])
    message = error_of(MathDataConfig(train=str(path)))
    assert "empty or null" in message and what in message
    assert "row 2" in message and str(path) in message


def test_bad_values_in_parquet_name_the_row(tmp_path):
    pq.write_table(
        pa.table({"problem": ["a", "b", "c"], "answer": ["1", None, "3"]}),
        tmp_path / "nulls.parquet",
    )
    message = error_of(MathDataConfig(train=str(tmp_path / "nulls.parquet")))
    assert "row 2" in message and "nulls.parquet" in message and "answer" in message


def test_other_bad_inputs(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"problem": ["a", "list"], "answer": "1"}])
    assert "is a list" in error_of(MathDataConfig(train=str(path)))
    path = write_jsonl(tmp_path / "y.jsonl", [{"problem": "p", "answer": "\\boxed{3"}])
    message = error_of(MathDataConfig(train=str(path)))
    assert "unclosed" in message and "row 1" in message
    path = write_jsonl(tmp_path / "data.json", [{"problem": "p", "answer": "1"}])
    assert ".jsonl or .parquet" in error_of(MathDataConfig(train=str(path)))
    (tmp_path / "empty.jsonl").write_text("\n")
    assert "no rows" in error_of(MathDataConfig(train=str(tmp_path / "empty.jsonl")))
    (tmp_path / "broken.parquet").write_text("not parquet")
    message = error_of(MathDataConfig(train=str(tmp_path / "broken.parquet")))
    assert "unreadable Parquet" in message and "broken.parquet" in message


def test_hub_dataset_without_datasets_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    message = error_of(MathDataConfig(train="some-org/some-math-set"), DataError)
    assert "pip install 'datasets<6,>=4.0'" in message and "task.math.train" in message
