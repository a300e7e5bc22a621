"""One policy's update over a rollout batch: minibatches (peer groups last), micro-batches with
gradient accumulation, grad-norm clipping, an optimizer step per minibatch, and the statistics.

The loss of a micro-batch is GRAFT's objective (paper eq. 10, `policy_objective` in
`graft.training.loss`):
    J = (1 / sum_j |o_j|) * sum_j w_j * sum_t min(rho_jt a_j, clip(rho_jt, 1-eps_lo, 1+eps_hi) a_j)
with the reduction's coefficients computed over the whole minibatch. rho is always the trainee's
ratio pi_theta / pi_old on its own tokenization (self and peer alike).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from graft.config import AlgoConfig, ExchangeConfig, OptimConfig, RolloutConfig
from graft.models.modeling import distinct_pairs, sequence_logprobs
from graft.models.precision import Precision
from graft.training.loss import (
    POLICY_LOSSES,
    LossSettings,
    ObjectiveTerms,
    Rows,
    loss_coefficients,
    policy_objective,
)
from graft.training.shards import (
    UNSHARDED,
    ShardRank,
    my_chunks,
    rank_loss,
    sum_across_ranks,
    total_norm,
)
from graft.types import TrainGroup, TrainSequence


@dataclass(frozen=True)
class UpdateSettings:
    """What one policy's update needs from the config (`from_config`): the `algo` section as it
    is (minibatches, micro-batch size, epochs, KL, loss reduction, the skipping and sharing of
    work, the non-finite rule), the policy losses' settings built from it once (`loss`), and
    what the update takes from elsewhere. The defaults are the config's."""

    algo: AlgoConfig = field(default_factory=AlgoConfig)
    loss: LossSettings = field(default_factory=lambda: LossSettings.of(AlgoConfig()))
    """What the policy losses read (clipping, the ratio, LUFFY's gamma)."""
    loss_constant: int = 0
    """The `constant` reduction's normaliser: `algo.loss_constant`, else the rollout's length."""
    peer_position: str = "last"
    """Where minibatches holding peer groups go: `last` (GRAFT), `first`, `uniform` (shuffled)."""
    grad_clip: float = 1.0
    temperature: float = 1.0

    @classmethod
    def from_config(
        cls,
        algo: AlgoConfig,
        rollout: RolloutConfig,
        optim: OptimConfig,
        exchange: ExchangeConfig | None = None,
    ) -> UpdateSettings:
        """The settings of one policy's update: `algo`, the rollout's temperature and length (the
        `constant` reduction's default normaliser), the policy's `optim` and, when it exchanges,
        `exchange`'s peer position and LUFFY gamma."""
        exchange = exchange or ExchangeConfig()
        return cls(
            algo=algo,
            loss=LossSettings.of(algo, exchange),
            loss_constant=algo.loss_constant or rollout.max_new_tokens,
            peer_position=exchange.ablation.peer_position,
            grad_clip=optim.grad_clip,
            temperature=rollout.temperature,
        )


def order_groups(
    groups: Sequence[TrainGroup], *, peer_position: str, seed: int = 0
) -> list[TrainGroup]:
    """Self groups and peer groups in the order the minibatches will see them."""
    own = [g for g in groups if not g.is_peer]
    peer = [g for g in groups if g.is_peer]
    if peer_position == "last":
        return own + peer
    if peer_position == "first":
        return peer + own
    if peer_position == "uniform":
        mixed = list(groups)
        random.Random(seed).shuffle(mixed)
        return mixed
    raise ValueError(f"unknown peer_position {peer_position!r}; use last, first or uniform")


def split_minibatches(groups: Sequence[TrainGroup], num: int) -> list[list[TrainGroup]]:
    """Contiguous, near-equal chunks of whole groups (empty chunks dropped)."""
    size, extra = divmod(len(groups), num)
    chunks, start = [], 0
    for i in range(num):
        end = start + size + (i < extra)
        if end > start:
            chunks.append(list(groups[start:end]))
        start = end
    return chunks


