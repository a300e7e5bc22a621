"""Batched sampling from a Hugging Face causal LM with a KV cache, recording behavior log-probs.

A small loop of our own rather than `model.generate`. Each row draws from its own stream, seeded
by the caller (`row_seeds`: graft seeds a row from the run seed, the step, the policy, its prompt's
id and its sample index), by inverting the tempered distribution's CDF at one uniform per token. A
row's sample therefore depends on its seed and its prompt alone, not on the batch around it: the
same for any split of a batch into chunks or over a sharded policy's ranks, up to the float
rounding of a batch's shape, and exact on resume. It records the log-prob of every sampled token
under the distribution it was drawn from, softmax(logits / T).
With top-p / top-k the recorded log-prob is still that of the untruncated tempered distribution,
which is what a training forward pass computes; keep top-p = 1 for training rollouts.

A rollout batch holds each prompt n times. With `share_prompts` (the default) each distinct prompt
is prefilled once and its KV cache row repeated for its n samples, which is most of the prefill
work saved; the samples are the same as with every row prefilled on its own, up to float rounding.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from graft.models.modeling import distinct_rows
from graft.types import FinishReason


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    """0 means greedy decoding (log-probs then use T = 1)."""
    top_p: float = 1.0
    top_k: int = 0


@dataclass(frozen=True)
class Sample:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason


def _filter_logits(logits_BV: torch.Tensor, *, top_p: float, top_k: int) -> torch.Tensor:
    if top_k > 0 and top_k < logits_BV.shape[-1]:
        kth_B1 = torch.topk(logits_BV, top_k, dim=-1).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth_B1, float("-inf"))
    if top_p < 1.0:
        sorted_BV, order_BV = torch.sort(logits_BV, dim=-1, descending=True)
        cum_BV = torch.softmax(sorted_BV, dim=-1).cumsum(-1)
        drop_sorted_BV = (cum_BV - torch.softmax(sorted_BV, dim=-1)) >= top_p
        drop_BV = drop_sorted_BV.scatter(-1, order_BV, drop_sorted_BV)
        logits_BV = logits_BV.masked_fill(drop_BV, float("-inf"))
    return logits_BV


class RowDraws:
    """One uniform per row and token, each row from its own stream (`random.Random(seed)`)."""

    def __init__(self, row_seeds: Sequence[int]) -> None:
        self._streams = [random.Random(int(s)) for s in row_seeds]

    def next(self, device: torch.device | str) -> torch.Tensor:
        """u_B in [0, 1), float64: the next uniform of every row."""
        return torch.tensor([s.random() for s in self._streams], dtype=torch.float64).to(device)


def inverse_cdf(probs_BV: torch.Tensor, u_B: torch.Tensor) -> torch.Tensor:
    """The token at which each row's cumulative probability first exceeds u (in float64, so a
    token of probability zero is never picked)."""
    cdf_BV = probs_BV.double().cumsum(-1)
    x_B1 = u_B.unsqueeze(-1) * cdf_BV[:, -1:]
    picked_B1 = torch.searchsorted(cdf_BV, x_B1, right=True)
    return picked_B1.clamp(max=probs_BV.shape[-1] - 1).squeeze(-1)


def _next_tokens(
    logits_BV: torch.Tensor, params: SamplingParams, draws: RowDraws
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return (tokens_B, logprob_B under softmax(logits / T))."""
    logits_BV = logits_BV.float()
    u_B = draws.next(logits_BV.device)  # drawn at T = 0 too: a row's stream never depends on T
    if params.temperature == 0:
        logp_BV = torch.log_softmax(logits_BV, dim=-1)
        tokens_B = logp_BV.argmax(-1)
    else:
        logp_BV = torch.log_softmax(logits_BV / params.temperature, dim=-1)
        filtered_BV = _filter_logits(logp_BV, top_p=params.top_p, top_k=params.top_k)
        tokens_B = inverse_cdf(torch.softmax(filtered_BV, dim=-1), u_B)
    return tokens_B, logp_BV.gather(-1, tokens_B.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    stop_ids: Sequence[int],
    pad_id: int,
    row_seeds: Sequence[int],
    share_prompts: bool = True,
) -> list[Sample]:
    """Sample one response per prompt row (left-padded, one forward per new token), row b from
    the stream seeded with `row_seeds[b]`."""
    num_rows = len(prompts)
    if len(row_seeds) != num_rows:
        raise ValueError(f"{len(row_seeds)} row seeds for {num_rows} prompt rows")
    draws = RowDraws(row_seeds)
    device = next(model.parameters()).device
    if share_prompts:
        distinct, index = distinct_rows(prompts)
    else:
        distinct, index = [tuple(p) for p in prompts], list(range(num_rows))
    input_ids_UL, attention_UL = _left_padded(distinct, pad_id, device)
    position_UL = (attention_UL.cumsum(-1) - 1).clamp(min=0)
    stop_1S = torch.tensor(list(stop_ids), dtype=torch.long, device=device).unsqueeze(0)

    cache = DynamicCache()
    out = model(
        input_ids=input_ids_UL,
        attention_mask=attention_UL,
        position_ids=position_UL,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    logits_BV = out.logits[:, -1, :]
    attention_BL, next_pos_B1 = attention_UL, position_UL[:, -1:] + 1
    if len(distinct) < num_rows:  # one KV-cache row per sample, copied from its prompt's
        index_B = torch.tensor(index, dtype=torch.long, device=device)
        cache.batch_select_indices(index_B)
        logits_BV, attention_BL, next_pos_B1 = (
            t[index_B] for t in (logits_BV, attention_BL, next_pos_B1)
        )
    tokens_BT = torch.full(
        (num_rows, params.max_new_tokens), pad_id, dtype=torch.long, device=device
    )
    logp_BT = torch.zeros((num_rows, params.max_new_tokens), device=device)
    done_B = torch.zeros(num_rows, dtype=torch.bool, device=device)
    lengths_B = torch.full((num_rows,), params.max_new_tokens, dtype=torch.long, device=device)
    stopped_B = torch.zeros(num_rows, dtype=torch.bool, device=device)
    ones_B1 = torch.ones((num_rows, 1), dtype=torch.long, device=device)
    for t in range(params.max_new_tokens):
        tokens_B, logp_B = _next_tokens(logits_BV, params, draws)
        tokens_B = tokens_B.masked_fill(done_B, pad_id)
        tokens_BT[:, t] = tokens_B
        logp_BT[:, t] = logp_B.masked_fill(done_B, 0.0)
        hit_B = (tokens_B.unsqueeze(-1) == stop_1S).any(-1) & ~done_B
        lengths_B = torch.where(hit_B, t + 1, lengths_B)
        stopped_B |= hit_B
        done_B |= hit_B
        if bool(done_B.all()) or t + 1 == params.max_new_tokens:
            break
        attention_BL = torch.cat([attention_BL, ones_B1], 1)
        out = model(
            input_ids=tokens_B.unsqueeze(-1),
            attention_mask=attention_BL,
            position_ids=next_pos_B1,
            past_key_values=cache,
            use_cache=True,
        )
        logits_BV = out.logits[:, -1, :]
        next_pos_B1 = next_pos_B1 + 1
    return _samples(tokens_BT, logp_BT, lengths_B, stopped_B)


def _left_padded(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt rows left-padded to one length: (input ids, attention mask), on `device`."""
    max_len = max(len(p) for p in rows)
    input_ids_UL = torch.full((len(rows), max_len), pad_id, dtype=torch.long)
    attention_UL = torch.zeros((len(rows), max_len), dtype=torch.long)
    for u, p in enumerate(rows):
        input_ids_UL[u, max_len - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention_UL[u, max_len - len(p) :] = 1
    return input_ids_UL.to(device), attention_UL.to(device)


def _samples(
    tokens_BT: torch.Tensor, logp_BT: torch.Tensor, lengths_B: torch.Tensor, stopped_B: torch.Tensor
) -> list[Sample]:
    """Each row's response: its tokens and log-probs up to its length, and why it ended."""
    tokens_BT, logp_BT, lengths_B, stopped_B = (
        t.cpu() for t in (tokens_BT, logp_BT, lengths_B, stopped_B)
    )
    samples = []
    for b in range(tokens_BT.shape[0]):
        n = int(lengths_B[b])
        samples.append(
            Sample(
                token_ids=tuple(tokens_BT[b, :n].tolist()),
                logprobs=tuple(logp_BT[b, :n].tolist()),
                finish_reason="stop" if bool(stopped_B[b]) else "length",
            )
        )
    return samples


def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    stop_ids: Sequence[int],
    pad_id: int,
    row_seeds: Sequence[int],
    batch_size: int = 0,
    share_prompts: bool = True,
) -> list[Sample]:
    """`sample_batch` over chunks of at most `batch_size` rows (0: all at once), in order: the
    same samples for any `batch_size`, up to float rounding."""
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("cannot sample from an empty prompt")
    size = batch_size or len(prompts)
    out: list[Sample] = []
    for start in range(0, len(prompts), size):
        out.extend(
            sample_batch(
                model,
                prompts[start : start + size],
                params,
                stop_ids=stop_ids,
                pad_id=pad_id,
                row_seeds=row_seeds[start : start + size],
                share_prompts=share_prompts,
            )
        )
    return out
