"""graft's optional extras, and the command that installs each: what the hints graft prints name.

graft is not published on a package registry, so a hint names what works today: the packages
themselves, at the versions pyproject.toml allows (read from graft's installed metadata), and the
extra from a clone of graft (`pip install -e '.[NAME]'`).
"""

from __future__ import annotations

import importlib.metadata
import re

DISTRIBUTION = "graft-rl"
"""graft's distribution name (its metadata's), under which no registry holds it."""


def requirements(extra: str) -> list[str]:
    """The requirements of graft's extra `extra`, as its installed metadata states them ([] where
    graft's metadata is not installed: run from a source tree)."""
    try:
        lines = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    out = []
    for line in lines:
        requirement, _, marker = line.partition(";")
        if wanted.search(marker):
            out.append(requirement.strip().replace(" ", ""))
    return out


def install_hint(extra: str) -> str:
    """The command that installs `extra`: its packages at graft's ranges, or the extra from a
    clone of graft."""
    clone = f"pip install -e '.[{extra}]' in a clone of graft"
    packages = " ".join(f"'{r}'" for r in requirements(extra))
    return f"pip install {packages} (or {clone})" if packages else clone
