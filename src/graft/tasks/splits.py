"""`SplitTask`: the accessors of a task that holds its three problem splits."""

from __future__ import annotations

from graft.types import Problem


class SplitTask:
    """A task whose train, test and validation problems are built once, in `_train`, `_test`
    and `_val` (disjoint)."""

    _train: tuple[Problem, ...]
    _test: tuple[Problem, ...]
    _val: tuple[Problem, ...]

    def train_problems(self) -> tuple[Problem, ...]:
        return self._train

    def test_problems(self) -> tuple[Problem, ...]:
        return self._test

    def val_problems(self) -> tuple[Problem, ...]:
        """Validation problems, disjoint from train and test (drawn after both)."""
        return self._val
