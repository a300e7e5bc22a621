"""GRAFT's per-micro-batch loss (paper eq. 10), its parts and its reduction (pure; no model, no
config object).

Loss is the NEGATED objective, to be minimised. Tensors: `_B` sequences, `_T` response tokens
(right-padded; `mask_BT` marks real tokens).

The reduction is written as per-token coefficients, `loss = sum(loss_BT * coef_BT)`, with each
sequence's coefficient computed once over the whole minibatch. Any split of the minibatch into
micro-batches then sums to exactly the same loss and gradient (tests/test_advantages_loss.py and
tests/test_update.py check it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from graft.config import AlgoConfig, ExchangeConfig


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


def luffy_shaping(logp_BT: torch.Tensor, adv_B: torch.Tensor, *, gamma: float) -> torch.Tensor:
    """LUFFY's policy shaping (Yan et al., 2025) per token: loss = -A * f(pi), f(pi) = pi / (pi +
    gamma), the behavior probability taken as 1 and no clip."""
    prob_BT = torch.exp(logp_BT)
    return -adv_B.unsqueeze(-1) * prob_BT / (prob_BT + gamma)


def supervised_nll(logp_BT: torch.Tensor) -> torch.Tensor:
    """The SGT baseline's supervised term per token: the negative log-likelihood."""
    return -logp_BT


def _token_mean(num_tokens_B: torch.Tensor, *, constant: int) -> torch.Tensor:
    del constant
    return (num_tokens_B > 0).to(torch.float64) / num_tokens_B.sum().clamp(min=1)


def _seq_mean_token_mean(num_tokens_B: torch.Tensor, *, constant: int) -> torch.Tensor:
    del constant
    num_seqs = max(num_tokens_B.shape[0], 1)
    return (num_tokens_B > 0).to(torch.float64) / num_tokens_B.clamp(min=1) / num_seqs


def _constant(num_tokens_B: torch.Tensor, *, constant: int) -> torch.Tensor:
    if constant <= 0:
        raise ValueError("the constant loss reduction needs constant > 0")
    return (num_tokens_B > 0).to(torch.float64) / (max(num_tokens_B.shape[0], 1) * constant)


AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "constant": _constant,
}


def reduction_coefficients(
    num_tokens_B: torch.Tensor, *, mode: str, constant: int = 0
) -> torch.Tensor:
    """Each sequence's per-token loss coefficient (float64) under a reduction, from its length.

    token-mean: 1 / (all tokens of the minibatch) (DAPO; what the GRAFT objective uses).
    seq-mean-token-mean: 1 / (tokens of the sequence x sequences).
    constant: 1 / (sequences x constant) (Dr. GRPO's length-independent normaliser).
    A sequence without tokens gets 0.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; known: {sorted(AGGREGATIONS)}")
    return AGGREGATIONS[mode](num_tokens_B.to(torch.float64), constant=constant)


def loss_coefficients(
    num_tokens_B: torch.Tensor, supervised_B: torch.Tensor, *, mode: str, constant: int = 0
) -> torch.Tensor:
    """Each sequence's per-token loss coefficient over a whole minibatch (float64).

    Policy-gradient (and LUFFY) sequences share the configured reduction; the SGT baseline's
    supervised sequences (`supervised_B`) are averaged among themselves and never enter the
    policy-gradient denominator.
    """
    coef_B = torch.zeros(num_tokens_B.shape[0], dtype=torch.float64)
    pg_B = ~supervised_B
    if bool(pg_B.any()):
        coef_B[pg_B] = reduction_coefficients(num_tokens_B[pg_B], mode=mode, constant=constant)
    if bool(supervised_B.any()):
        coef_B[supervised_B] = 1.0 / int(num_tokens_B[supervised_B].sum())
    return coef_B


def token_coefficients(mask_BT: torch.Tensor, *, mode: str, constant: int = 0) -> torch.Tensor:
    """Per-token weights such that `aggregate(loss) == (loss_BT * coef_BT).sum()`: each
    sequence's `reduction_coefficients` on its real tokens, 0 on padding."""
    mask_BT = mask_BT.to(torch.float64)
    coef_B = reduction_coefficients(mask_BT.sum(-1), mode=mode, constant=constant)
    return coef_B.unsqueeze(-1) * mask_BT


