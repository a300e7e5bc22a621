"""The list-functions code task: its problems, tests and reference programs, the noise the tiny
models are pre-trained with, the code verdict reasons, and a run through `graft train`."""

import random

import pytest

from graft.config import ConfigError, ListFunctionsConfig
from graft.sandbox import isolation_problem
from graft.tasks.list_functions import (
    SKILLS,
    ListFunctionsTask,
    Spec,
    all_specs,
    problem_tests,
    respond,
)
from graft.verify.code.verifier import parse_tests, verify_code
from graft.verify.registry import verdict_counts

needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")


def task(**kw) -> ListFunctionsTask:
    return ListFunctionsTask(ListFunctionsConfig(**kw), runs_code=False)


def test_a_problem_reads_as_words_and_its_program_as_one_line():
    spec = Spec("sum", "odd", map="muladd", a=3, b=1)
    assert spec.prompt() == "f(xs): sum of v*3+1 for odd v"
    assert spec.program() == "def f(xs):\n    return sum(v*3+1 for v in xs if v%2==1)\n"
    assert spec.apply([1, 2, 3]) == (1 * 3 + 1) + (3 * 3 + 1)  # 14
    listed = Spec("list", "gt", k=4, map="sq")
    assert listed.prompt() == "f(xs): list of v*v for v>4"
    assert listed.program() == "def f(xs):\n    return [v*v for v in xs if v>4]\n"
    assert listed.apply([5, 4, 9, 0]) == [25, 81]
    assert Spec("list", "all", map="add", a=2).apply([0, 7]) == [2, 9]
    assert Spec("sum", "even", map="mul", a=9).apply([2, 3, 4]) == 54


def test_the_problem_space_and_the_splits_are_disjoint_and_deterministic():
    assert [len(all_specs(r)) for r in SKILLS] == [1092, 1092, 1001]
    a, b = task(), task()
    assert [p.id for p in a.train_problems()] == [p.id for p in b.train_problems()]
    sizes = (len(a.train_problems()), len(a.test_problems()), len(a.val_problems()))
    assert sizes == (1600, 200, 100)
    prompts = [
        {p.prompt for p in s} for s in (a.train_problems(), a.test_problems(), a.val_problems())
    ]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    skills = [p.skill for p in a.test_problems()]
    assert skills.count("list") == skills.count("sum") == 100
    assert task(seed=7).test_problems() != a.test_problems()


def test_every_problem_has_four_tests_no_constant_passes_and_the_filter_matters():
    for reducer in SKILLS:
        for spec in all_specs(reducer):
            tests = parse_tests(problem_tests(spec, 1234).to_gold())
            assert len(tests.calls) == 4 and tests.function == "f"
            answers = [repr(e) for e in tests.expected]
            assert len(set(answers)) > 1, spec
            for (xs,), want in zip(tests.calls, tests.expected, strict=True):
                assert want == spec.apply(xs)
                kept = sum(spec.keeps(v) for v in xs)
                assert kept >= 1 and (spec.filter == "all" or kept < len(xs)), spec


def test_pretraining_noise_is_a_plausible_program_that_is_not_the_reference():
    t, rng = task(), random.Random(0)
    for problem in t.train_problems()[:200]:
        wrong = t.wrong_solution(problem, rng)
        assert wrong != t.solution(problem)
        assert wrong.startswith("```python\ndef f(xs):\n    return ") and wrong.endswith("```")


def test_an_unknown_reducer_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"task\.list_functions\.skills: unknown skill 'min'"):
        task(skills=("list", "min"))


@needs_sandbox
def test_the_third_reducer_is_max_and_its_references_pass_while_the_others_do_not():
    t = task(skills=("list", "sum", "max"), num_train=300, num_test=30, num_val=30)
    assert {p.skill for p in t.test_problems()} == {"list", "sum", "max"}
    assert not [s for s in all_specs("max") if s.filter == "gt" and s.k == 8]
    spec = Spec("max", "gt", 3, "mul", 2)
    assert spec.prompt() == "f(xs): max of v*2 for v>3"
    assert spec.program() == "def f(xs):\n    return max(v*2 for v in xs if v>3)\n"
    assert spec.apply([1, 5, 4, 2]) == 10
    for p in [p for p in t.test_problems() if p.skill == "max"][:6]:
        assert verify_code(t.solution(p), p.gold).category == "correct"
        as_sum = t.solution(p).replace("return max(", "return sum(")
        assert verify_code(as_sum, p.gold).category == "wrong"


@needs_sandbox
def test_references_pass_their_tests_in_the_sandbox_and_noise_mostly_fails():
    t, rng = ListFunctionsTask(ListFunctionsConfig()), random.Random(1)
    assert t.verifier == "code"
    problems = t.test_problems()[:12]
    for p in problems:
        assert verify_code(t.solution(p), p.gold).category == "correct"
    failed = [verify_code(t.wrong_solution(p, rng), p.gold).category for p in problems]
    assert failed.count("wrong") >= 10


@needs_sandbox
def test_code_verdicts_are_counted_by_the_code_reasons():
    gold = problem_tests(Spec("sum", "all"), 1234).to_gold()
    verdicts = [
        verify_code(respond("def f(xs):\n    return sum(xs)\n"), gold),
        verify_code(respond("def f(xs):\n    return 1 / 0\n"), gold),
        verify_code(respond("def f(xs):\n    return 0\n"), gold),
        verify_code("no code here", gold),
        verify_code(respond("def f(xs): pass\n"), "{not json"),
    ]
    counts = verdict_counts(verdicts, "code")
    assert counts["verdict/correct"] == 1 and counts["verdict/wrong"] == 2
    assert counts["verdict/wrong/runtime_error"] == 1 and counts["verdict/wrong/wrong"] == 1
    assert counts["verdict/no_answer/no_code_block"] == 1
    assert counts["verdict/error/unusable_tests"] == 1
    assert "verdict/wrong/several_boxes" not in counts
    assert "verdict/wrong/one_answer" in verdict_counts(verdicts)  # math keys stay as they were


