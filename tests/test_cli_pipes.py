"""A command whose reader leaves early (`graft ... | head -1`) stops quietly, as `cat` does: no
traceback, nothing on standard error, exit status 141 (128 + SIGPIPE; `--help`, which argparse
prints and ends itself, 0). The reader here closes its end after one line, or at once (so that
even a short output meets a closed pipe)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from test_store import _write

GRAFT = [sys.executable, "-m", "graft.cli"]


def _piped(args: list[str], *, lines: int) -> tuple[int, bytes, bytes]:
    """Run graft with its standard output read for `lines` lines, then closed."""
    proc = subprocess.Popen([*GRAFT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = b"".join(proc.stdout.readline() for _ in range(lines))
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    return proc.returncode, first, err


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store of 2,400 rows: its export is far more than a pipe holds."""
    uri = tmp_path_factory.mktemp("pipes") / "store"
    _write(str(uri), steps=range(200))
    return str(uri)


def test_an_export_read_for_one_line_stops_quietly(store):
    code, first, err = _piped(["store", "export", store], lines=1)
    assert first.startswith(b'{"') and (code, err) == (141, b""), err.decode()


@pytest.mark.parametrize(
    "args",
    [["--help"], ["config"], ["config", "--docs"], ["config", "--example", "graft_tiny"],
     ["store", "info", "STORE"], ["store", "export", "STORE"]],
    ids=["help", "config", "config-docs", "config-example", "store-info", "store-export"],
)  # fmt: skip
def test_every_command_that_prints_stops_quietly_at_a_closed_pipe(store, args):
    args = [store if a == "STORE" else a for a in args]
    code, _, err = _piped(args, lines=0)
    assert err == b"" and code in (0, 141), (code, err.decode())  # argparse's help: 0
