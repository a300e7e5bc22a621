"""Log-probabilities of response tokens under a causal LM (shared by scoring and training).

Sequences are `prompt_ids + response_ids`, right-padded into one batch. The log-prob of response
token j is read from the logits at the position before it, divided by the sampling temperature so
that it is the log-prob of the distribution the tokens were sampled from.

A rollout batch repeats each prompt n times (one row per response). `shared_prompt_logprobs` runs
each distinct prompt once, repeats its KV cache (differentiably) for every response row and runs the
responses against it: the same numbers as the plain forward up to float rounding, for a fraction of
the prompt work. Likewise identical (prompt, response) rows, common once a policy answers a prompt
the same way several times, run once and their log-probs are copied (differentiably) to every copy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedBatch:
    input_ids_BL: torch.Tensor
    attention_mask_BL: torch.Tensor
    gather_index_BT: torch.Tensor
    """Position whose logits predict each response token."""
    target_ids_BT: torch.Tensor
    response_mask_BT: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask_BT.sum())

    def to(self, device: torch.device) -> PackedBatch:
        if self.input_ids_BL.device == device:
            return self
        return PackedBatch(
            *(
                t.to(device)
                for t in (
                    self.input_ids_BL,
                    self.attention_mask_BL,
                    self.gather_index_BT,
                    self.target_ids_BT,
                    self.response_mask_BT,
                )
            )
        )


def _check_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> None:
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("a sequence has an empty prompt; the first response token needs context")


def pack(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, pad_id: int
) -> PackedBatch:
    """Right-pad prompt+response rows; index the response positions."""
    _check_rows(prompts, responses)
    rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
    input_ids_BL, attention_BL = right_pad(rows, pad_id=pad_id)
    target_ids_BT, mask_BT = right_pad(responses, pad_id=pad_id)
    start_B1 = torch.tensor([len(p) - 1 for p in prompts], dtype=torch.long).unsqueeze(-1)
    gather_BT = (start_B1 + torch.arange(target_ids_BT.shape[1])) * mask_BT
    return PackedBatch(input_ids_BL, attention_BL.long(), gather_BT, target_ids_BT, mask_BT)


def distinct_rows(rows: Sequence[Sequence[Hashable]]) -> tuple[list[tuple], list[int]]:
    """The distinct rows in first-seen order, and for each input row the index of its copy."""
    first: dict[tuple, int] = {}
    index = [first.setdefault(tuple(r), len(first)) for r in rows]
    return list(first), index


def distinct_pairs(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]], list[int]]:
    """The distinct (prompt, response) rows as prompts and responses, and each row's copy index."""
    _check_rows(prompts, responses)  # before zip, which would drop unmatched rows silently
    distinct, index = distinct_rows(list(zip(map(tuple, prompts), map(tuple, responses))))
    return [p for p, _ in distinct], [r for _, r in distinct], index


