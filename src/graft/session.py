"""A run's session: what one run holds open (the verifier pool, the policies' backend, the
recorder), opened through it and closed together, in reverse order, by one `close()`. Opening
inside `opening()` closes what was already open when a later step fails, so a refused config or
a model that will not load leaves no process or file handle behind. `graft train`, `graft sft`
and `graft probe` (through the trainer) hold one each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Protocol, TypeVar


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)


class RunSession:
    def __init__(self) -> None:
        self._stack = ExitStack()

    def open(self, thing: T) -> T:
        """`thing`, to be closed with the session (after everything opened later)."""
        self._stack.callback(thing.close)
        return thing

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the session closes (in reverse order with the rest)."""
        self._stack.callback(callback)

    @contextmanager
    def opening(self) -> Iterator[RunSession]:
        """Open a run's resources inside: an error there closes all that the session holds, then
        goes on; on success they stay open until `close()`."""
        with ExitStack() as guard:
            guard.callback(self.close)
            yield self
            guard.pop_all()

    def close(self) -> None:
        """Close everything opened, the last first; a second call does nothing."""
        self._stack.close()
