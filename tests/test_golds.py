"""Unusable gold answers are found when the data is loaded: counted, named, refused above
`verify.max_unparseable_golds`, left out of training below it; verdict reasons reach the training
metrics."""

from __future__ import annotations

import json

import pytest

from graft.cli import main
from graft.config import Config, load_config
from graft.rundir import read_metrics
from graft.tasks.math_data import FIXTURE_PATH
from graft.trainer import Trainer
from graft.types import Problem
from graft.verify.golds import check_golds, require_golds, usable_problems
from graft.verify.pool import VerifierPool

GOLDS = ["12:00", "\\frac{1}{2", "4.5e33", "1, 2, \\ldots", "1 + \\foo", "5.", "", "\\mathrm{e}"]


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=1, timeout_s=5.0) as p:
        yield p


def test_check_golds_counts_and_names_the_unusable_ones(pool):
    problems = [Problem(prompt=f"q{i}", gold=g) for i, g in enumerate(GOLDS)]
    problems[6] = Problem(prompt="q6", gold="\\frac{1}{0}")
    check = check_golds(pool, "math", problems, where="train.jsonl")
    assert [n for n, _, _ in check.bad] == [2, 5, 7]  # 1-based problem numbers
    assert check.total == 8 and check.fraction == pytest.approx(3 / 8)
    summary = check.summary()
    assert summary.startswith("train.jsonl: 3 of 8 gold answers cannot be parsed")
    assert "problem 2: '\\\\frac{1}{2'" in summary and "problem 7" in summary
    assert [p.gold for p in usable_problems(check, problems)] == [
        "12:00",
        "4.5e33",
        "1, 2, \\ldots",
        "5.",
        "\\mathrm{e}",
    ]
    require_golds(check, max_fraction=0.5)
    with pytest.raises(ValueError, match=r"max_unparseable_golds=0\.1"):
        require_golds(check, max_fraction=0.1)
    # integer golds for the arithmetic verifier; plug-ins are not checked
    ints = [Problem("a", "12"), Problem("b", "twelve")]
    assert [n for n, _, _ in check_golds(pool, "final_number", ints, where="x").bad] == [2]
    assert check_golds(pool, "hanging_verifier:check", ints, where="x") is None


def _math_sets(data: str, *extra: str) -> list[str]:
    sets = [
        "task.name=math",
        f"task.math.train={data}",
        "run.progress=false",
        "rollout.prompts_per_step=4",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "algo.minibatches=1",
        "verify.workers=1",
        *extra,
    ]
    return [a for s in sets for a in ("--set", s)]


def test_training_refuses_data_with_too_many_unusable_golds(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    rows = [{"problem": f"P{i}?", "answer": g} for i, g in enumerate(["1", "\\frac{1}{2", "3"])]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["train", "--out", str(tmp_path / "run"), *_math_sets(str(data))])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("graft: error: task.math.train")
    assert "1 of 3 gold answers" in err and "problem 2" in err
    assert "verify.max_unparseable_golds=0.05" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_training_leaves_unusable_golds_out_and_counts_reasons(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    lines = FIXTURE_PATH.read_text().splitlines()[:6]
    rows = [json.loads(line) for line in lines]
    rows[3]["answer"] = "1 + \\foo"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = _math_sets(str(data), "verify.max_unparseable_golds=0.2", "run.steps=1")
    run_dir = tmp_path / "run"
    assert main(["train", "--out", str(run_dir), *args]) == 0
    out = capsys.readouterr()
    assert "1 of 6 gold answers cannot be parsed" in out.out + out.err
    (record,) = read_metrics(run_dir)
    assert record["verdict/no_answer"] == sum(
        record[f"verdict/no_answer/{r}"]
        for r in ("no_box", "empty_box", "unparseable_answer", "other")
    )
    assert record["verdict/error"] == 0  # the unusable problem is not trained on

    cfg = load_config(Config, None, [s for s in args[1::2]])
    trainer = Trainer(cfg)
    try:
        golds = {p.gold for p in trainer.train_problems}
        assert len(trainer.train_problems) == 5 and "1 + \\foo" not in golds
    finally:
        trainer.close()


def test_answer_line_extraction_needs_the_math_verifier(tmp_path, capsys):
    code = main(["train", "--set", "verify.extract=answer_line"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("graft: error: verify.extract")
    assert "final_number" in err
