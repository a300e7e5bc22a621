"""The install hints graft prints and its guides give name commands that work today: graft is not
on a package registry, so a hint names an extra's own packages at graft's ranges, or the extra
from a clone (`pip install -e '.[NAME]'`), never `graft-rl[NAME]`."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from graft.extras import install_hint, requirements

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _texts() -> list[Path]:
    """Every file a user reads a hint in: the package's sources, the guides, the README."""
    return [*(ROOT / "src" / "graft").rglob("*.py"), *(ROOT / "docs").rglob("*.md"),
            ROOT / "README.md", *(ROOT / "examples").rglob("*.md")]  # fmt: skip


def test_no_hint_names_graft_on_a_registry():
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in _texts()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"graft-rl\[", line)
    ]
    assert not found, f"an install hint that cannot work (graft-rl is on no registry): {found}"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extras_hint_names_its_packages_at_graft_s_ranges(extra):
    """The hint's packages are the extra's requirements of pyproject.toml, and the clone's
    command names the extra."""
    want = {Requirement(r) for r in EXTRAS[extra]}
    got = {Requirement(r) for r in requirements(extra)}
    assert {(r.name, r.specifier) for r in got} == {(r.name, r.specifier) for r in want}
    hint = install_hint(extra)
    assert hint.startswith("pip install '") and f"pip install -e '.[{extra}]'" in hint
    for r in got:
        extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
        assert f"'{r.name}{extras}{r.specifier}'" in hint


def test_a_missing_extra_is_named_with_a_working_command(monkeypatch):
    """Through a real refusal: LoRA without peft names peft at graft's range."""
    import builtins

    from graft.models import lora

    real_import = builtins.__import__

    def without_peft(name, *args, **kwargs):
        if name == "peft" or name.startswith("peft."):
            raise ImportError("No module named 'peft'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_peft)
    with pytest.raises(lora.LoRAError) as err:
        lora._peft("models.0.lora")
    assert "pip install 'peft<1,>=0.18'" in str(err.value)
