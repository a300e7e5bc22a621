"""Derived seeds: every random choice in a run is seeded from labels, never from hidden state."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any labels (run seed, step, policy, purpose): stable across processes."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1
