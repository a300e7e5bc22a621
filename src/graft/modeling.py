"""Log-probabilities of response tokens under a causal LM (shared by scoring and training).

Sequences are `prompt_ids + response_ids`, right-padded into one batch. The log-prob of response
token j is read from the logits at the position before it, divided by the sampling temperature so
that it is the log-prob of the distribution the tokens were sampled from.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def pack(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, pad_id: int
) -> PackedBatch:
    """Right-pad prompt+response rows; index the response positions."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    max_len = max(lengths)
    max_resp = max(len(r) for r in responses)
    num_rows = len(prompts)
    input_ids = torch.full((num_rows, max_len), pad_id, dtype=torch.long)
    attention = torch.zeros((num_rows, max_len), dtype=torch.long)
    gather = torch.zeros((num_rows, max_resp), dtype=torch.long)
    targets = torch.full((num_rows, max_resp), pad_id, dtype=torch.long)
    mask = torch.zeros((num_rows, max_resp), dtype=torch.bool)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        if not p:
            raise ValueError(
                "a sequence has an empty prompt; the first response token needs context"
            )
        row = list(p) + list(r)
        input_ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention[b, : len(row)] = 1
        n = len(r)
        gather[b, :n] = torch.arange(len(p) - 1, len(p) - 1 + n)
        targets[b, :n] = torch.tensor(list(r), dtype=torch.long)
        mask[b, :n] = True
    return PackedBatch(input_ids, attention, gather, targets, mask)


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


@torch.no_grad()
def score_sequences(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    batch_size: int = 32,
) -> list[tuple[float, ...]]:
    """Per-token log-probs of each response under the model (no gradient), in input order."""
    out: list[tuple[float, ...]] = [()] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = pack([prompts[i] for i in idx], [responses[i] for i in idx], pad_id=pad_id)
        logp_BT = response_logprobs(model, batch, temperature=temperature)
        for row, i in enumerate(idx):
            out[i] = tuple(logp_BT[row, : len(responses[i])].tolist())
    return out