def _micro_loss(
    model: torch.nn.Module,
    seqs: Sequence[TrainSequence],
    coef_B: torch.Tensor,
    settings: UpdateSettings,
    *,
    pad_id: int,
    ref_model: torch.nn.Module | None,
    precision: Precision,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The forward pass of one micro-batch (in the compute dtype), its tensors, and the objective
    on them (float32)."""
    prompts, responses = [q.prompt_ids for q in seqs], [q.response_ids for q in seqs]

    def logprobs(m: torch.nn.Module) -> torch.Tensor:
        with precision.forward():
            return sequence_logprobs(
                m,
                prompts,
                responses,
                pad_id=pad_id,
                temperature=settings.temperature,
                share_prompts=settings.algo.share_prompts,
                dedup_responses=settings.algo.dedup_responses,
            )

    logp_BT = logprobs(model)
    dev = logp_BT.device
    lengths_B1 = torch.tensor([q.num_tokens for q in seqs], device=dev).unsqueeze(-1)
    mask_BT = torch.arange(logp_BT.shape[1], device=dev) < lengths_B1
    old_BT = torch.zeros(logp_BT.shape, dtype=logp_BT.dtype)
    for b, q in enumerate(seqs):
        old_BT[b, : q.num_tokens] = torch.tensor(q.old_logprobs, dtype=old_BT.dtype)
    old_BT = old_BT.to(dev)
    ref_BT = None
    if ref_model is not None and settings.algo.kl_coef > 0:
        with torch.no_grad():
            ref_BT = logprobs(ref_model)
    rows = Rows(
        logp_BT,
        old_BT,
        torch.tensor([q.advantage for q in seqs], dtype=logp_BT.dtype, device=dev),
        mask_BT,
    )
    weight_B = torch.tensor([q.weight for q in seqs], dtype=logp_BT.dtype, device=dev)
    objective_B = [q.objective for q in seqs]
    terms = policy_objective(
        rows, objective_B, weight_B, coef_B, settings.loss, ref_logp_BT=ref_BT,
        kl_coef=settings.algo.kl_coef,
    )  # fmt: skip
    return terms.loss, _micro_stats(terms, mask_BT, seqs)


@torch.no_grad()
def _micro_stats(
    terms: ObjectiveTerms, mask_BT: torch.Tensor, seqs: Sequence[TrainSequence]
) -> dict[str, torch.Tensor]:
    """A micro-batch's sums for the update's metrics (self and peer tokens apart)."""
    peer_B1 = torch.tensor([q.is_peer for q in seqs], device=mask_BT.device).unsqueeze(-1)
    clipped_BT, ratio_BT = terms.clipped_BT & mask_BT, terms.ratio_BT
    return {
        "tokens": mask_BT.sum(),
        "peer_tokens": (mask_BT & peer_B1).sum(),
        "clipped": (clipped_BT & ~peer_B1).sum(),
        "peer_clipped": (clipped_BT & peer_B1).sum(),
        "ratio_sum": (ratio_BT * mask_BT).sum(),
        "ratio_max": ratio_BT.masked_fill(~mask_BT, 0).max(),
        "kl_sum": (terms.kl_BT * mask_BT).sum(),
        "loss": terms.loss.detach(),
    }


def sequence_coefficients(
    sequences: Sequence[TrainSequence], settings: UpdateSettings
) -> torch.Tensor:
    """Each sequence's per-token loss coefficient over the whole minibatch (see
    `graft.training.loss.loss_coefficients`; supervised rows apart)."""
    return loss_coefficients(
        torch.tensor([q.num_tokens for q in sequences], dtype=torch.long),
        torch.tensor([POLICY_LOSSES[q.objective].supervised for q in sequences], dtype=torch.bool),
        mode=settings.algo.loss_agg,
        constant=settings.loss_constant,
    )


def _zero_gradient(q: TrainSequence, settings: UpdateSettings) -> bool:
    """A response whose loss is exactly 0 for every parameter: advantage 0 in a policy-gradient
    (or LUFFY) term, with no KL term. Its forward and backward can be skipped exactly; its tokens
    still count in the token-mean denominator."""
    return (
        settings.algo.skip_zero_advantage
        and settings.algo.kl_coef == 0
        and not POLICY_LOSSES[q.objective].supervised
        and q.advantage == 0
    )


def _length_key(q: TrainSequence) -> tuple:
    """Sort by length; copies of one response side by side, so that they share a micro-batch."""
    return (len(q.prompt_ids) + q.num_tokens, q.prompt_ids, q.response_ids)


def duplicate_tokens(seqs: Sequence[TrainSequence]) -> int:
    """Response tokens of the rows that repeat an earlier (prompt, response) row: they are not
    run through the model again (`dedup_responses`)."""
    _, responses_U, _ = distinct_pairs([q.prompt_ids for q in seqs], [q.response_ids for q in seqs])
    return sum(q.num_tokens for q in seqs) - sum(len(r) for r in responses_U)


def minibatch_backward(
    model: torch.nn.Module,
    sequences: Sequence[TrainSequence],
    settings: UpdateSettings,
    *,
    pad_id: int,
    ref_model: torch.nn.Module | None = None,
    precision: Precision | None = None,
    shard: ShardRank = UNSHARDED,
) -> dict[str, float]:
    """Accumulate the gradient of one minibatch's loss over micro-batches (no optimizer step).

    The aggregation coefficients are computed over the whole minibatch first, so the result does
    not depend on how the minibatch is cut into micro-batches, nor (with `shard`: this rank's
    share of them, graft.training.shards) on how many ranks run them.
    """
    precision = precision or Precision()
    coef_B = sequence_coefficients(sequences, settings)
    totals: dict[str, float] = {}
    keep = [i for i, q in enumerate(sequences) if not _zero_gradient(q, settings)]
    kept = set(keep)
    skipped = [q.num_tokens for i, q in enumerate(sequences) if i not in kept]
    totals["tokens"] = float(sum(skipped))  # they count in the denominator, through coef_B
    totals["skipped_tokens"] = float(sum(skipped))
    run = float(sum(len(sequences[i].prompt_ids) + sequences[i].num_tokens for i in keep))
    totals["train_tokens"] = run  # what the passes below run, over all ranks (cost)
    if ref_model is not None and settings.algo.kl_coef > 0:
        totals["ref_tokens"] = run
    if (
        settings.algo.sort_by_length
    ):  # less padding; the sum over sequences does not depend on the order
        keep.sort(key=lambda i: _length_key(sequences[i]))
    chunks = [
        keep[i : i + settings.algo.micro_batch_size]
        for i in range(0, len(keep), settings.algo.micro_batch_size)
    ]
    micro_totals: dict[str, float] = {}
    mine = my_chunks(chunks, shard)
    if shard.sharded:  # this rank ran no real sequence of the minibatch (summed over ranks)
        micro_totals["idle_ranks"] = float(all(idx is None for idx in mine))
    for idx in mine:
        if idx is None:  # another rank has one more micro-batch: a zero-weight pass
            idx, weight = keep[:1], 0.0
        else:
            weight = 1.0
        micro = [sequences[i] for i in idx]
        if (
            settings.algo.dedup_responses and weight
        ):  # copies run once; counted for train/duplicate_frac
            dup = float(duplicate_tokens(micro))
            micro_totals["duplicate_tokens"] = micro_totals.get("duplicate_tokens", 0.0) + dup
        coef = coef_B[idx] if weight else coef_B[idx] * 0.0
        loss, stats = _micro_loss(
            model, micro, coef, settings, pad_id=pad_id, ref_model=ref_model, precision=precision
        )
        precision.backward(rank_loss(loss, shard))
        if weight:
            _accumulate(micro_totals, {key: float(value) for key, value in stats.items()})
    _accumulate(totals, sum_across_ranks(micro_totals, shard))
    return totals


def _finite_step(norm: float, stats: dict[str, float], precision: Precision) -> bool:
    """Whether a minibatch's loss and gradient norm are finite. With a float16 loss scaler an
    overflow is the scaler's to handle (it skips the step and backs off), so that is finite here."""
    if precision.scaler is not None:
        return True
    return math.isfinite(norm) and math.isfinite(stats.get("loss", 0.0))


