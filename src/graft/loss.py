"""Per-token policy-gradient losses and their aggregation (pure; no model, no config object).

Loss is the NEGATED objective, to be minimised. Tensors: `_B` sequences, `_T` response tokens
(right-padded; `mask_BT` marks real tokens).

The aggregation is written as per-token coefficients, `loss = sum(loss_BT * coef_BT)`, with the
coefficients computed once over the whole minibatch. Any split of the minibatch into micro-batches
then sums to exactly the same loss and gradient (tests/test_loss.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def clipped_surrogate(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_B: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with asymmetric clip (DAPO), per token.

    loss_t = -min(rho_t * A, clip(rho_t, 1 - clip_low, 1 + clip_high) * A), rho_t = pi/pi_old.
    With `dual_clip` = c > 1 (Ye et al., 2020; verl's default c = 3), a negative-advantage token's
    loss is capped at -c * A. Returns (loss_BT, clipped_BT) where clipped_BT marks tokens whose
    gradient the clip removed.
    """
    ratio_BT = torch.exp(logp_BT - old_logp_BT)
    adv_B1 = adv_B.unsqueeze(-1)
    unclipped_BT = -adv_B1 * ratio_BT
    clipped_obj_BT = -adv_B1 * torch.clamp(ratio_BT, 1.0 - clip_low, 1.0 + clip_high)
    loss_BT = torch.maximum(unclipped_BT, clipped_obj_BT)
    clipped_BT = clipped_obj_BT > unclipped_BT
    if dual_clip > 0:
        cap_BT = -adv_B1 * dual_clip
        dual_BT = (adv_B1 < 0) & (loss_BT > cap_BT)
        loss_BT = torch.where(dual_BT, cap_BT.expand_as(loss_BT), loss_BT)
        clipped_BT = clipped_BT | dual_BT
    return loss_BT, clipped_BT


def sequence_ratio_surrogate(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_B: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level ratio (GSPO, Zheng et al., 2025): one ratio per response, the exp of the
    mean token log-ratio, clipped as a whole; spread back onto the tokens for aggregation."""
    mask_BT = mask_BT.to(logp_BT.dtype)
    num_tokens_B = mask_BT.sum(-1).clamp(min=1)
    log_ratio_B = ((logp_BT - old_logp_BT) * mask_BT).sum(-1) / num_tokens_B
    # Token-level expression whose value equals the sequence ratio and whose gradient is the
    # sequence ratio's gradient split over tokens (the GSPO-token form).
    seq_ratio_BT = torch.exp((logp_BT - logp_BT.detach()) + log_ratio_B.detach().unsqueeze(-1))
    unclipped_BT = -adv_B.unsqueeze(-1) * seq_ratio_BT
    clipped_obj_BT = -adv_B.unsqueeze(-1) * torch.clamp(seq_ratio_BT, 1 - clip_low, 1 + clip_high)
    loss_BT = torch.maximum(unclipped_BT, clipped_obj_BT)
    return loss_BT, clipped_obj_BT > unclipped_BT


def kl_k3(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi || pi_ref) per token (Schulman, 2020): exp(d) - d - 1, d = ref-logp."""
    delta_BT = ref_logp_BT - logp_BT
    return torch.exp(delta_BT) - delta_BT - 1.0


def _token_mean(mask_BT: torch.Tensor, *, constant: int) -> torch.Tensor:
    del constant
    return mask_BT / mask_BT.sum().clamp(min=1)


def _seq_mean_token_mean(mask_BT: torch.Tensor, *, constant: int) -> torch.Tensor:
    del constant
    num_seqs = max(mask_BT.shape[0], 1)
    return mask_BT / mask_BT.sum(-1, keepdim=True).clamp(min=1) / num_seqs


def _constant(mask_BT: torch.Tensor, *, constant: int) -> torch.Tensor:
    if constant <= 0:
        raise ValueError("the constant loss reduction needs constant > 0")
    return mask_BT / (max(mask_BT.shape[0], 1) * constant)


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "constant": _constant,
}


def token_coefficients(mask_BT: torch.Tensor, *, mode: str, constant: int = 0) -> torch.Tensor:
    """Per-token weights such that `aggregate(loss) == (loss_BT * coef_BT).sum()`.

    token-mean: 1 / (all tokens of the minibatch) (DAPO; what the GRAFT objective uses).
    seq-mean-token-mean: 1 / (tokens of the sequence x sequences).
    constant: 1 / (sequences x constant) (Dr. GRPO's length-independent normaliser).
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; known: {sorted(AGGREGATIONS)}")
    return AGGREGATIONS[mode](mask_BT.to(torch.float64), constant=constant)


def aggregate(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, *, mode: str, constant: int = 0
) -> torch.Tensor:
    coef_BT = token_coefficients(mask_BT, mode=mode, constant=constant).to(loss_BT.dtype)
    return (loss_BT * coef_BT).sum()
