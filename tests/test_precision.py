"""Mixed precision: float32 master weights and AdamW state, forward and backward in the compute
dtype (autocast), log-probs and the loss in float32; pure low-precision weights only as an opt-in
that warns; float16 compute with a dynamic loss scaler whose state a checkpoint keeps."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from graft.config import AlgoConfig, ModelConfig, OptimConfig, RolloutConfig
from graft.models.precision import Precision, low_precision_warning
from graft.rollout import SamplingParams
from graft.training.policy import Policy, PolicySpec
from graft.types import Problem, TrainGroup, TrainSequence

LR = 1e-6
PROBLEMS = [Problem(prompt=f"{a}+{a + 3}=", gold=str(2 * a + 3)) for a in range(10, 18)]
PARAMS = SamplingParams(max_new_tokens=8)


def _spec(path: str, dtype: str, param_dtype: str = "float32") -> PolicySpec:
    return PolicySpec(
        model=ModelConfig(
            name="p",
            path=path,
            dtype=dtype,
            param_dtype=param_dtype,
            device="cpu",
            optim=OptimConfig(lr=LR),
        ),
        rollout=RolloutConfig(prompts_per_step=8, group_size=4, max_new_tokens=8),
        algo=AlgoConfig(minibatches=1),
        seed=0,
    )


def _policy(path: str, dtype: str, param_dtype: str = "float32") -> Policy:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Policy(_spec(path, dtype, param_dtype))


def _groups(policy: Policy) -> list[TrainGroup]:
    """Rollouts of `policy` with fixed pseudo-random advantages (the same for every trainee)."""
    g = torch.Generator().manual_seed(0)
    return [
        TrainGroup(
            r.problem.id,
            tuple(
                TrainSequence(
                    r.prompt_ids,
                    c.token_ids,
                    c.logprobs,
                    float(torch.randn(1, generator=g)),
                )
                for c in r.completions_G
            ),
        )
        for r in policy.generate(PROBLEMS, n=4, params=PARAMS, seed=1)
    ]


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def _update(policy: Policy, groups: list[TrainGroup], steps: int = 3) -> torch.Tensor:
    """The weight change of `steps` updates on the same groups."""
    before = _flat(policy.model)
    for step in range(steps):
        policy.train(groups, seed=step)
    return _flat(policy.model) - before


@pytest.fixture(scope="module")
def fp32_reference(tiny_paths):
    """Rollouts of the float32 policy and the weight change of 3 float32 updates on them."""
    policy = _policy(tiny_paths["llama"], "float32")
    groups = _groups(policy)
    return groups, _update(policy, groups)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_compute_at_lr_1e_6_moves_every_weight_like_the_fp32_master_reference(
    tiny_paths, fp32_reference, dtype
):
    groups, delta_ref = fp32_reference
    policy = _policy(tiny_paths["llama"], dtype)
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    delta = _update(policy, groups)
    state = policy.optimizer.state_dict()["state"]
    assert all(v.dtype == torch.float32 for s in state.values() for v in s.values() if v.ndim)
    assert (delta != 0).float().mean() > 0.99  # every weight moves, none rounded away
    # The update equals float32 training's up to the compute dtype's rounding of the gradient.
    rel = float((delta - delta_ref).norm() / delta_ref.norm())
    cos = float(torch.nn.functional.cosine_similarity(delta, delta_ref, dim=0))
    assert rel < 0.15 and cos > 0.99, (rel, cos)
    assert float((delta - delta_ref).abs().max()) < 3 * LR * 3  # 3 steps, each at most ~lr


def test_pure_bf16_weights_are_an_opt_in_that_warns_and_loses_most_updates(
    tiny_paths, fp32_reference
):
    groups, delta_ref = fp32_reference
    with pytest.warns(UserWarning, match=r"models\.0\.param_dtype=bfloat16: .*round to nothing"):
        policy = Policy(_spec(tiny_paths["llama"], "bfloat16", "bfloat16"))
    assert all(p.dtype == torch.bfloat16 for p in policy.model.parameters())
    delta = _update(policy, groups)
    # The failure the master weights prevent: most AdamW steps are below bf16's spacing.
    assert (delta != 0).float().mean() < 0.1
    assert float((delta - delta_ref).norm() / delta_ref.norm()) > 0.5


def test_bf16_sampling_logprobs_match_the_training_forward_at_step_0(tiny_paths):
    policy = _policy(tiny_paths["llama"], "bfloat16")
    groups = _groups(policy)  # sampled under bf16 autocast
    seqs = [q for g in groups for q in g.sequences]
    scored = policy.score([q.prompt_ids for q in seqs], [q.response_ids for q in seqs])
    gap = max(abs(a - b) for q, s in zip(seqs, scored) for a, b in zip(q.old_logprobs, s))
    assert gap < 2e-2, gap  # bf16 rounding of a cached vs a full forward, not a dtype mismatch
    stats = policy.train(groups, seed=0)  # one minibatch: the ratio is taken before any step
    assert abs(stats["loss/ratio_mean"] - 1) < 1e-3, stats["loss/ratio_mean"]


def test_fp16_loss_scaler_skips_an_overflowing_step_and_its_state_survives_a_checkpoint(
    tiny_paths, fp32_reference, tmp_path
):
    groups, _ = fp32_reference
    policy = _policy(tiny_paths["llama"], "float16")
    assert policy.precision.scaler is not None
    scaler = policy.precision.scaler
    scaler.load_state_dict({**scaler.state_dict(), "scale": 2.0**120})  # float16 overflows
    before = _flat(policy.model)
    stats = policy.train(groups, seed=0)
    assert stats["optim/skipped_steps"] == 1.0
    assert torch.equal(_flat(policy.model), before)  # the skipped step changed nothing
    assert policy.precision.scaler.get_scale() == 2.0**119  # and the scale backed off
    stats = policy.train(groups, seed=1)
    policy.save(tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / "policy_state.json").read_text())
    assert saved["precision"]["skipped_steps"] >= 1
    other = _policy(tiny_paths["llama"], "float16")
    other.load(tmp_path / "ckpt")
    assert other.precision.scaler.get_scale() == policy.precision.scaler.get_scale()
    assert other.precision.state_dict() == policy.precision.state_dict()


def test_float32_compute_runs_no_autocast_and_no_scaler():
    p = Precision("float32", "float32")
    assert not p.autocasts and p.scaler is None
    with p.forward():
        assert not torch.is_autocast_enabled("cpu")
    with Precision("bfloat16", "float32").forward():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert Precision("bfloat16", "float32").scaler is None  # bf16 needs no loss scaling
    assert Precision("float16", "float16").scaler is None  # fp16 gradients cannot be unscaled


def test_low_precision_warning_names_the_key_and_the_fix():
    assert low_precision_warning("bfloat16", "float32", key="models.1") is None
    text = low_precision_warning("bfloat16", "bfloat16", key="models.1")
    assert text.startswith("models.1.param_dtype=bfloat16") and "dtype=bfloat16" in text