def _accumulate(sums: dict[str, float], stats: dict[str, float]) -> None:
    """Add a minibatch's statistics to the update's (ratio_max: the largest)."""
    for key, value in stats.items():
        if key == "ratio_max":
            sums[key] = max(sums.get(key, value), value)
        else:
            sums[key] = sums.get(key, 0.0) + value


def train_on_batch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    groups: Sequence[TrainGroup],
    settings: UpdateSettings,
    *,
    pad_id: int,
    ref_model: torch.nn.Module | None = None,
    set_lr: Callable[[], float] | None = None,
    seed: int = 0,
    precision: Precision | None = None,
    shard: ShardRank = UNSHARDED,
) -> dict[str, float]:
    """The whole update for one rollout batch; returns metrics (means over optimizer steps).
    `precision`: the compute dtype and loss scaler (default: float32 throughout); `shard`: this
    rank's place when the model is sharded over several (every rank calls this with the same
    groups)."""
    precision = precision or Precision()
    ordered = order_groups(groups, peer_position=settings.peer_position, seed=seed)
    minibatches = split_minibatches(ordered, settings.algo.minibatches)
    params = [p for p in model.parameters() if p.requires_grad]
    sums: dict[str, float] = {}
    grad_norms: list[float] = []
    nonfinite = passes = 0
    spent = {"train_tokens": 0.0, "ref_tokens": 0.0}  # run, whether or not the step is taken
    lr = optimizer.param_groups[0]["lr"]
    for _ in range(settings.algo.epochs):
        for mb in minibatches:
            sequences = [q for g in mb for q in g.sequences]
            if not sequences:
                continue
            optimizer.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            stats = minibatch_backward(
                model,
                sequences,
                settings,
                pad_id=pad_id,
                ref_model=ref_model,
                precision=precision,
                shard=shard,
            )
            t1 = time.perf_counter()
            passes += 1
            for key in (*spent, "idle_ranks"):
                spent[key] = spent.get(key, 0.0) + stats.pop(key, 0.0)
            precision.unscale(optimizer)
            max_norm = settings.grad_clip if settings.grad_clip > 0 else float("inf")
            norm = total_norm(torch.nn.utils.clip_grad_norm_(params, max_norm))
            if not _finite_step(norm, stats, precision):
                optimizer.zero_grad(set_to_none=True)  # never reaches optimizer.step
                nonfinite += 1
                if settings.algo.nonfinite == "stop":
                    break
                continue
            grad_norms.append(norm)
            if set_lr is not None:
                lr = set_lr()
            stats["skipped_steps"] = float(not precision.step(optimizer))
            stats["fwd_bwd_s"] = t1 - t0
            stats["optim_s"] = time.perf_counter() - t1
            _accumulate(sums, stats)
        if nonfinite and settings.algo.nonfinite == "stop":
            break
    optimizer.zero_grad(set_to_none=True)
    return _update_metrics(
        sums, grad_norms, spent, settings, lr=lr, passes=passes, nonfinite=nonfinite,
        precision=precision, shard=shard,
    )  # fmt: skip