def aggregate(
    loss_BT: torch.Tensor, mask_BT: torch.Tensor, *, mode: str, constant: int = 0
) -> torch.Tensor:
    """The reduced loss: `(loss_BT * token_coefficients(mask_BT)).sum()`."""
    coef_BT = token_coefficients(mask_BT, mode=mode, constant=constant).to(loss_BT.dtype)
    return (loss_BT * coef_BT).sum()


# ---------------------------------------------------------------------------- the policy losses


@dataclass(frozen=True)
class LossSettings:
    """The settings the policy losses read, built once from the config (`of`): `algo.clip_low`,
    `clip_high`, `dual_clip` and `ratio`, and `exchange.ablation.luffy_gamma`."""

    clip_low: float
    clip_high: float
    luffy_gamma: float
    dual_clip: float
    ratio: str
    """`token` (PPO/GRAFT) or `sequence` (GSPO-style, an ablation)."""

    @classmethod
    def of(cls, algo: AlgoConfig, exchange: ExchangeConfig | None = None) -> LossSettings:
        luffy = (exchange or ExchangeConfig()).ablation.luffy_gamma
        return cls(algo.clip_low, algo.clip_high, luffy, algo.dual_clip, algo.ratio)


@dataclass(frozen=True)
class Rows:
    """One micro-batch, what every policy loss reads: log-probs under the policy and under the
    behaviour policy, each row's advantage, and the real tokens."""

    logp_BT: torch.Tensor
    old_logp_BT: torch.Tensor
    adv_B: torch.Tensor
    mask_BT: torch.Tensor


@dataclass(frozen=True)
class PolicyLoss:
    """A per-row loss, by name (`TrainSequence.objective`): `per_token` gives (loss_BT,
    clipped_BT), the loss of every token and the tokens whose gradient a clip removed."""

    name: str
    per_token: Callable[[Rows, LossSettings], tuple[torch.Tensor, torch.Tensor]]
    supervised: bool = False
    """Its rows carry a gradient whatever their advantage and are averaged among themselves,
    never in the policy-gradient denominator (`loss_coefficients`). Any other loss must be 0
    wherever the advantage is 0: such rows are skipped (`algo.skip_zero_advantage`)."""


POLICY_LOSSES: dict[str, PolicyLoss] = {}
"""The per-row losses by name; a new one is a function and its `policy_loss` line, here."""


def policy_loss(name: str, *, supervised: bool = False) -> Callable:
    """Register the decorated `(rows, settings) -> (loss_BT, clipped_BT)` as `name`."""

    def register(fn: Callable[[Rows, LossSettings], tuple[torch.Tensor, torch.Tensor]]) -> Callable:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is registered already")
        POLICY_LOSSES[name] = PolicyLoss(name, fn, supervised)
        return fn

    return register


