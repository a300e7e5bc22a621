"""Sharing each distinct prompt's KV cache across its responses changes no number: sampling and the
log-prob forward (values and gradients) equal the plain paths that repeat every prompt."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from graft.models.modeling import distinct_rows, pack, response_logprobs, shared_prompt_logprobs
from graft.rollout.generate import SamplingParams, sample


def _rows(vocab: int, seed: int, *, prompts: int, copies: int, max_resp: int):
    rng = random.Random(seed)
    distinct = [[rng.randrange(3, vocab) for _ in range(rng.randint(2, 9))] for _ in range(prompts)]
    rows = [p for p in distinct for _ in range(copies)]
    rng.shuffle(rows)  # copies of a prompt need not be adjacent
    responses = [[rng.randrange(3, vocab) for _ in range(rng.randint(1, max_resp))] for _ in rows]
    return rows, responses


def test_distinct_rows_keeps_first_seen_order():
    distinct, index = distinct_rows([[5, 6], [7], [5, 6], [7], [8, 9, 1]])
    assert distinct == [(5, 6), (7,), (8, 9, 1)]
    assert index == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_shared_prompt_forward_equals_the_plain_forward_and_its_gradient(tiny_paths, arch):
    model = AutoModelForCausalLM.from_pretrained(tiny_paths[arch]).eval()
    prompts, responses = _rows(model.config.vocab_size, 0, prompts=4, copies=3, max_resp=6)
    responses[0] = responses[0][:1]  # a one-token response reads only the prompt's logits

    def run(fn):
        model.zero_grad()
        logp_BT = fn()
        weights_BT = torch.linspace(-1, 1, logp_BT.numel()).view_as(logp_BT)
        (logp_BT * weights_BT).sum().backward()
        return logp_BT.detach(), [p.grad.clone() for p in model.parameters()]

    shared, shared_grads = run(
        lambda: shared_prompt_logprobs(model, prompts, responses, pad_id=0, temperature=0.7)
    )
    plain, plain_grads = run(
        lambda: response_logprobs(model, pack(prompts, responses, pad_id=0), temperature=0.7)
    )
    assert shared.shape == plain.shape
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    assert bool((plain != 0).any())
    for a, b in zip(shared_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_shared_prompt_sampling_draws_the_same_samples(tiny_paths, arch):
    model = AutoModelForCausalLM.from_pretrained(tiny_paths[arch]).eval()
    prompts, _ = _rows(model.config.vocab_size, 1, prompts=6, copies=5, max_resp=1)
    runs = [
        sample(
            model,
            prompts,
            SamplingParams(max_new_tokens=10),
            stop_ids=[1],
            pad_id=0,
            row_seeds=list(range(len(prompts))),
            share_prompts=share,
        )
        for share in (True, False)
    ]
    assert [s.token_ids for s in runs[0]] == [s.token_ids for s in runs[1]]
    assert len({s.token_ids for s in runs[0]}) > 6  # copies of a prompt drew different samples
    worst = max(abs(a - b) for x, y in zip(*runs) for a, b in zip(x.logprobs, y.logprobs))
    assert worst < 1e-5
