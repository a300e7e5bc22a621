"""Errors that are the user's to fix. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

from graft.configlib import ConfigError


class DataError(ValueError):
    """Bad or missing task data; the message names the file, row or column."""


class PolicyWorkerError(RuntimeError):
    """A policy's worker process (or Ray actor) failed or died; the message names the policy."""


def user_errors() -> tuple[type[BaseException], ...]:
    from graft.models.load import ModelLoadError

    return (ConfigError, DataError, ModelLoadError, FileNotFoundError, PolicyWorkerError)