@policy_loss("pg")
def pg_loss(rows: Rows, s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """GRAFT's and GRPO's: the clipped surrogate of the trainee's ratio, per token (or per
    response with `ratio: sequence`)."""
    if s.ratio == "sequence":
        return sequence_ratio_surrogate(
            rows.logp_BT, rows.old_logp_BT, rows.adv_B, rows.mask_BT,
            clip_low=s.clip_low, clip_high=s.clip_high,
        )  # fmt: skip
    return clipped_surrogate(
        rows.logp_BT, rows.old_logp_BT, rows.adv_B,
        clip_low=s.clip_low, clip_high=s.clip_high, dual_clip=s.dual_clip,
    )  # fmt: skip


@policy_loss("luffy")
def luffy_loss(rows: Rows, s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The LUFFY baseline's peer rows: policy shaping, no clip."""
    loss_BT = luffy_shaping(rows.logp_BT, rows.adv_B, gamma=s.luffy_gamma)
    return loss_BT, torch.zeros_like(rows.mask_BT)


@policy_loss("sft", supervised=True)
def sft_loss(rows: Rows, s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The SGT baseline's peer rows: the negative log-likelihood."""
    return supervised_nll(rows.logp_BT), torch.zeros_like(rows.mask_BT)


@policy_loss("unclipped")
def unclipped_loss(rows: Rows, s: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The token clip's control (`exchange.ablation.peer_update=unclipped`): the plain -rho a."""
    loss_BT = -rows.adv_B.unsqueeze(-1) * torch.exp(rows.logp_BT - rows.old_logp_BT)
    return loss_BT, torch.zeros_like(rows.mask_BT)


@dataclass(frozen=True)
class ObjectiveTerms:
    """One micro-batch's loss and the per-token tensors its statistics read (no gradient)."""

    loss: torch.Tensor
    """The negated objective, a scalar to minimise (summed over micro-batches: the minibatch's)."""
    clipped_BT: torch.Tensor
    """Tokens whose gradient the clip removed (never on LUFFY or supervised rows)."""
    ratio_BT: torch.Tensor
    """pi_theta / pi_old per token."""
    kl_BT: torch.Tensor
    """The k3 KL estimate per token; zeros without a KL term."""


def policy_objective(
    rows: Rows,
    objective_B: Sequence[str],
    w_B: torch.Tensor,
    coef_B: torch.Tensor,
    settings: LossSettings,
    *,
    ref_logp_BT: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> ObjectiveTerms:
    """GRAFT's objective (paper eq. 10) over one micro-batch, negated to a loss:

    J = (1 / sum_j |o_j|) * sum_j w_j * sum_t min(rho_jt a_j, clip(rho_jt, 1-eps_lo, 1+eps_hi) a_j)

    One weighted reduction: each row's registered loss (`objective_B`: `pg`, the clipped
    surrogate above, or a baseline's or a control's), times its weight w_j, plus kl_coef x the
    k3 KL per token with `ref_logp_BT`, reduced by `coef_B`, each sequence's per-token
    coefficient computed over the whole minibatch (`loss_coefficients`; 1 / sum_j |o_j| for
    token-mean), so the micro-batches' losses sum to the minibatch's.
    """
    loss_BT, clipped_BT = _row_losses(rows, objective_B, settings)
    loss_BT = loss_BT * w_B.unsqueeze(-1)
    kl_BT = torch.zeros_like(loss_BT)
    if ref_logp_BT is not None and kl_coef > 0:
        kl_BT = kl_k3(rows.logp_BT, ref_logp_BT)
        loss_BT = loss_BT + kl_coef * kl_BT
    coef_BT = coef_B.to(device=loss_BT.device, dtype=loss_BT.dtype).unsqueeze(-1) * rows.mask_BT
    loss = (loss_BT * coef_BT).sum()
    with torch.no_grad():
        ratio_BT = torch.exp(rows.logp_BT - rows.old_logp_BT)
    return ObjectiveTerms(loss, clipped_BT, ratio_BT, kl_BT.detach())


def _row_losses(
    rows: Rows, objective_B: Sequence[str], settings: LossSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss per token, by its registered loss (`pg` computed for every row, the
    others' rows taking their own in its place)."""
    unknown = sorted(set(objective_B) - POLICY_LOSSES.keys())
    if unknown:
        raise ValueError(f"unknown policy loss {unknown[0]!r}; known: {sorted(POLICY_LOSSES)}")
    loss_BT, clipped_BT = POLICY_LOSSES["pg"].per_token(rows, settings)
    for name in sorted(set(objective_B) - {"pg"}):
        rows_B1 = torch.tensor([o == name for o in objective_B], device=loss_BT.device)
        rows_B1 = rows_B1.unsqueeze(-1)
        own_BT, own_clipped_BT = POLICY_LOSSES[name].per_token(rows, settings)
        loss_BT = torch.where(rows_B1, own_BT, loss_BT)
        clipped_BT = torch.where(rows_B1, own_clipped_BT, clipped_BT)
    return loss_BT, clipped_BT
