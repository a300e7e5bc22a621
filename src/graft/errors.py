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


def user_errors() -> tuple[type[BaseException], ...]:
    from graft.models.load import ModelLoadError

    return (ConfigError, DataError, ModelLoadError, FileNotFoundError, PolicyWorkerError)
