"""`graft tiny`: list the tiny CPU presets, or build (or reuse from the cache) one of them."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    tiny = sub.add_parser("tiny", help="tiny CPU models built locally")
    tiny_sub = tiny.add_subparsers(dest="tiny_command", required=True)
    build = tiny_sub.add_parser("build", help="build (or reuse from the cache) a tiny preset")
    build.add_argument("preset", help="preset name (see `graft tiny list`)")
    tiny_sub.add_parser(
        "list", help="list the tiny presets (those that ship pre-trained for these versions too)"
    )
    tiny.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from graft.config.lib import ConfigError
    from graft.models.tiny import TINY_PRESETS, build_tiny, spec_hash
    from graft.models.tiny_shipped import shipped_entry

    if args.tiny_command == "list":
        for name, spec in TINY_PRESETS.items():
            ships = shipped_entry(f"{name}-{spec_hash(spec)}") is not None
            print(
                f"{name:26s} {spec.arch:6s} {spec.tokenizer:5s} skills={','.join(spec.task.skills)}"
                + ("  (ships pre-trained)" if ships else "")
            )
        return 0
    if args.preset not in TINY_PRESETS:
        raise ConfigError(f"unknown tiny preset {args.preset!r}; known: {', '.join(TINY_PRESETS)}")
    print(build_tiny(args.preset, progress=True))
    return 0
