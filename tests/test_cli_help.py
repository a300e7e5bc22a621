"""Every `--help` text prints as meant. argparse %-formats help strings but not descriptions, so a
`95%%` written in a description shows both signs."""

from __future__ import annotations

import argparse

import pytest

from graft.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command and subcommand of the parser, as argv prefixes."""
    yield list(prefix)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))


COMMANDS = list(_commands(build_parser()))


def test_every_command_is_covered():
    assert ["demo"] in COMMANDS and ["compare"] in COMMANDS and ["store", "export"] in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "graft")
def test_help_texts_show_percent_signs_once(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert "usage:" in out and "%%" not in out and "%(" not in out
