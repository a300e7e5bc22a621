"""What a verifier learns from the problem's own text (pure functions, no math libraries).

- `restates_problem`: a box that only copies an expression of the problem computes nothing
  and is not an answer: `\\boxed{\\sum_{k=1}^{100} k}` for "Compute $\\sum_{k=1}^{100} k$",
  `\\frac{12}{18}` for "Simplify $\\frac{12}{18}$", `(x-3)(x+2)` for "Expand $(x+2)(x-3)$".
  Copied means: the box's spelling (spaces, `\\left`/`\\right`, `\\dfrac` aside) occurs in the
  problem, or its symbols are those of one of the problem's math expressions (or one side of
  an equation in it) in another order with the same value. A box that is a number in lowest
  terms (a price `\\$12.50`, a percentage `85\\%` too), a simplest surd (`3\\sqrt{2}`), a single
  symbol or an option letter (`\\text{(C)}`) is never a copy: picking an option the problem
  lists, or a value it states, is an answer. Its price: an option that is itself a longer
  expression (`\\frac{\\sqrt{3}}{2}` from "which is larger, $\\frac{\\sqrt{3}}{2}$ or $0.8$?") is
  not rewarded.
- `asks_to_evaluate`: the question asks to evaluate or simplify (then a box that leaves work
  undone is no answer: `graft.verify.math.unevaluated`); `asks_for`: an equation's left side is the
  quantity the question asks for (`a + b = 7` for "Find $a + b$"); `options`: the options of a
  multiple-choice question, by letter.
- `asked_form`: the form a question asks for (`as a repeating decimal`, `as a common fraction`),
  so that a right value in the other form is no answer (`graft.verify.math.unevaluated`).
- `asked_units`: the units a question asks for (`in meters`, `how many seconds`), so that a value
  given in another unit (`2 \\text{ cm}` when meters are asked and the gold is `2`) is wrong.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from math import gcd

from graft.verify.math.forms import UNITS, choice_letter, rewrite, split_unit

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


_MONEY = re.compile(r"\\?\$|\\?%|\\[,!;]|~|\{,\}|(?<=\d),(?=\d{3}(?!\d))")
_SIMPLE_SURD = re.compile(r"[-+]?(\d*)\\sqrt\{?(\d+)\}?|[-+]?\d*\\pi")


def _square_free(n: int) -> bool:
    return n > 1 and all(n % (k * k) for k in range(2, int(n**0.5) + 1))


def _literal(box: str) -> bool:
    """A number in lowest terms (a price `\\$12.50`, a percentage `85\\%`, `1,200` too), a
    simplest surd (`3\\sqrt{2}`), a single symbol or an option letter (`\\text{(C)}`): never a
    copy of the problem, whose values and options an answer may name."""
    if choice_letter(box, whole=True) is not None:
        return True
    value = _MONEY.sub("", split_unit(rewrite(box))[0]).replace(" ", "")
    if _NUMBER.fullmatch(value) or _SYMBOL.fullmatch(value):
        return True
    surd = _SIMPLE_SURD.fullmatch(value)
    if surd is not None:
        return surd.group(2) is None or _square_free(int(surd.group(2)))
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


_OPTION = re.compile(
    r"\\text(?:bf|rm)?\s*\{\s*\(([A-E])\)\s*\}|\\mathrm\s*\{\s*\(([A-E])\)\s*\}|\(([A-E])\)"
    r"|(?m:^[ \t]*\**([A-E])[.):]\**(?=\s))"
)
_OPTION_END = re.compile(r"\\q?quad|\$|\n|\\\\|\\\]|\\\)")
_OPTION_SPACING = re.compile(r"^(?:\s|~|\\[,;: !]|\\hspace\{[^{}]*\})+|(?:\s|~|\\[,;: !]|[,;.])+$")


def options(problem: str) -> dict[str, str]:
    """The options of a multiple-choice question, letter -> its text as written (`(A) 21 (B) 27`,
    `$\\textbf{(A) }10 \\qquad \\textbf{(B) }12$`, or one option a line as `A. 21`); empty when
    the problem lists no options (fewer than two, or not starting at A)."""
    marks = list(_OPTION.finditer(problem))
    found: dict[str, str] = {}
    for i, mark in enumerate(marks):
        letter = next(g for g in mark.groups() if g)
        end = marks[i + 1].start() if i + 1 < len(marks) else len(problem)
        text = problem[mark.end() : end]
        cut = _OPTION_END.search(text)
        text = _OPTION_SPACING.sub("", text[: cut.start()] if cut else text)
        if letter not in found and text:
            found[letter] = text
    if len(found) < 2 or "A" not in found:
        return {}
    return found


_EVALUATE = re.compile(
    r"\b(?:simplif\w*|evaluat\w*|comput\w*|calculat\w*|reduc\w*|lowest\s+terms|simplest"
    r"|value\s+of|express\w*|rationaliz\w*|berechne\w*|vereinfach\w*|calcul\w*|évalu\w*"
    r"|evalú\w*|simplifi\w*)|化简|化簡|简化|簡化|计算|計算|求值|约分|約分",
    re.IGNORECASE,
)


def asks_to_evaluate(problem: str) -> bool:
    """Does the question ask for a value worked out (`Simplify`, `Evaluate`, `Compute`, `in
    lowest terms`, `Express as a common fraction`), not merely for a quantity that is one?"""
    return _EVALUATE.search(problem) is not None


_ASKED_DECIMAL = re.compile(
    r"\b(?:as|in|to)\s+(?:an?\s+)?(?:repeating\s+|terminating\s+|exact\s+)?decimal\b"
    r"(?!\s+(?:place|digit))|\bdecimal\s+(?:form|expansion|notation)\b"
    r"|\bnearest\s+(?:tenth|hundredth|thousandth)",
    re.IGNORECASE,
)
_ASKED_FRACTION = re.compile(
    r"\b(?:as|in|to)\s+(?:an?\s+)?(?:common|simplified|reduced|proper|improper|irreducible)?"
    r"\s*fraction\b|\bcommon\s+fraction\b",
    re.IGNORECASE,
)


def asked_form(problem: str) -> str:
    """The form the question asks its answer in: "decimal" (`as a repeating decimal`, `to the
    nearest tenth`), "fraction" (`as a common fraction`), or "" (none, or both)."""
    decimal = _ASKED_DECIMAL.search(problem) is not None
    fraction = _ASKED_FRACTION.search(problem) is not None
    return "decimal" if decimal and not fraction else "fraction" if fraction and not decimal else ""


_ASK = re.compile(
    r"\b(?:find|compute|calculate|determine|evaluate|what\s+is|what's|value\s+of|how\s+much\s+is)"
    r"\b(?:\s+the\s+value\s+of\b)?",
    re.IGNORECASE,
)
_OBJECT_END = re.compile(
    r"[?.;,]\s|[?;]|\.$|\b(?:if|given|when|where|such|that|for|and|in|as)\b", re.IGNORECASE
)
_THE = re.compile(r"^\s*the\s+", re.IGNORECASE)
_LETTER = re.compile(r"[A-Za-z]|\\(?!(?:frac|dfrac|tfrac|sqrt|cdot|times|left|right)\b)[A-Za-z]+")


def _spelling(text: str) -> str:
    return _normal(text).replace("{", "").replace("}", "").replace("\\,", "")


def asks_for(expression: str, problem: str) -> bool:
    """Is `expression` (an equation's left side, `a + b`) what the question asks for: the object
    of "find", "compute", "what is", "the value of"...? It must name a symbol: `2 + 3` is no
    quantity the question asks for, whatever the question says."""
    if not _LETTER.search(_MATH_COMMANDS.sub("", expression)):
        return False
    wanted = _spelling(expression)
    tokens = Counter(_TOKEN.findall(wanted))
    for ask in _ASK.finditer(problem):
        rest = problem[ask.end() :].lstrip()
        cut = _OBJECT_END.search(rest.replace("$", " "), 1)
        asked = _spelling(_THE.sub("", rest[: cut.start()] if cut else rest))
        if asked and (asked == wanted or Counter(_TOKEN.findall(asked)) == tokens):
            return True
    return False


_MATH_COMMANDS = re.compile(r"\\(?:frac|dfrac|tfrac|sqrt|cdot|times|left|right|sin|cos|tan|log|ln)")
