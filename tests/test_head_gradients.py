"""The output head's weight gradient accumulates in place (`head_gradients_in_place`): with an
embedding tied to the head, a backward pass no longer sums the two vocabulary-sized gradients into
a third matrix. The gradients, outputs, state dict and copies are those of the plain model."""

from __future__ import annotations

import copy

import torch
from torch.profiler import ProfilerActivity, profile

from conftest import random_llama
from graft.models.modeling import HeadLinear, head_gradients_in_place, pack, response_logprobs


def _backward(model) -> tuple[list[torch.Tensor], list[str]]:
    """The gradients of a batch's response log-probs, and the additions of two vocabulary x
    hidden matrices the backward pass made, in-place or not."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 512, (6,), generator=gen).tolist() for _ in range(3)]
    responses = [torch.randint(2, 512, (5,), generator=gen).tolist() for _ in range(3)]
    model.zero_grad(set_to_none=True)
    logp = response_logprobs(model, pack(prompts, responses, pad_id=0))
    shape = list(model.get_output_embeddings().weight.shape)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        logp.sum().backward()
    adds = [
        e.name
        for e in prof.events()
        if e.name in ("aten::add", "aten::add_") and e.input_shapes[:2] == [shape, shape]
    ]
    return [p.grad.clone() for p in model.parameters()], adds


def test_a_tied_head_gradient_is_added_in_place_with_the_same_values():
    plain = random_llama(vocab=512)
    fixed = head_gradients_in_place(copy.deepcopy(plain))
    assert type(fixed.lm_head) is HeadLinear
    assert fixed.lm_head.weight is fixed.model.embed_tokens.weight  # still tied
    grads, adds = _backward(plain)
    fixed_grads, fixed_adds = _backward(fixed)
    assert adds == ["aten::add"]  # what the plain head costs: a third matrix
    assert fixed_adds == ["aten::add_"]
    assert all(torch.equal(a, b) for a, b in zip(grads, fixed_grads))


def test_outputs_state_dict_and_copies_are_the_plain_models():
    plain = random_llama(vocab=64)
    fixed = head_gradients_in_place(copy.deepcopy(plain))
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(plain(input_ids=ids).logits, fixed(input_ids=ids).logits)
    assert plain.state_dict().keys() == fixed.state_dict().keys()
    twin = copy.deepcopy(fixed)  # a copy runs its own weights, not the original's
    with torch.no_grad():
        twin.lm_head.weight.mul_(0.0)
        assert not torch.equal(twin(input_ids=ids).logits, fixed(input_ids=ids).logits)
    assert head_gradients_in_place(fixed).lm_head.__class__ is HeadLinear  # twice: no change
