"""Verifiers by name, and what their verdicts are counted under.

A verifier turns a response, its problem's gold and the problem's text into a `Verdict`. It
follows the `Verifier` protocol:
- `name`, and `version`: the provenance string stored with every rollout it judged;
- `kind` (`VerifierKind`): whether it runs the response as a program, and how;
- `reasons`: the closed set of reasons its verdicts name, by category (`Verdict.reason`);
- `time_budget(gold)`: the wall clock one response against that gold may take (0: none of its
  own; the pool's deadline is the larger of this and `verify.timeout_s`);
- `prepare()`: import what it needs, before the pool's clock starts;
- `__call__(response, gold, problem)`.

The built-in verifiers are the entries of `VERIFIERS`: a new one adds its function and one
`BuiltInVerifier` line there. Any other is named by import path, `"package.module:name"`: an
object that follows the protocol is used as it is; a plain function `(response, gold, problem)`
(or `(response, gold)`, from before the problem was passed) becomes a `PlugInVerifier`, whose
verdicts count in the math grader's reasons and whose deadline is `verify.timeout_s`.
"""

from __future__ import annotations

import enum
import importlib
import importlib.metadata
import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from graft.types import VERDICT_CATEGORIES, Verdict
from graft.verify.code.verifier import (
    CODE_REASONS,
    gold_time_budget_s,
    verify_code,
    verify_code_unsafe_local,
)
from graft.verify.math.grader import (
    MATH_REASONS,
    STRICT_MATH_REASONS,
    verify_final_number,
    verify_math,
    verify_math_answer_line,
    verify_math_answer_line_strict,
    verify_math_strict,
)
from graft.verify.math.values import _math

Reasons = Mapping[str, tuple[str, ...]]
"""A verifier's reasons: the names `Verdict.reason` may take, by verdict category."""


class VerifierKind(enum.Enum):
    """What a verifier does with a response."""

    TEXT = "text"
    """Reads it; runs nothing."""
    SANDBOXED = "sandboxed"
    """Runs its program in `graft.sandbox`."""
    UNSAFE_LOCAL = "unsafe_local"
    """Runs its program as a plain local process, without isolation."""

    @property
    def runs_code(self) -> bool:
        return self is not VerifierKind.TEXT


@runtime_checkable
class Verifier(Protocol):
    """A verifier (see the module docstring)."""

    name: str
    kind: VerifierKind
    reasons: Reasons

    @property
    def version(self) -> str: ...

    def time_budget(self, gold: str) -> float: ...

    def prepare(self) -> None: ...

    def __call__(self, response: str, gold: str, problem: str = "") -> Verdict: ...


@dataclass(frozen=True)
class BuiltInVerifier:
    """A verifier that ships with graft."""

    name: str
    check: Callable[[str, str, str], Verdict]
    revision: str
    """Its own revision, part of `version`: raised whenever a verdict may change."""
    kind: VerifierKind = VerifierKind.TEXT
    reasons: Reasons = field(default_factory=lambda: MATH_REASONS)
    budget: Callable[[str], float] | None = None
    packages: tuple[str, ...] = ()
    """Distributions whose versions decide verdicts too; `version` names them."""
    warm: Callable[[], object] | None = None

    @property
    def version(self) -> str:
        pinned = [f"{p}=={importlib.metadata.version(p)}" for p in self.packages]
        return ";".join([*(pinned or [self.name]), self.revision])

    def time_budget(self, gold: str) -> float:
        return self.budget(gold) if self.budget is not None else 0.0

    def prepare(self) -> None:
        if self.warm is not None:
            self.warm()

    def __call__(self, response: str, gold: str, problem: str = "") -> Verdict:
        return self.check(response, gold, problem)


_STRICT = "graft-strict-6"
_MATH = {"packages": ("math-verify",), "warm": _math}
VERIFIERS: dict[str, BuiltInVerifier] = {
    v.name: v
    for v in (
        # The training verdict: a right final box followed by any other value earns nothing.
        BuiltInVerifier("math", verify_math_strict, _STRICT, reasons=STRICT_MATH_REASONS, **_MATH),
        BuiltInVerifier(
            "math_answer_line",
            verify_math_answer_line_strict,
            _STRICT,
            reasons=STRICT_MATH_REASONS,
            **_MATH,
        ),
        # The careful reading of what follows the box, for evaluation beside the training one.
        BuiltInVerifier("math_careful", verify_math, _STRICT, **_MATH),
        BuiltInVerifier("math_answer_line_careful", verify_math_answer_line, _STRICT, **_MATH),
        BuiltInVerifier("final_number", verify_final_number, "1"),
        BuiltInVerifier(
            "code",
            verify_code,
            "graft-sandbox-1",
            VerifierKind.SANDBOXED,
            CODE_REASONS,
            gold_time_budget_s,
        ),
        BuiltInVerifier(
            "code_unsafe_local",
            verify_code_unsafe_local,
            "graft-unsafe-local-1",
            VerifierKind.UNSAFE_LOCAL,
            CODE_REASONS,
            gold_time_budget_s,
        ),
    )
}


