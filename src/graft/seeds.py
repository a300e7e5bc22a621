"""Derived seeds: every random choice in a run is seeded from labels, never from hidden state."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any labels (run seed, step, policy, purpose): stable across processes."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def row_seeds(seed: int, prompt_keys: Sequence[str], n: int) -> list[int]:
    """One seed per sampled row of a batch that holds each prompt `n` times: from the call's
    `seed`, the prompt's key (a problem id), which occurrence of that key in the batch it is, and
    the sample's index, so a row's draws do not depend on where in the batch it lies."""
    seen: Counter[str] = Counter()
    out = []
    for key in prompt_keys:
        occurrence = seen[key]
        seen[key] += 1
        out.extend(derive_seed(seed, "row", key, occurrence, j) for j in range(n))
    return out
