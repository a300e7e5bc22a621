"""The example configs, shipped with the package: `graft config --example NAME` prints one (the
repository's `configs/` folder is this one)."""

from __future__ import annotations

from importlib import resources


def example_names() -> list[str]:
    """The examples' names (file names without `.yaml`)."""
    return sorted(
        p.name[: -len(".yaml")]
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".yaml")
    )


def example_text(name: str) -> str:
    """The YAML text of one example, comments included."""
    from graft.config import ConfigError

    names = example_names()
    if name not in names:
        raise ConfigError(
            f"graft config --example {name!r}: no such example; examples: {', '.join(names)}"
        )
    return resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
