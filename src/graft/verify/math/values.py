"""Values of math answers: parsing a gold or an answer whole, and comparing two values exactly
(rationals, tuples, sets, intervals, clock times, elided sequences) or, for a decimal gold given
to a few significant figures, after rounding. The rules are `graft.verify.registry`'s docstring."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from fractions import Fraction
from functools import cache, lru_cache
from types import SimpleNamespace
from typing import Any

from graft.verify.math import forms

# Exact powers are computed only up to this many bits; larger ones are compared by value.
_MAX_EXACT_BITS = 1 << 20
_REL_TOL_EXACT = 1e-30
_REL_TOL_DECIMAL = 1e-9
_EVAL_DIGITS = 50


@cache
def _math() -> SimpleNamespace:
    """Import math-verify lazily: workers that only check arithmetic never pay for sympy."""
    import math_verify.grader as grader
    import sympy
    from latex2sympy2_extended.latex2sympy2 import latex2sympy, normalize_latex
    from math_verify.parser import LatexExtractionConfig

    # It warns once per process that its SIGALRM timeout is off; that is deliberate here.
    grader.TIMEOUT_WARNING_SHOWN = True
    # Units are split off by graft.verify.math.forms.split_unit, which never eats a variable; the
    # normalizer's own unit stripping reads trailing letters as units (1/m t -> 1/m).
    config = dataclasses.replace(LatexExtractionConfig().normalization_config, units=False)
    return SimpleNamespace(
        sympy=sympy,
        grader=grader,
        latex2sympy=latex2sympy,
        normalize=normalize_latex,
        config=config,
    )


def parse_latex(text: str) -> Any:
    """Parse LaTeX as a whole into a sympy object, as the content of `$...$`; raise if it fails.

    This is the step math-verify's `parse()` applies to a matched math environment, without its
    retry on fragments of the text.
    """
    m = _math()
    normalized = m.normalize(text, config=m.config)
    if not normalized.strip():
        raise ValueError(f"nothing to parse in {text!r}")
    return m.latex2sympy(
        normalized,
        is_real=not m.grader.should_treat_as_complex(normalized),
        convert_degrees=False,
        normalization_config=None,
    )


@lru_cache(maxsize=4096)
def parse_answer(text: str) -> Any:
    """Parse a gold or an answer: the forms of `graft.verify.math.forms` first, then LaTeX as a
    whole; text markup that does not parse as written is tried again respelled
    (`forms.respell_text`). Cached per process (sympy values are immutable): a gold is parsed
    once for its whole group, and a box once for both the commitment rules and the verdict."""
    try:
        return _parse_form(text)
    except Exception:
        respelled = forms.respell_text(text)
        if respelled == text:
            raise
        return _parse_form(respelled)  # `\\operatorname {red}`, `\\text{\\emph{red}}`


def _parse_form(text: str) -> Any:
    text = forms.split_unit(forms.rewrite(text))[0]
    clock = forms.clock_time(text)
    if clock is not None:
        return clock
    parts = forms.elided_parts(text)
    if parts is not None:
        return forms.Elided(tuple(p if p == forms.ELLIPSIS else parse_latex(p) for p in parts))
    return parse_latex(text)


def unit_of(text: str) -> str:
    """The unit trailing a gold or an answer (`forms.split_unit`), "" when none."""
    return forms.split_unit(forms.rewrite(text))[1]


def _is_number(expr: Any) -> bool:
    s = _math().sympy
    return (
        isinstance(expr, s.Expr)
        and not isinstance(expr, s.MatrixExpr)
        and bool(expr.is_number)
        # A percentage is n * UnevaluatedExpr(1/100): math-verify's own rules apply (9% = 9).
        and not expr.has(s.UnevaluatedExpr)
    )


def _to_fraction(expr: Any) -> Fraction | None:
    """Exact value of a rational expression (sums, products, integer powers), or None."""
    if expr.is_Rational:
        return Fraction(int(expr.p), int(expr.q))
    if expr.is_Add or expr.is_Mul:
        parts = [_to_fraction(a) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return sum(parts, Fraction(0)) if expr.is_Add else math.prod(parts, start=Fraction(1))
    if expr.is_Pow:
        base, exp = _to_fraction(expr.base), _to_fraction(expr.exp)
        if base is None or exp is None or exp.denominator != 1 or (base == 0 and exp < 0):
            return None
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if bits * abs(exp.numerator) > _MAX_EXACT_BITS:
            return None
        return base**exp.numerator
    return None


def _numbers_equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    fa, fb = _to_fraction(a), _to_fraction(b)
    if fa is not None and fb is not None:
        return fa == fb
    s = _math().sympy
    decimal = a.has(s.Float) or b.has(s.Float)
    va, vb = a.evalf(_EVAL_DIGITS), b.evalf(_EVAL_DIGITS)
    if not (va.is_finite and vb.is_finite):
        return bool(va == vb)
    tol = _REL_TOL_DECIMAL if decimal else _REL_TOL_EXACT
    return bool(abs(va - vb) <= tol * s.Max(abs(va), abs(vb)))


def _containers_equal(gold: Any, pred: Any) -> bool | None:
    """Strict comparison of tuples / sets / intervals of numbers; None when not such a pair."""
    s = _math().sympy
    kinds = (s.Tuple, s.FiniteSet, s.Interval)
    gk = next((k for k in kinds if isinstance(gold, k)), None)
    pk = next((k for k in kinds if isinstance(pred, k)), None)
    if gk is not None and pk is not None and s.FiniteSet in (gk, pk) and gk is not pk:
        return False  # a set is not an ordered pair or an interval, whatever its elements
    if isinstance(gold, s.Interval) and isinstance(pred, s.Interval):
        ends = (gold.start, gold.end, pred.start, pred.end)
        if not all(_is_number(e) for e in ends):
            return None
        same_kind = (gold.left_open, gold.right_open) == (pred.left_open, pred.right_open)
        return (
            same_kind
            and _numbers_equal(gold.start, pred.start)
            and _numbers_equal(gold.end, pred.end)
        )
    for kind in (s.Tuple, s.FiniteSet):
        if isinstance(gold, kind) and isinstance(pred, kind):
            g, p = list(gold.args), list(pred.args)
            if not all(_is_number(e) for e in g + p):
                return None
            if len(g) != len(p):
                return False
            if kind is s.Tuple:
                return all(_numbers_equal(x, y) for x, y in zip(g, p, strict=True))
            for x in g:  # sets: match each gold element to a distinct answer element
                match = next((i for i, y in enumerate(p) if _numbers_equal(x, y)), None)
                if match is None:
                    return False
                p.pop(match)
            return True
    return None


def _forms_equal(gold: Any, pred: Any) -> bool | None:
    """Comparison of clock times and elided sequences; None when neither side is one."""
    if isinstance(gold, forms.ClockTime) or isinstance(pred, forms.ClockTime):
        both = isinstance(gold, forms.ClockTime) and isinstance(pred, forms.ClockTime)
        return both and gold.same_time(pred)
    if isinstance(gold, forms.Elided) or isinstance(pred, forms.Elided):
        if not (isinstance(gold, forms.Elided) and isinstance(pred, forms.Elided)):
            return False
        if len(gold.items) != len(pred.items):
            return False
        for g, p in zip(gold.items, pred.items, strict=True):
            dots = (g == forms.ELLIPSIS, p == forms.ELLIPSIS)
            if dots[0] != dots[1] or (not dots[0] and not math_equal(g, p)):
                return False
        return True
    return None


def _percent_number(expr: Any) -> Any:
    """N of a percentage `N\\%` (parsed as N * UnevaluatedExpr(1/100)), or None."""
    s = _math().sympy
    if not (isinstance(expr, s.Mul) and expr.has(s.UnevaluatedExpr)):
        return None
    rest = [a for a in expr.args if not isinstance(a, s.UnevaluatedExpr)]
    if len(rest) != len(expr.args) - 1 or not all(_is_number(a) for a in rest):
        return None
    return s.Mul(*rest)


def _percents_equal(gold: Any, pred: Any) -> bool | None:
    """A percentage against a number: equal when the number is its N (`12.5` for `12.5\\%`) or
    its value N/100 (`0.125`); None when neither side is a percentage of a number beside a
    number (math-verify's own rules apply then)."""
    g, p = _percent_number(gold), _percent_number(pred)
    if (g is None) == (p is None):
        return None
    number, other = (g, pred) if g is not None else (p, gold)
    if not _is_number(other):
        return None
    return _numbers_equal(number, other) or _numbers_equal(number / 100, other)


def math_equal(gold: Any, pred: Any) -> bool:
    """Is the parsed answer `pred` equal to the parsed `gold`? (See the module docstring.)"""
    special = _forms_equal(gold, pred)
    if special is not None:
        return special
    m = _math()
    g, p = gold, pred
    # Same unwrapping as math-verify: answer `x = 3` for gold `3`, and gold `x = 3` for answer `3`.
    if m.grader.is_equation(p) and not m.grader.is_equation(g):
        p = m.grader.take_last_relation(p).rhs
    elif m.grader.is_assignment_relation(g) and not m.grader.is_equation(p):
        g = m.grader.take_last_relation(g).rhs
    if _is_number(g) and _is_number(p):
        return _numbers_equal(g, p)
    percent = _percents_equal(g, p)
    if percent is not None:
        return percent
    strict = _containers_equal(g, p)
    if strict is not None:
        return strict
    return bool(m.grader.verify(gold, pred, timeout_seconds=None, raise_on_error=True))


def joint_answer(gold: Any, parts: list[Any]) -> tuple[Any, Any] | None:
    """(gold, answer) to compare when several boxes answer together; None for a hedge."""
    s = _math().sympy
    if all(math_equal(parts[0], p) for p in parts[1:]):
        return gold, parts[0]  # the same value boxed again is one answer
    if isinstance(gold, s.Tuple):
        return gold, s.Tuple(*parts)
    if isinstance(gold, s.Interval) and gold.left_open and gold.right_open and len(parts) == 2:
        return s.Tuple(gold.start, gold.end), s.Tuple(*parts)  # gold "(1, 2)" read as a pair
    if isinstance(gold, s.FiniteSet):
        return gold, s.FiniteSet(*parts)
    return None


_ROUNDED_MIN_DIGITS = 3
"""A decimal gold with at least this many significant digits is taken as rounded: an exact answer
(a fraction, a surd) or a decimal answer with more digits that rounds to it is right; and a
decimal answer of at least this many digits (fewer than the gold's) is right when the gold rounds
to it."""


def _digits_of(answer: str, pred: Any) -> int:
    """Significant digits of a decimal answer: from its spelling when it is a plain decimal,
    otherwise from its value."""
    spelled = (
        forms.significant_digits(forms.split_unit(forms.rewrite(answer))[0]) if answer else None
    )
    if spelled is not None:
        return spelled
    mantissa = str(pred.evalf()).partition("e")[0]
    return len(mantissa.lstrip("-0.").replace(".", "").rstrip("0"))


def _within_half_unit(value: Any, other: Any, digits: int) -> bool:
    """Is `other` within half a unit of the `digits`-th significant digit of `value`?"""
    s = _math().sympy
    v, o = value.evalf(_EVAL_DIGITS), other.evalf(_EVAL_DIGITS)
    if v == 0 or not (v.is_finite and o.is_finite):
        return False
    exponent = math.floor(math.log10(abs(float(v))))
    half_unit = s.Rational(1, 2) * s.Integer(10) ** (exponent - digits + 1)
    return bool(abs(o - v) <= half_unit * (1 + s.Rational(1, 10**12)))


def rounds_to_gold(gold: str, gold_expr: Any, pred: Any, answer: str = "") -> bool:
    """Does `pred` round to a decimal gold at the gold's significant digits (a relative
    difference of at most half a unit in its last digit, 5 * 10^-digits), or, for a decimal
    answer with fewer digits (three or more), does the gold round to the answer? A decimal gold of
    one or two digits is read with one digit more (`0.02` as 0.020: `0.0199` is right, `0.024`
    is not). `answer` is the answer's spelling (its digits count; a trailing unit aside)."""
    digits = forms.significant_digits(forms.split_unit(forms.rewrite(gold))[0])
    if digits is None or not (_is_number(gold_expr) and _is_number(pred)):
        return False
    decimal = pred.has(_math().sympy.Float)
    if digits < _ROUNDED_MIN_DIGITS:
        # A short decimal gold (`0.02`) may be exact (`0.5` = 1/2): read with one digit more
        # (0.020), a decimal answer of three or more digits that rounds to that is right.
        more = decimal and _digits_of(answer, pred) >= max(_ROUNDED_MIN_DIGITS, digits + 1)
        return more and _within_half_unit(gold_expr, pred, digits + 1)
    if decimal:
        pred_digits = _digits_of(answer, pred)
        if pred_digits < digits:
            return pred_digits >= _ROUNDED_MIN_DIGITS and _within_half_unit(
                pred, gold_expr, pred_digits
            )
        if pred_digits == digits:
            return False
    return _within_half_unit(gold_expr, pred, digits)


def same_value(a: str, b: str) -> bool:
    """Do two pieces of LaTeX have the same value? False when either does not parse."""
    try:
        return math_equal(parse_answer(a), parse_answer(b))
    except Exception:
        return False


def differ(a: str, b: str) -> bool:
    """Do two pieces of LaTeX both parse, to different values?"""
    try:
        return not math_equal(parse_answer(a), parse_answer(b))
    except Exception:
        return False


def _terminates(value: Any) -> bool:
    """Is a number written exactly as a decimal (a decimal, or a fraction over 2^a 5^b)?"""
    if value.has(_math().sympy.Float):
        return True
    exact = _to_fraction(value)
    if exact is None:
        return False
    den = exact.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    return den == 1


def _approximates(text: str, value: Any, box: Any, marked: bool) -> bool:
    """Does a number written in the text round the box's value (a decimal of an exact box that
    has no finite decimal, `7.07` for `5\\sqrt{2}`; or any number marked as approximate), or,
    with three digits or more, cut it (`0.666` for 2/3)?"""
    if not (_is_number(value) and _is_number(box)):
        return False
    if not marked and ("." not in text or _terminates(box)):
        return False
    digits = forms.significant_digits(text)
    if digits is None:
        digits = len(text.strip().lstrip("-+").lstrip("0")) or 1
    return _within_half_unit(value, box, digits) or (
        digits >= _ROUNDED_MIN_DIGITS and _truncates(value, box, digits)
    )


def _truncates(value: Any, box: Any, digits: int) -> bool:
    """Is `value` the box's value cut after `digits` significant digits (`0.666` for 2/3,
    `3.1415` for pi): the same sign, and the box beyond it by less than one unit of its last
    digit?"""
    v, b = value.evalf(_EVAL_DIGITS), box.evalf(_EVAL_DIGITS)
    if v == 0 or not (v.is_finite and b.is_finite) or (v > 0) != (b > 0):
        return False
    unit = _math().sympy.Integer(10) ** (math.floor(math.log10(abs(float(v)))) - digits + 1)
    return bool(0 <= abs(b) - abs(v) < unit)


def same_as(boxes: tuple[str, ...], approximately: str) -> Any:
    """`same(text)` for the commitment rules: does a value written in the response equal one of
    the final boxes? By value when both parse, by spelling otherwise; a text starting with
    `approximately` (or a decimal of a box that has no exact decimal) only has to round to it.
    The boxes are parsed on the first value that needs them."""
    spelled = {"".join(b.split()) for b in boxes}

    @cache
    def parsed() -> list[Any]:
        out = []
        for box in boxes:
            with contextlib.suppress(Exception):
                out.append(parse_answer(box))
        return out

    @cache
    def same(text: str) -> bool:
        marked = text.startswith(approximately)
        text = text.removeprefix(approximately).replace("−", "-")
        if "".join(text.split()) in spelled:
            return True
        try:
            percent = text.rstrip().endswith("%")
            value = parse_answer(text.rstrip().rstrip("%").rstrip("\\") if percent else text)
            if percent:  # `16.7%` of a box 1/6
                value, text = value / 100, text.rstrip().rstrip("%").rstrip("\\")
            if any(math_equal(box, value) for box in parsed()):
                return True
            return any(_approximates(text, value, box, marked) for box in parsed())
        except Exception:
            return False

    return same
