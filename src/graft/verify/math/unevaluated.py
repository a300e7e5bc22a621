"""Work an answer leaves undone (pure functions, no math libraries).

A question that asks to evaluate or simplify (`Simplify $\\sqrt{50}$`, `Evaluate log₂ 64`,
`in lowest terms`) is not answered by a rewrite of what it asks about, even one of the right
value: `\\sqrt{25 \\cdot 2}`, `\\log_2 64`, `\\frac{10}{12}`. `leftover_work` names the kinds of
work a spelling leaves undone; the verifier compares them with the gold's, so a gold that is
itself a power (`2^{64}`) or a logarithm (`\\log_2 3`) keeps answers of its own form right.

A big operator left in the box (`\\sum_{k=1}^{10} k`, `\\int_0^1 2x\\,dx`, a limit) restates the
computation whatever the question's words; one the gold keeps and the box evaluates away asks for
the setup (sigma notation, "set up but do not evaluate"). The forms a question asks for in words
are `graft.verify.math.answer_form`'s.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_NUMBER = r"\d+(?:\.\d+)?"
# Two numbers with an operation between them: `25 \cdot 2`, `3 + 4` (never an exponent `^{2}`,
# a coefficient `2x` or a scientific power `3 \times 10^{5}`).
_ARITHMETIC = re.compile(
    rf"(?<!\^\{{)(?<!_\{{)(?<![\w.^_\\]){_NUMBER}\s*(?:\\cdot|\\times|\\div|[*+\-÷×·])\s*"
    rf"{_NUMBER}(?![\w.^{{(\\])"
)
# A fraction of two integers, `\\frac{10}{12}` or `10/12` (also `answer_form`'s improper fractions).
FRACTION = re.compile(
    r"\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])"
)
_ROOT = re.compile(r"\\sqrt\s*(?:\[\s*(\d+)\s*\])?\s*(?:\{\s*(\d+)\s*\}|(\d))")
_POWER = re.compile(rf"(?<![\w.^_\\{{])({_NUMBER})\s*\^\s*(?:\{{\s*-?\d+\s*\}}|-?\d)")
_LOG = re.compile(
    r"\\(log|lg|ln)\s*(?:_\s*\{?\s*(\d+)\s*\}?)?\s*(?:\\left)?\s*[({]?\s*(\d+)\s*(?:\\right)?[)}]?"
)
_FACTORIAL = re.compile(r"\d\s*!|\\[dt]?binom\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}")
_OPERATOR = re.compile(r"\\(?:sum|prod|int|lim)(?![A-Za-z])")
_TRIG = re.compile(
    r"\\(?:sin|cos|tan|sec|csc|cot)\s*(?:\^\s*\{?\d\}?)?\s*(?:\\left)?\s*[({]?\s*(?:\d|\\pi|\\frac)"
)


def _has_power_factor(n: int, k: int) -> bool:
    """Has `n` a factor m^k with m > 1 (a root of it can be taken out)?"""
    m = 2
    while m**k <= n:
        if n % m**k == 0:
            return True
        m += 1
    return False


def _rational_log(base: int, value: int) -> bool:
    """Is log_base(value) a rational number (base^p = value^q for small p, q)?"""
    if base < 2 or value < 1:
        return False
    if value == 1:
        return True
    ratio = Fraction(math.log(value) / math.log(base)).limit_denominator(12)
    p, q = ratio.numerator, ratio.denominator
    return 0 < p <= 64 and base**p == value**q


def _unreduced(match: re.Match[str]) -> bool:
    num, den = (int(g) for g in match.groups() if g is not None)
    return den == 1 or math.gcd(num, den) > 1


def leftover_work(text: str) -> frozenset[str]:
    """The kinds of work `text` leaves undone: "arithmetic" (`25 \\cdot 2`), "fraction" (not in
    lowest terms), "root" (a square factor left inside, `\\sqrt{50}`), "power" of a number other
    than 10, "log" with a rational value (`\\log_2 64`), "factorial" or binomial, "operator"
    (`\\sum`, `\\int`...), "trig" of a number."""
    kinds = set()
    if _ARITHMETIC.search(text):
        kinds.add("arithmetic")
    if any(_unreduced(m) for m in FRACTION.finditer(text)):
        kinds.add("fraction")
    for root in _ROOT.finditer(text):
        if _has_power_factor(int(root.group(2) or root.group(3)), int(root.group(1) or 2)):
            kinds.add("root")
    if any(float(m.group(1)) != 10 for m in _POWER.finditer(text)):
        kinds.add("power")
    for log in _LOG.finditer(text):
        base = int(log.group(2)) if log.group(2) else (10 if log.group(1) != "ln" else 0)
        if int(log.group(3)) == 1 or _rational_log(base, int(log.group(3))):
            kinds.add("log")
    checks = (("factorial", _FACTORIAL), ("operator", _OPERATOR), ("trig", _TRIG))
    kinds.update(kind for kind, pattern in checks if pattern.search(text))
    return frozenset(kinds)
