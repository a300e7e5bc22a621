"""Gold answers checked when the data is loaded, before any training or evaluation.

A gold answer that the verifier cannot parse can never be rewarded: every group on that problem is
all-zero, silently. So the golds of every training set and evaluation suite are first judged
against an empty response in the verifier pool (same verifier, same time limit): a built-in
verifier answers `error` exactly when the gold itself is unusable. The check reports how many
golds fail and names the first few; above `verify.max_unparseable_golds` (a share) graft refuses
to start. Below it, training leaves those problems out (they could teach nothing) and evaluation
keeps them, scored as `error`, and records the count in eval.json.

Plug-in verifiers are not checked: what they answer to an empty response is theirs to define.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graft.errors import DataError
from graft.types import Problem
from graft.verify.pool import VerifierPool
from graft.verify.registry import VERIFIERS, verifier_for_extract

CHECKED_VERIFIERS = (*VERIFIERS, verifier_for_extract("math", "answer_line"))
_SHOWN = 3


@dataclass(frozen=True)
class GoldCheck:
    """Which golds of a problem set the verifier cannot use (1-based problem numbers)."""

    where: str
    verifier: str
    total: int
    bad: tuple[tuple[int, str, str], ...]
    """(problem number, gold, the verifier's reason) of each unusable gold."""

    @property
    def fraction(self) -> float:
        return len(self.bad) / self.total if self.total else 0.0

    def summary(self) -> str:
        """One line: how many, and the first few with the verifier's reason."""
        shown = "; ".join(
            f"problem {n}: {gold[:60]!r} ({detail[:80]})" for n, gold, detail in self.bad[:_SHOWN]
        )
        more = f"; and {len(self.bad) - _SHOWN} more" if len(self.bad) > _SHOWN else ""
        return (
            f"{self.where}: {len(self.bad)} of {self.total} gold answers cannot be parsed by the "
            f"{self.verifier!r} verifier, so no response can be rewarded on them ({shown}{more})"
        )


def check_golds(
    pool: VerifierPool, verifier: str, problems: Sequence[Problem], *, where: str
) -> GoldCheck | None:
    """The unusable golds of `problems`; None for a verifier that is not checked (plug-ins)."""
    if verifier not in CHECKED_VERIFIERS:
        return None
    golds = list(dict.fromkeys(p.gold for p in problems))  # each distinct gold once
    verdicts = dict(zip(golds, pool.verify([(verifier, "", g) for g in golds]), strict=True))
    bad = tuple(
        (n, p.gold, verdicts[p.gold].detail or verdicts[p.gold].category)
        for n, p in enumerate(problems, start=1)
        if verdicts[p.gold].category in ("error", "timeout")
    )
    return GoldCheck(where, verifier, len(problems), bad)


def require_golds(check: GoldCheck | None, *, max_fraction: float) -> None:
    """Refuse (DataError) a problem set whose share of unusable golds is above `max_fraction`."""
    if check is None or not check.bad or check.fraction <= max_fraction:
        return
    raise DataError(
        f"{check.summary()}; that is {check.fraction:.1%}, above "
        f"verify.max_unparseable_golds={max_fraction:g} (check the answer column, or raise the "
        "setting to train without those problems)"
    )


def usable_problems(check: GoldCheck | None, problems: Sequence[Problem]) -> tuple[Problem, ...]:
    """`problems` without those whose gold is unusable."""
    if check is None or not check.bad:
        return tuple(problems)
    bad = {n for n, _, _ in check.bad}
    return tuple(p for n, p in enumerate(problems, start=1) if n not in bad)
