"""The one writer of peer logs: verify-then-group (`verified_groups`), a policy's provenance
(`provenance`) and a store's rows written a step and a model at a time (`LogWriter`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graft.config import RolloutConfig
from graft.groups import Advantage, make_groups
from graft.store import Provenance, StoreWriter, group_rows
from graft.types import Group, Rollout, Verdict
from graft.verify.registry import verifier_version
from graft.verify.scoring import verify_rollouts

Verdicts = tuple[Verdict, ...]


def verified_groups(
    pool: Any,
    verifier: str,
    rollouts_P: Sequence[Rollout],
    adv: Advantage,
    *,
    adjust: Callable[[Rollout, Verdicts], Verdicts] | None = None,
) -> tuple[tuple[Group, ...], list[Verdicts]]:
    """Each rollout's completions verified by `verifier` in `pool`, then grouped with their
    advantages under `adv`; `adjust` may change a rollout's verdicts before the grouping (the
    shuffled-rewards control). Returns the groups and the verdicts as verified."""
    verdicts = verify_rollouts(pool, verifier, rollouts_P)
    used = [adjust(r, vs) for r, vs in zip(rollouts_P, verdicts)] if adjust else verdicts
    return make_groups(rollouts_P, used, adv), verdicts


def provenance(
    run_id: str,
    model: str,
    info: Mapping[str, str],
    verifier: str,
    rollout: RolloutConfig,
    *,
    max_new_tokens: int = 0,
    version: str = "",
) -> Provenance:
    """What every row of one policy's groups shares: the run, the model and its weights'
    revision (`info`: a worker's `describe()`), the verifier and its version, the sampling
    settings (`max_new_tokens`: the source's own limit where it differs from the rollout's)."""
    return Provenance(
        run_id=run_id,
        model=model,
        model_revision=info.get("model_revision", ""),
        tokenizer=info.get("tokenizer", ""),
        verifier=verifier,
        verifier_version=version or verifier_version(verifier),
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        max_new_tokens=max_new_tokens or rollout.max_new_tokens,
    )


class LogWriter:
    """One store being written: its run's metadata, each model's provenance, and each step's
    groups of a model as rows (`group_rows`'s further columns passed through)."""

    def __init__(
        self,
        uri: str,
        *,
        run_id: str,
        run_meta: Mapping[str, Any],
        provenance: Mapping[str, Provenance],
        background: bool = False,
    ) -> None:
        self.uri, self.provenance = uri, dict(provenance)
        self.store = StoreWriter(uri, run_id=run_id, run_meta=dict(run_meta),
                                 background=background)  # fmt: skip

    def write(self, model: str, step: int, groups: Sequence[Group], **columns: Any) -> None:
        rows = group_rows(groups, step=step, prov=self.provenance[model], **columns)
        self.store.write(model, step, rows)

    def flush(self) -> None:
        self.store.flush()

    def update_run_meta(self, **fields: Any) -> None:
        self.store.update_run_meta(**fields)

    def close(self) -> None:
        self.store.close()