def small_code_model(seed: int = 3, weights: tuple[float, ...] = ()) -> str:
    """A small Llama briefly pre-trained on the list-functions task (builds in seconds)."""
    from conftest import small_tiny_spec
    from graft.models.tiny import build_tiny

    task = ListFunctionsConfig(num_train=400, num_test=40, num_val=0)
    spec = small_tiny_spec(task=task, noise=0.3, pretrain_steps=200, lr=2e-3, seed=seed,
                           skill_weights=weights)  # fmt: skip
    return str(build_tiny(spec))


def code_config(tmp_path, model: str) -> str:
    import yaml

    cfg = {
        "run": {"out_dir": str(tmp_path / "run"), "steps": 2, "save_every": 0, "threads": 1},
        "task": {"name": "list_functions",
                 "list_functions": {"num_train": 400, "num_test": 40, "num_val": 0}},
        "models": [{"name": "a", "path": model}, {"name": "b", "path": model}],
        "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 80},
        "exchange": {"enabled": True},
        "eval": {"every": 2, "num_problems": 6, "samples": 2},
    }  # fmt: skip
    path = tmp_path / "code.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.slow
@needs_sandbox
@pytest.mark.timeout(600)
def test_train_eval_and_probe_run_on_code(tmp_path):
    """`graft train` (two policies, exchange on), `graft eval` of the run and `graft probe` of
    the config, all on the code task through the sandbox: code verdict reasons in the metrics,
    the exchange's diagnostics, held-out pass@1, and the probe's report."""
    import json

    from graft.cli import main
    from graft.rundir import read_metrics

    config = code_config(tmp_path, small_code_model())
    assert main(["train", config]) == 0
    records = read_metrics(tmp_path / "run")
    last = records[-1]
    assert last["step"] == 2 and 0.0 <= last["m/a/reward/mean"] <= 1.0
    for name in ("a", "b"):
        counted = sum(last[f"m/{name}/verdict/{c}"] for c in ("correct", "wrong", "no_answer"))
        assert counted + last[f"m/{name}/verdict/timeout"] == 16
        assert f"m/{name}/verdict/wrong/runtime_error" in last
        assert f"m/{name}/verdict/wrong/one_answer" not in last
        assert 0.0 <= last[f"m/{name}/eval/test/avg@2"] <= 1.0
    assert "x/a->b/prompts_grafted" in last and "x/b->a/responses_sent" in last
    out = tmp_path / "eval"
    run = str(tmp_path / "run")
    assert (
        main(["eval", "--run", run, "--k", "2", "--runs", "1", "--limit", "4", "--out", str(out)])
        == 0
    )
    suite = json.loads((out / "eval.json").read_text())["models"]["run/a/final"]["suites"]["test"]
    assert suite["problems"] == 4 and sum(suite["verdicts"].values()) == 8
    assert set(suite["skills"]) == {"list/avg@2", "sum/avg@2"}
    assert "wrong/runtime_error" in suite["verdict_reasons"]
    probe = tmp_path / "probe"
    assert main(["probe", "--config", config, "--steps", "1", "--out", str(probe)]) == 0
    body = json.loads((probe / "probe.json").read_text())
    first = body["raw"]["steps"][0]
    assert len(first["correct"]["a"]) == 4 and set(first["directions"]) == {"a->b", "b->a"}


@pytest.mark.parametrize("name", ["grpo_code.yaml", "graft_code.yaml"])
def test_the_shipped_code_configs_load_and_match_their_presets_problem_set(name):
    """Each preset a code config trains was pre-trained on the config's own problem set, so the
    held-out split it is evaluated on was never in its pre-training data."""
    from pathlib import Path

    from graft.config import Config, load_config
    from graft.models.tiny_specs import TINY_PRESETS

    cfg = load_config(Config, Path(__file__).parent.parent / "configs" / name)
    assert cfg.task.name == "list_functions"
    for model in cfg.models:
        spec = TINY_PRESETS[model.path.removeprefix("tiny:")]
        assert spec.task == cfg.task.list_functions, model.path


@needs_sandbox
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_graft_on_the_code_pair_replaces_failed_groups_with_the_peers(tmp_path):
    """configs/graft_code.yaml for 3 steps: each model fails whole groups on the other's reducer
    and receives the peer's programs there, with the paper's weight."""
    from pathlib import Path

    from graft.cli import main
    from graft.rundir import read_metrics

    config = Path(__file__).parent.parent / "configs" / "graft_code.yaml"
    sets = ["run.steps=3", "eval.every=0", f"run.out_dir={tmp_path / 'run'}"]
    assert main(["train", str(config), *[a for s in sets for a in ("--set", s)]]) == 0
    records = read_metrics(tmp_path / "run")
    for direction in ("qwen->llama", "llama->qwen"):
        grafted = sum(r[f"x/{direction}/prompts_grafted"] for r in records)
        admitted = sum(r[f"x/{direction}/admitted"] for r in records)
        assert grafted >= 1 and admitted >= 1, direction