def right_pad(rows: Sequence[Sequence[int]], *, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids_BL, mask_BL) of right-padded rows (L = the longest row)."""
    width = max((len(r) for r in rows), default=0)
    ids_BL = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask_BL = torch.zeros((len(rows), width), dtype=torch.bool)
    for b, r in enumerate(rows):
        ids_BL[b, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask_BL[b, : len(r)] = True
    return ids_BL, mask_BL


def selected_logprobs(
    logits_BTV: torch.Tensor, target_ids_BT: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """log softmax(logits / T)[target] without materialising the full log-softmax twice."""
    logits_BTV = logits_BTV.float()
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    picked_BT = logits_BTV.gather(-1, target_ids_BT.unsqueeze(-1)).squeeze(-1)
    return picked_BT - torch.logsumexp(logits_BTV, dim=-1)


def response_logprobs(
    model: torch.nn.Module, batch: PackedBatch, *, temperature: float = 1.0
) -> torch.Tensor:
    """logp_BT of each response token (0 where masked), on the model's device. Gradients flow
    when enabled."""
    batch = batch.to(next(model.parameters()).device)
    out = model(
        input_ids=batch.input_ids_BL, attention_mask=batch.attention_mask_BL, use_cache=False
    )
    logits_BLV = out.logits
    index_BTV = batch.gather_index_BT.unsqueeze(-1).expand(-1, -1, logits_BLV.shape[-1])
    logits_BTV = logits_BLV.gather(1, index_BTV)
    logp_BT = selected_logprobs(logits_BTV, batch.target_ids_BT, temperature=temperature)
    return logp_BT.masked_fill(~batch.response_mask_BT, 0.0)


def shared_prompt_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """`response_logprobs(model, pack(prompts, responses))`, running each distinct prompt once.

    The distinct prompts go through the model right-padded, with their KV cache kept; the logits at
    each prompt's last token give its responses' first log-prob. The cache rows are then indexed
    out to one per response (gradients flow back through the indexing into the shared prompt
    computation) and the responses, minus their last token, run against it, their positions
    continuing after their own prompt and the prompt padding masked out.
    """
    _check_rows(prompts, responses)
    device = next(model.parameters()).device
    distinct, index = distinct_rows(prompts)
    prompt_ids_UP, prompt_mask_UP = right_pad(distinct, pad_id=pad_id)
    out = model(
        input_ids=prompt_ids_UP.to(device),
        attention_mask=prompt_mask_UP.long().to(device),
        use_cache=True,
    )
    index_B = torch.tensor(index, dtype=torch.long, device=device)
    last_U = torch.tensor([len(p) - 1 for p in distinct], dtype=torch.long, device=device)
    first_logits_BV = out.logits[torch.arange(len(distinct), device=device), last_U][index_B]
    target_ids_BT, mask_BT = right_pad(responses, pad_id=pad_id)
    target_ids_BT, mask_BT = target_ids_BT.to(device), mask_BT.to(device)
    logits = [first_logits_BV.unsqueeze(1)]
    if target_ids_BT.shape[1] > 1:
        cache = out.past_key_values
        cache.batch_select_indices(index_B)
        feed_mask_BR = mask_BT[:, :-1]
        attention_BL = torch.cat([prompt_mask_UP.to(device)[index_B], feed_mask_BR], 1).long()
        start_B1 = (last_U[index_B] + 1).unsqueeze(-1)
        position_BR = start_B1 + torch.arange(feed_mask_BR.shape[1], device=device)
        later = model(
            input_ids=target_ids_BT[:, :-1],
            attention_mask=attention_BL,
            position_ids=position_BR,
            past_key_values=cache,
            use_cache=True,
        )
        logits.append(later.logits)
    logp_BT = selected_logprobs(torch.cat(logits, 1), target_ids_BT, temperature=temperature)
    return logp_BT.masked_fill(~mask_BT, 0.0)


def sequence_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    share_prompts: bool = True,
    dedup_responses: bool = True,
) -> torch.Tensor:
    """logp_BT of each response token (0 past its end): the shared-prompt forward, or the plain
    one over `pack`ed rows, with identical rows run once when `dedup_responses`. Gradients flow
    when enabled (into the one computed copy, summed over its copies)."""
    if dedup_responses:
        prompts_U, responses_U, index = distinct_pairs(prompts, responses)
        if len(prompts_U) < len(index):
            logp_UT = sequence_logprobs(
                model,
                prompts_U,
                responses_U,
                pad_id=pad_id,
                temperature=temperature,
                share_prompts=share_prompts,
                dedup_responses=False,
            )
            return logp_UT[torch.tensor(index, dtype=torch.long, device=logp_UT.device)]
    if share_prompts:
        return shared_prompt_logprobs(
            model, prompts, responses, pad_id=pad_id, temperature=temperature
        )
    batch = pack(prompts, responses, pad_id=pad_id)
    return response_logprobs(model, batch, temperature=temperature)


@torch.no_grad()
def score_sequences(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    batch_size: int = 32,
    share_prompts: bool = True,
    dedup_responses: bool = True,
) -> list[tuple[float, ...]]:
    """Per-token log-probs of each response under the model (no gradient), in input order.
    With `dedup_responses` each distinct (prompt, response) runs once and `batch_size` counts
    distinct rows."""
    if dedup_responses:
        prompts_U, responses_U, index = distinct_pairs(prompts, responses)
        if len(prompts_U) < len(index):
            scored = score_sequences(
                model,
                prompts_U,
                responses_U,
                pad_id=pad_id,
                temperature=temperature,
                batch_size=batch_size,
                share_prompts=share_prompts,
                dedup_responses=False,
            )
            return [scored[i] for i in index]
    out: list[tuple[float, ...]] = [()] * len(prompts)
    if share_prompts:  # copies of a prompt side by side, so that a batch holds few distinct ones
        order = sorted(
            range(len(prompts)), key=lambda i: (len(prompts[i]), prompts[i], len(responses[i]))
        )
    else:
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        logp_BT = sequence_logprobs(
            model,
            [prompts[i] for i in idx],
            [responses[i] for i in idx],
            pad_id=pad_id,
            temperature=temperature,
            share_prompts=share_prompts,
            dedup_responses=False,
        )
        for row, i in enumerate(idx):
            out[i] = tuple(logp_BT[row, : len(responses[i])].tolist())
    return out


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks, by the class names transformers marks as never to be split
    (also once sharded: FSDP gives each sharded module a subclass of its class)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if any(c.__name__ in names for c in type(m).__mro__)]


def checkpoint_layers(model: torch.nn.Module) -> torch.nn.Module:
    """Activation checkpointing: each decoder layer keeps only its input for the backward pass and
    runs its forward again there (torch.utils.checkpoint, non-reentrant), whatever the module's
    train/eval mode. The gradients are those without it; a forward without gradients (sampling,
    scoring) runs as before."""
    from torch.utils.checkpoint import checkpoint

    for layer in decoder_layers(model):
        forward = layer.forward

        def recomputed(*args, _forward=forward, **kwargs):
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        layer.forward = recomputed
    return model


class _WholeGradient(torch.autograd.Function):
    """The identity on a weight, whose backward hands autograd the gradient's own tensor where the
    gradient arrives as a view aliasing all of it. `F.linear`'s weight gradient is such a view
    (transposed twice over its matmul's result); autograd may not add into a view in place, so
    where that weight is also used elsewhere (an embedding tied to the head) the two gradients
    were summed into a third tensor: one more vocabulary-sized matrix at the end of every
    backward pass. Same values, same memory; only the aliasing changes."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor) -> torch.Tensor:
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        base = grad._base
        if (
            base is not None
            and base.shape == grad.shape
            and base.stride() == grad.stride()
            and base.storage_offset() == grad.storage_offset()
            and base.dtype == grad.dtype
        ):
            return base
        return grad


class HeadLinear(torch.nn.Linear):
    """`nn.Linear` whose weight gradient accumulates in place (`_WholeGradient`)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight = _WholeGradient.apply(self.weight) if torch.is_grad_enabled() else self.weight
        return torch.nn.functional.linear(input, weight, self.bias)


def head_gradients_in_place(model: torch.nn.Module) -> torch.nn.Module:
    """The output head (a plain `nn.Linear`) as a `HeadLinear`: same parameters, state dict and
    outputs; with a tied embedding, one vocabulary-sized matrix less at the peak of a backward
    pass."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is torch.nn.Linear:
        head.__class__ = HeadLinear
    return model
