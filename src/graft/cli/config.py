"""`graft config`: print the resolved config, or document every key."""

from __future__ import annotations

import argparse

from graft.cli.common import load


def add_parser(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser("config", help="print the resolved config, or document every key")
    config.add_argument("config", nargs="?", help="YAML config file")
    config.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    config.add_argument(
        "--docs",
        action="store_true",
        help="list every key with its type, default, accepted values and meaning",
    )
    config.add_argument(
        "--example",
        nargs="?",
        const="",
        metavar="NAME",
        help="print a shipped example config (graft_tiny, grpo_tiny, ...); without NAME, list them",
    )
    config.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from graft.config import Config, to_dict
    from graft.config.reference import key_docs

    if args.example is not None:
        from graft.configs import example_names, example_text

        print(example_text(args.example) if args.example else "\n".join(example_names()), end="")
        if not args.example:
            print()
        return 0
    if args.docs:
        for row in key_docs(Config):
            default = f", default {row.default}" if row.default else ""
            print(f"{row.key}  ({row.type}{default})")
            if row.doc:
                print(f"    {row.doc}")
            if row.accepts:
                print(f"    accepts: {row.accepts}")
        return 0
    cfg = load(args.config, args.overrides)
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    return 0
