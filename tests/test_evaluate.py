"""Evaluation: estimators against brute force, fake generators, determinism, tables and plots."""

import itertools
import json
import random

import pytest
from PIL import Image

from graft.cli import main
from graft.eval.evaluate import EvalSettings, avg_at_k, evaluate_runs, pass_at_k
from graft.eval.report import markdown_table, write_eval
from graft.eval.suites import load_suites
from graft.types import Completion, Rollout
from graft.verify.pool import VerifierPool


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
def test_pass_at_k_equals_brute_force(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_avg_at_k_is_the_mean_correctness():
    rng = random.Random(0)
    rows = [[rng.random() < 0.4 for _ in range(8)] for _ in range(30)]
    assert avg_at_k(rows) == pytest.approx(sum(map(sum, rows)) / 240)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


class FakeGenerator:
    """Answers every problem with its gold answer (oracle) or with nothing useful."""

    def __init__(self, name, correct):
        self.names = (name,)
        self.correct = correct

    def generate(self, problems, *, n, params, seeds):
        text = (
            (lambda p: f"So the answer is $\\boxed{{{p.gold}}}$.")
            if self.correct
            else (lambda p: "I do not know.")
        )
        return {
            self.names[0]: [
                Rollout(
                    p,
                    self.names[0],
                    (1,),
                    tuple(Completion(text(p), (1,), (0.0,), "stop") for _ in range(n)),
                )
                for p in problems
            ]
        }


def test_oracle_scores_100_and_a_hopeless_model_0(tmp_path):
    suites = load_suites(["fixture"])
    settings = EvalSettings(k=4, runs=2, max_new_tokens=16)
    result = {"models": {}}
    with VerifierPool(workers=1) as pool:
        for name, correct in (("oracle", True), ("hopeless", False)):
            out = evaluate_runs(
                FakeGenerator(name, correct), suites, settings, pool=pool, progress=False
            )
            result["settings"] = out["settings"]
            result["models"][name] = out["models"][name]
    oracle, hopeless = result["models"]["oracle"], result["models"]["hopeless"]
    assert oracle["suites"]["fixture"]["avg@4"] == {"mean": 1.0, "std": 0.0, "runs": [1.0, 1.0]}
    assert oracle["suites"]["fixture"]["pass@4"]["mean"] == 1.0
    assert hopeless["average"]["avg@4"]["mean"] == 0.0
    n = len(suites[0].problems)
    assert hopeless["suites"]["fixture"]["verdicts"] == {
        "correct": 0,
        "wrong": 0,
        "no_answer": 2 * 4 * n,
        "timeout": 0,
        "error": 0,
    }
    table = write_eval(tmp_path, result, baseline="hopeless")
    assert "| oracle | 100.0 ± 0.0 | 100.0 ± 0.0 | +100.0 |" in table
    assert json.loads((tmp_path / "eval.json").read_text())["models"]["oracle"]
    with pytest.raises(ValueError, match="baseline"):
        markdown_table(result, baseline="nobody")


def _eval_cli(tmp_path, *extra):
    out = tmp_path / "ev"
    args = [
        "eval",
        "--model",
        "tiny:llama-char-add",
        "--suite",
        "test",
        "--k",
        "4",
        "--runs",
        "2",
        "--limit",
        "25",
        "--temperature",
        "1.0",
        "--top-p",
        "1.0",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
        *extra,
    ]
    assert main(args) == 0
    return json.loads((out / "eval.json").read_text())


def test_eval_is_deterministic_and_runs_use_different_seeds(tmp_path):
    first = _eval_cli(tmp_path)
    second = _eval_cli(tmp_path)
    assert first == second
    seeds = first["settings"]["run_seeds"]
    assert len(set(seeds)) == 2
    runs = first["models"]["tiny:llama-char-add"]["suites"]["test"]["avg@4"]["runs"]
    assert runs[0] != runs[1]  # different seeds sample differently
    other = _eval_cli(tmp_path, "--seed", "1")
    assert other["settings"]["run_seeds"] != seeds


def test_run_directory_gives_curves_table_and_best_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    sets = [
        "run.steps=4",
        "run.progress=false",
        "run.save_every=0",
        "eval.every=2",
        "eval.num_problems=20",
        "eval.suites=[test]",
        "eval.validation=val",
        "rollout.prompts_per_step=8",
        "rollout.group_size=4",
        "rollout.max_new_tokens=8",
        "models.0.name=llama",
        "models.0.path=tiny:llama-char-add",
        "models.0.optim.lr=2e-5",
        "algo.minibatches=2",
        "verify.workers=1",
    ]
    args = ["train", "--out", str(run_dir)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best/llama/suite"] == "val" and summary["best/llama/step"] in (0, 2, 4)
    assert (run_dir / "checkpoints" / "best" / "llama" / "model.safetensors").is_file()

    png = tmp_path / "curves.png"
    assert main(["plot", str(run_dir), str(run_dir), "--out", str(png)]) == 0
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size[0] > 400
    from graft.eval.report import plot_runs

    counts = plot_runs([run_dir, run_dir], tmp_path / "again.png")
    assert counts == {"reward": 2, "eval": 4}  # 2 runs x (test, val)

    out = tmp_path / "eval_out"
    assert (
        main(
            [
                "eval",
                "--run",
                str(run_dir),
                "--k",
                "2",
                "--runs",
                "2",
                "--limit",
                "10",
                "--out",
                str(out),
                "--baseline",
                "run/llama/final",
            ]
        )
        == 0
    )
    table = (out / "eval.md").read_text()
    assert "| run/llama/final |" in table and "| run/llama/best |" in table
    assert "Δ vs run/llama/final" in table
