"""`models.N.activation_checkpointing`: each decoder layer keeps only its input for the backward
pass and runs again there. The gradients are those without it, bit for bit; the activations kept
for the backward are a fraction of what they were; a KL term's reference keeps its own layers."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file

from conftest import random_llama
from graft.models.modeling import checkpoint_layers, pack, response_logprobs


def _saved_bytes_and_grads(model) -> tuple[int, list[torch.Tensor]]:
    """A backward of a batch's response log-probs: the bytes its forward saved for the backward,
    and the gradients."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 32, (12,), generator=gen).tolist() for _ in range(4)]
    responses = [torch.randint(2, 32, (20,), generator=gen).tolist() for _ in range(4)]
    saved = [0]

    def pack_hook(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack_hook, lambda t: t):
        logp = response_logprobs(model, pack(prompts, responses, pad_id=0))
    logp.sum().backward()
    return saved[0], [p.grad.clone() for p in model.parameters()]


def test_the_gradients_stay_and_the_kept_activations_shrink():
    plain = random_llama(vocab=32, layers=4)
    recomputed = checkpoint_layers(copy.deepcopy(plain))
    kept, grads = _saved_bytes_and_grads(plain)
    kept_recomputed, grads_recomputed = _saved_bytes_and_grads(recomputed)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_recomputed))
    assert kept_recomputed < 0.35 * kept, (kept_recomputed, kept)
    with torch.no_grad():  # sampling and scoring run as before
        ids = torch.tensor([[3, 4, 5]])
        assert torch.equal(plain(input_ids=ids).logits, recomputed(input_ids=ids).logits)


RUN = [
    "run.steps=2",
    "run.save_every=2",
    "run.progress=false",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "algo.micro_batch_size=4",
    "algo.kl_coef=0.1",  # the reference must keep running its own (starting) layers
    "models.0.optim.lr=1e-3",
    "algo.share_prompts=false",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shards", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_run_with_it_trains_as_without_it(tmp_path, shards):
    """`graft train` with a KL term: 2 steps with activation checkpointing give the weights and
    the KL statistics of the same run without it, bit for bit (on 2 ranks, to the float addition
    order of two sharded runs). Its update runs each sequence whole (a shared prompt's KV cache
    would be extended twice by a recomputed layer), so the run without it does too here."""
    from graft.cli import main
    from graft.rundir import read_metrics

    backend = "processes" if shards > 1 else "inprocess"
    base = [*RUN, f"models.0.shards={shards}", f"run.backend={backend}"]
    for name, extra in (("plain", []), ("recomputed", ["models.0.activation_checkpointing=true"])):
        args = ["train", "configs/grpo_tiny.yaml", "--out", str(tmp_path / name)]
        assert main(args + [a for o in [*base, *extra] for a in ("--set", o)]) == 0
    weights = [
        load_file(str(tmp_path / n / "checkpoints/step_000002/llama/model.safetensors"))
        for n in ("plain", "recomputed")
    ]
    worst = max(((weights[1][k] - w).norm() / w.norm()).item() for k, w in weights[0].items())
    assert worst <= (0.0 if shards == 1 else 1e-5), worst
    kl = [[r["loss/kl"] for r in read_metrics(tmp_path / n)] for n in ("plain", "recomputed")]
    assert kl[1] == pytest.approx(kl[0], rel=1e-5) and kl[0][-1] > 0
