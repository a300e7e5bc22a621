"""The `graft` command line: one module per command, each with `add_parser(sub)` and `run(args)`.

Building the parser imports only argparse (`graft --help` stays fast); a command imports what it
needs when it runs. Every user error ends the same way: exit code 2 and one line, `graft: error:
...`, naming the key, file, row or argument (`graft.errors.user_errors`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from graft.cli import (
    code,
    compare,
    config,
    demo,
    export,
    plot,
    probe,
    sample,
    sft,
    store,
    tiny,
    train,
)
from graft.cli import eval as evaluate
from graft.cli.common import EPILOG, OneLineParser

COMMANDS = (
    train, sft, probe, config, tiny, store, sample, evaluate, plot, export, compare, demo, code,
)  # fmt: skip
"""In the order `graft --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="graft",
        description="RLVR for language models: GRPO and GRAFT (peer-trajectory exchange).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # --help and --version print here
    except BrokenPipeError:
        if not _stdout_unread():
            raise
        return _reader_gone()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    shown_as, warnings.showwarning = (
        warnings.showwarning,
        partial(_show_warning, warnings.showwarning),
    )
    try:
        return _run(args)
    finally:
        warnings.showwarning = shown_as


def _run(args: argparse.Namespace) -> int:
    from graft.errors import RunStopped, user_errors

    try:
        return args.handler(args)
    except BrokenPipeError:
        if not _stdout_unread():
            raise  # another pipe broke: not the reader of our output leaving
        return _reader_gone()  # its reader stopped reading (`graft ... | head -1`)
    except user_errors() as err:
        print(f"graft: error: {' '.join(str(err).split())}", file=sys.stderr)  # one line
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: the trainer says where it stopped
        print(f"graft: {' '.join(str(err).split()) or 'interrupted'}", file=sys.stderr)
        return 130
    except OSError as err:
        return _os_error(err)
    except RunStopped as err:
        print(f"graft: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def _show_warning(
    shown_as: Callable[..., None], message: Warning | str, category: type[Warning], *args: Any
) -> None:
    """graft's own warnings (a deprecated config key) as one line; others as before."""
    from graft.config.lib import ConfigDeprecationWarning

    if issubclass(category, ConfigDeprecationWarning):
        print(f"graft: warning: {message}", file=sys.stderr)
    else:
        shown_as(message, category, *args)


def _stdout_unread() -> bool:
    """Standard output is a pipe whose reader is gone (the kernel reports an error on it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _reader_gone() -> int:
    """Stop quietly, as `cat` does when its reader leaves early: no traceback, nothing more
    written (standard output is pointed at /dev/null, so the interpreter's last flush cannot
    fail again), exit status 141 (128 + SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


def _os_error(err: OSError) -> int:
    """A full disk or a place we may not write to: one line naming the path; else re-raised."""
    import errno

    from graft.rundir import is_disk_full

    where = err.filename or " ".join(str(err).split())
    if is_disk_full(err):
        print(f"graft: error: no space left on device writing {where}", file=sys.stderr)
        return 2
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "a read-only file system" if err.errno == errno.EROFS else "permission denied"
        print(f"graft: error: cannot write {where}: {why}", file=sys.stderr)
        return 2
    raise err
