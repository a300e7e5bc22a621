"""The studies' recorded answers that `make demo` prints: clean commits only, the strongest
alternative read from the committed tables (never typed in), and the reuse study's answer or the
plain statement that it is not recorded."""

import json
from pathlib import Path

import pytest

from graft.errors import DataError
from graft.evidence import recorded

ROOT = Path(__file__).resolve().parents[1]


def test_every_committed_answer_names_clean_commits_only():
    for path in recorded.RECORDED_DIR.glob("*.json"):
        answer = recorded.load(path.stem)
        assert "-dirty" not in answer["commit"] and answer["commit"], path


def test_a_dirty_or_unknown_commit_is_refused_in_one_line(tmp_path):
    assert recorded.clean_commits("74df827, d7d7ce0") == "74df827, d7d7ce0"
    for bad in ("3e373f4-dirty, 74df827", "unknown", ""):
        with pytest.raises(DataError, match="names only clean commits"):
            recorded.clean_commits(bad)
    answer = json.loads((recorded.RECORDED_DIR / "code_study.json").read_text())
    (tmp_path / "code_study.json").write_text(json.dumps({**answer, "commit": "abc1234-dirty"}))
    with pytest.raises(DataError, match="abc1234-dirty"):
        recorded.load("code_study", tmp_path)


def test_the_alternative_is_the_one_the_committed_tables_hold():
    """SFT on the peer, then GRPO: the cells and cost ratio in code_study.json are what
    scripts/record_alternative.py reads from BENCHMARKS.md today."""
    committed = recorded.load("code_study")["alternative"]
    fresh = recorded.alternative_from_benchmarks((ROOT / "BENCHMARKS.md").read_text())
    assert committed == fresh
    assert [(c["model"], c["where"]) for c in fresh["cells"]] == [
        ("llama", "step 40"), ("qwen", "step 40"), ("llama", "equal FLOPs"), ("qwen", "equal FLOPs")
    ]  # fmt: skip
    assert fresh["cells"][0]["mean"] == pytest.approx(0.613) and fresh["cells"][0]["significant"]
    assert fresh["flops_vs_grpo"] == pytest.approx(2.92) and fresh["graft_flops_vs_grpo"] == 1.46
    lines = recorded.answer_lines(recorded.load("code_study"))
    assert any(
        line.startswith("The strongest alternative measured beside it, SFT") for line in lines
    )


def test_the_reuse_answer_or_that_there_is_none():
    assert recorded.reuse_lines(None)[0].startswith("**Reuse is not recorded yet.**")
    cell = {"arm": "a", "label": "stored a", "model": "llama", "skill": "sum", "mean": 0.12,
            "low": 0.05, "high": 0.19, "n": 5, "significant": True}  # fmt: skip
    answer = {"seeds": [10, 11, 12, 13, 14], "commit": "ed42398", "tests": 8, "cells": [cell],
              "retention": {"llama": {"ratio": 0.64, "low": 0.3, "high": 0.9},
                            "qwen": {"ratio": 0.2, "low": None, "high": None}}}  # fmt: skip
    text = "\n".join(recorded.reuse_lines(answer))
    assert "run at commit ed42398; Holm over its 8 primary tests" in text
    assert "- stored a, llama `sum`: +12.0 [+5.0, +19.0] (significant)" in text
    assert "llama: the same seed's log keeps 0.64 [0.30, 0.90] of the online gain" in text
    assert "qwen: the same seed's log keeps undefined" in text


def test_the_reuse_study_records_nothing_run_at_a_dirty_tree():
    from graft.evidence.reuse_report import reduce

    result = {"primary": [], "arms": {}, "seeds": [0, 1], "retention": {},
              "commits": ["ed42398", "ed42398-dirty"]}  # fmt: skip
    with pytest.raises(DataError, match="ed42398-dirty"):
        reduce(result)
    assert reduce({**result, "commits": ["ed42398"]})["commit"] == "ed42398"