def _update_metrics(
    sums: dict[str, float],
    grad_norms: list[float],
    spent: dict[str, float],
    settings: UpdateSettings,
    *,
    lr: float,
    passes: int,
    nonfinite: int,
    precision: Precision,
    shard: ShardRank,
) -> dict[str, float]:
    """The update's metrics from its summed minibatch statistics (means over optimizer steps;
    shares over the trained tokens)."""
    num_steps = max(len(grad_norms), 1)
    tokens = max(sums.get("tokens", 0.0), 1.0)
    self_tokens = max(tokens - sums.get("peer_tokens", 0.0), 1.0)
    peer_tokens = sums.get("peer_tokens", 0.0)
    computed = max(tokens - sums.get("skipped_tokens", 0.0), 1.0)
    out = {
        "loss/policy": sums.get("loss", 0.0) / num_steps,
        "loss/clip_frac": (sums.get("clipped", 0.0) + sums.get("peer_clipped", 0.0)) / tokens,
        "loss/self_clip_frac": sums.get("clipped", 0.0) / self_tokens,
        "loss/ratio_mean": sums.get("ratio_sum", 0.0) / computed,
        "loss/ratio_max": sums.get("ratio_max", 0.0),
        "loss/peer_token_frac": peer_tokens / tokens,
        "grad_norm": sum(grad_norms) / num_steps,
        "grad_norm_max": max(grad_norms, default=0.0),
        "optim/steps": float(len(grad_norms)),
        "optim/lr": float(lr),
        "train/tokens": tokens / settings.algo.epochs,
        "train/skipped_frac": sums.get("skipped_tokens", 0.0) / tokens,
        "train/duplicate_frac": sums.get("duplicate_tokens", 0.0) / tokens,
        "time/fwd_bwd_s": sums.get("fwd_bwd_s", 0.0),
        "time/optim_s": sums.get("optim_s", 0.0),
        "cost/train_tokens": spent["train_tokens"],
        "cost/ref_tokens": spent["ref_tokens"],
    }
    if shard.sharded:  # ranks that had no sequence to train on, per minibatch pass
        out["shard/idle_rank_frac"] = spent["idle_ranks"] / max(passes * shard.world, 1)
    if (
        nonfinite or settings.algo.nonfinite == "skip"
    ):  # NaN/inf loss or gradient norm: steps not taken
        out["optim/nonfinite_steps"] = float(nonfinite)
    if precision.scaler is not None:  # float16 compute: steps the loss scaler skipped (overflow)
        out["optim/skipped_steps"] = sums.get("skipped_steps", 0.0)
    if peer_tokens > 0:
        out["loss/peer_clip_frac"] = sums.get("peer_clipped", 0.0) / peer_tokens
    if settings.algo.kl_coef > 0:
        out["loss/kl"] = sums.get("kl_sum", 0.0) / tokens
    return out
