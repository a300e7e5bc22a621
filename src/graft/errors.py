"""Errors that are the user's to fix. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

from graft.config.lib import ConfigError


class DataError(ValueError):
    """Bad or missing task data; the message names the file, row or column."""


class RunStopped(RuntimeError):
    """Training stopped on a fault it must not carry on past (a NaN or infinite loss or gradient);
    the message names the policy and step, and the last checkpoint is intact. Exit code 1."""


class PolicyWorkerError(RuntimeError):
    """A policy's worker process (or Ray actor) failed or died; the message names the policy."""


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded; the message is one line naming path and cause."""


def user_errors() -> tuple[type[BaseException], ...]:
    """What the CLI prints as one line (nothing heavy is imported to know it)."""
    return (ConfigError, DataError, ModelLoadError, FileNotFoundError, PolicyWorkerError)
