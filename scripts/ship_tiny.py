"""Record the tiny presets that ship pre-trained (graft.models.tiny_shipped.SHIPPED_PRESETS).

Run after a change to one of their specs or to the pinned torch / transformers / tokenizers
(a fast test fails until then): each preset is pre-trained from its spec into a fresh cache, never
copied from an earlier shipped entry, and its files are recorded with their checksums in
src/graft/models/shipped/, replacing the entry of the old key.

    .venv/bin/python scripts/ship_tiny.py [PRESET ...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from graft.models.tiny import build_tiny
from graft.models.tiny_shipped import SHIPPED_PRESETS, record


def ship(presets: tuple[str, ...], root: Path | None = None) -> list[Path]:
    """Pre-train each preset afresh and record it; the recorded entries."""
    out = []
    with tempfile.TemporaryDirectory(prefix="graft-ship-") as cache:
        for name in presets:
            built = build_tiny(name, cache_dir=Path(cache), progress=True, use_shipped=False)
            out.append(record(built, root))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=list(SHIPPED_PRESETS))
    args = parser.parse_args()
    for path in ship(tuple(args.presets)):
        print(path)


if __name__ == "__main__":
    main()
