"""What a verifier learns from the problem's own text (pure functions, no math libraries).

- `restates_problem`: a box that only copies an expression of the problem computes nothing
  and is not an answer: `\\boxed{\\sum_{k=1}^{100} k}` for "Compute $\\sum_{k=1}^{100} k$",
  `\\frac{12}{18}` for "Simplify $\\frac{12}{18}$", `(x-3)(x+2)` for "Expand $(x+2)(x-3)$".
  Copied means: the box's spelling (spaces, `\\left`/`\\right`, `\\dfrac` aside) occurs in the
  problem, or its symbols are those of one of the problem's math expressions (or one side of
  an equation in it) in another order with the same value. A box that is a number in lowest
  terms or a single symbol is never a copy: picking an option the problem lists is an answer.
  Its price: an option that is itself an expression (`\\sqrt{2}` from "which is larger,
  $\\sqrt{2}$ or $1.5$?") is not rewarded.
- `asked_units`: the units a question asks for (`in meters`, `how many seconds`), so that a value
  given in another unit (`2 \\text{ cm}` when meters are asked and the gold is `2`) is wrong.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from math import gcd

from graft.tasks.forms import UNITS, rewrite, split_unit

_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_NOISE = re.compile(r"\\left|\\right|\\displaystyle|\\limits|\s+|\$")
_TOKEN = re.compile(r"\\[A-Za-z]+|\d+|[A-Za-z]|[^\s{}]")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_FRACTION = re.compile(r"[-+]?(?:\\frac\{(\d+)\}\{(\d+)\}|(\d+)/(\d+))")
_SYMBOL = re.compile(r"[-+]?(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?")
_MAX_EXPRESSIONS = 32


def _normal(text: str) -> str:
    text = _NOISE.sub("", text)
    return re.sub(r"\\[dt]frac", r"\\frac", text)


def _literal(box: str) -> bool:
    """A number in lowest terms or a single symbol: never a copy of the problem."""
    value = split_unit(rewrite(box))[0].replace(" ", "")
    if _NUMBER.fullmatch(value) or _SYMBOL.fullmatch(value):
        return True
    fraction = _FRACTION.fullmatch(value)
    if fraction is None:
        return False
    num, den = (int(g) for g in fraction.groups() if g is not None)
    return den > 1 and gcd(num, den) == 1


def _expressions(problem: str) -> list[str]:
    """The problem's math expressions, and each side of an equation among them."""
    found = [next(g for g in m.groups() if g is not None) for m in _MATH.finditer(problem)]
    out = []
    for expr in found[:_MAX_EXPRESSIONS]:
        out.append(expr)
        sides = expr.split("=")
        if len(sides) > 1:
            out.extend(sides)
    return out


def restates_problem(
    box: str, problem: str, same_value: Callable[[str, str], bool] | None = None
) -> bool:
    """Does the box only copy an expression of the problem (module docstring)? A reordering of
    an expression's symbols is a copy only when `same_value(box, expression)` says it has the
    expression's value (`(x-3)(x+2)` for `(x+2)(x-3)`, but not `(4, 3)` for `(3, 4)`); without
    `same_value`, only the spelling counts."""
    if not problem.strip() or _literal(box):
        return False
    spelled = _normal(box)
    if not spelled or spelled in _normal(problem):
        return bool(spelled)
    if same_value is None:
        return False
    tokens = Counter(_TOKEN.findall(spelled))
    return any(
        Counter(_TOKEN.findall(_normal(e))) == tokens and same_value(box, e)
        for e in _expressions(problem)
    )


_ASKED = re.compile(
    r"\b(?:in|how\s+many|how\s+much|number\s+of)\s+(?:square\s+|cubic\s+)?"
    r"([A-Za-z]+(?:/[A-Za-z]+)?)",
    re.IGNORECASE,
)


def asked_units(problem: str) -> list[str]:
    """The units the question asks its answer in (`in meters`, `how many seconds`), in order."""
    return [
        m.group(1) for m in _ASKED.finditer(problem) if len(m.group(1)) > 1 and m.group(1) in UNITS
    ]
