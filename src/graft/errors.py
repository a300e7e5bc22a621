"""Errors that are the user's to fix. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

from graft.configlib import ConfigError


class DataError(ValueError):
    """Bad or missing task data; the message names the file, row or column."""


def user_errors() -> tuple[type[BaseException], ...]:
    from graft.backends.processes import PolicyWorkerError
    from graft.models.load import ModelLoadError

    return (ConfigError, DataError, ModelLoadError, FileNotFoundError, PolicyWorkerError)