@dataclass(frozen=True)
class PlugInVerifier:
    """A plain function named by import path, as a `Verifier`."""

    name: str
    fn: Callable[..., Verdict]
    kind: VerifierKind = VerifierKind.TEXT
    reasons: Reasons = field(default_factory=lambda: MATH_REASONS)
    takes_problem: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "takes_problem", _takes_problem(self.fn))

    @property
    def version(self) -> str:
        top = self.name.partition(":")[0].split(".")[0]
        try:
            return f"{self.name};{importlib.metadata.version(top)}"
        except importlib.metadata.PackageNotFoundError:
            return f"{self.name};unversioned"

    def time_budget(self, gold: str) -> float:
        return 0.0

    def prepare(self) -> None:
        return None

    def __call__(self, response: str, gold: str, problem: str = "") -> Verdict:
        if self.takes_problem:
            return self.fn(response, gold, problem)
        return self.fn(response, gold)


def _takes_problem(fn: Callable[..., Verdict]) -> bool:
    """Does a function take the problem text as its third argument (two-argument plug-ins from
    before the problem was passed do not)?"""
    try:
        inspect.signature(fn).bind("", "", "")
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): call it the current way
        return True
    return True


LEGACY_NAMES = {"graft.tasks.verify:verify_math_answer_line": "math_answer_line"}
"""Names a verifier was recorded under before it had a built-in one (stores, configs)."""


def check_name(name: str) -> tuple[str, str]:
    """A plug-in name split as (module, attribute), or ("", name) for a built-in one; ValueError
    for a name that is neither (nothing is imported)."""
    name = LEGACY_NAMES.get(name, name)
    if name in VERIFIERS:
        return "", name
    module, sep, attr = name.partition(":")
    if not (sep and module and attr.isidentifier()):
        raise ValueError(
            f"unknown verifier {name!r}: use one of {sorted(VERIFIERS)} "
            "or an import path 'package.module:function'"
        )
    return module, attr


def built_in(name: str) -> BuiltInVerifier | None:
    """The built-in verifier called `name` (or a name it was recorded under); None for others."""
    return VERIFIERS.get(LEGACY_NAMES.get(name, name))


def resolve_verifier(name: str) -> Verifier:
    """The verifier called `name`: built-in, or imported from its path (see the module
    docstring); ValueError for a name that is neither, ImportError for a module not found."""
    module_name, attr = check_name(name)
    if not module_name:
        return VERIFIERS[attr]
    found = getattr(importlib.import_module(module_name), attr, None)
    if isinstance(found, Verifier):
        return found
    if not callable(found):
        raise ValueError(f"verifier {name!r}: module {module_name!r} has no function {attr!r}")
    return PlugInVerifier(name, found)


def verifier_version(name: str) -> str:
    """Provenance string of a verifier, e.g. "math-verify==0.9.0;graft-strict-5"."""
    return resolve_verifier(name).version


EXTRACTIONS = ("boxed", "answer_line")


def verifier_for_extract(name: str, extract: str) -> str:
    """The verifier that reads answers as `verify.extract` says: `boxed` keeps `name`;
    `answer_line` turns `math` into `math_answer_line` and `math_careful` into
    `math_answer_line_careful` (other verifiers have no box)."""
    if extract not in EXTRACTIONS:
        raise ValueError(f"unknown extraction {extract!r}; use one of {list(EXTRACTIONS)}")
    if extract == "boxed":
        return name
    if name not in _ANSWER_LINE:
        raise ValueError(
            f"answer_line applies to the math verifiers only (the verifier is {name!r})"
        )
    return _ANSWER_LINE[name]


_ANSWER_LINE = {"math": "math_answer_line", "math_careful": "math_answer_line_careful"}


# ---------------------------------------------------------------------------- verdict counts


def counted_reason(verdict: Verdict, reasons: Reasons) -> str:
    """The reason a verdict is counted under: its own; for a plug-in's verdict without one, its
    category's first reason when wrong, `other` (where the category has one) otherwise."""
    names = reasons.get(verdict.category, ())
    if verdict.reason in names or not names:
        return verdict.reason
    if verdict.category == "wrong" or "other" not in names:
        return names[0]
    return "other"


def verdict_counts(verdicts: Iterable[Verdict], verifier: str = "") -> dict[str, float]:
    """`verdict/<category>` counts, and `verdict/<category>/<reason>` for the reasons of
    `verifier` (the math grader's when none is named; every key present, zeros included, so
    that curves line up)."""
    verdicts = list(verdicts)
    table = resolve_verifier(verifier).reasons if verifier else MATH_REASONS
    categories = Counter(v.category for v in verdicts)
    reasons = Counter((v.category, counted_reason(v, table)) for v in verdicts)
    out = {f"verdict/{c}": float(categories.get(c, 0)) for c in VERDICT_CATEGORIES}
    for category, names in table.items():
        for reason in names:
            out[f"verdict/{category}/{reason}"] = float(reasons.get((category, reason), 0))
    return out
