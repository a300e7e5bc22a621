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
- `exact_question`: the question's answer is exact (it names only whole numbers and fractions,
  nothing measured, irrational or approximate), so a decimal answer owes no rounding: `0.499` is
  not `0.5` for the probability of heads.
- `asked_units`: the units a question asks for (`in meters`, `how many seconds`), so that a value
  given in another unit (`2 \\text{ cm}` when meters are asked and the gold is `2`) is wrong.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from math import gcd

from graft.verify.math.forms import (
    NUMBER_WORDS,
    TENS_WORDS,
    UNITS,
    choice_letter,
    rewrite,
    split_unit,
)

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


_ONES = [w for w, n in NUMBER_WORDS.items() if n < 20]
_NUMBER_WORD = {w: n for w, n in NUMBER_WORDS.items() if n < 100}
_ORDINAL_WORD = {
    "second": 2, "square": 2, "third": 3, "cube": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
}  # fmt: skip
_SPELLED_NUMBER = re.compile(
    rf"\b(?:({'|'.join(TENS_WORDS)})(?:[- ]({'|'.join(_ONES[1:10])}))?"
    rf"|({'|'.join(_ONES)}))\b",
    re.IGNORECASE,
)
_N = r"(\d+)"
_ORDINAL = rf"(?:{_N}(?:st|nd|rd|th)?|({'|'.join(_ORDINAL_WORD)}))"
_SPOKEN_OPERATIONS = (
    (re.compile(rf"{_N}\s+(?:raised\s+)?to\s+the\s+(?:power\s+of\s+)?{_ORDINAL}(?:\s+power)?",
                re.I), "{0}^{{{1}}}"),
    (re.compile(rf"{_N}\s+squared\b", re.I), "{0}^{{2}}"),
    (re.compile(rf"{_N}\s+cubed\b", re.I), "{0}^{{3}}"),
    (re.compile(rf"(?:the\s+)?square\s+root\s+of\s+{_N}", re.I), "\\sqrt{{{0}}}"),
    (re.compile(rf"(?:the\s+)?cube\s+root\s+of\s+{_N}", re.I), "\\sqrt[3]{{{0}}}"),
    (re.compile(rf"{_N}\s+factorial\b", re.I), "{0}!"),
    (re.compile(rf"{_N}\s+choose\s+{_N}", re.I), "\\binom{{{0}}}{{{1}}}"),
    (re.compile(rf"{_N}\s+(?:times|multiplied\s+by)\s+{_N}", re.I), "{0} \\times {1}"),
    (re.compile(rf"{_N}\s+plus\s+{_N}", re.I), "{0} + {1}"),
    (re.compile(rf"{_N}\s+minus\s+{_N}", re.I), "{0} - {1}"),
    (re.compile(rf"{_N}\s+(?:divided\s+by|over)\s+{_N}", re.I), "\\frac{{{0}}}{{{1}}}"),
    (re.compile(rf"(?:the\s+)?log(?:arithm)?\s+base\s+{_N}\s+of\s+{_N}", re.I),
     "\\log_{{{0}}} {1}"),
)  # fmt: skip


def _ordinal_value(match: re.Match[str], group: int) -> str:
    word = match.group(group + 1)
    return match.group(group) if word is None else str(_ORDINAL_WORD[word.lower()])


def in_symbols(problem: str) -> str:
    """The problem with the computations it spells in words written as math too (`three to the
    fifth power` -> `$3^{5}$`, `9 times 8` -> `$9 \\times 8$`, `the square root of 50`), so
    that a box holding the question's own expression in another spelling is a copy of it."""

    def number(m: re.Match[str]) -> str:
        if m.group(3):
            return str(_NUMBER_WORD[m.group(3).lower()])
        return str(
            _NUMBER_WORD[m.group(1).lower()] + _NUMBER_WORD.get((m.group(2) or "zero").lower(), 0)
        )

    text = _SPELLED_NUMBER.sub(number, problem)
    found = []
    for pattern, template in _SPOKEN_OPERATIONS:
        for m in pattern.finditer(text):
            args = [g for g in m.groups() if g is not None]
            if pattern is _SPOKEN_OPERATIONS[0][0]:
                args = [m.group(1), _ordinal_value(m, 2)]
            found.append("$" + template.format(*args) + "$")
    return problem if not found else problem + " " + " ".join(found)


def restates_problem(
    box: str, problem: str, same_value: Callable[[str, str], bool] | None = None
) -> bool:
    """Does the box only copy an expression of the problem (module docstring)? A reordering of
    an expression's symbols is a copy only when `same_value(box, expression)` says it has the
    expression's value (`(x-3)(x+2)` for `(x+2)(x-3)`, but not `(4, 3)` for `(3, 4)`); without
    `same_value`, only the spelling counts."""
    if not problem.strip() or _literal(box):
        return False
    problem = in_symbols(problem)
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
    r"([A-Za-z]+(?:/[A-Za-z]+)?)"
    r"(?P<end>(?=\s*(?:[?.,;:!)]|$)|\s+(?:is|are|was|were|does|do|did|will|would|can|could"
    r"|should|has|have|had|of|per|at|for|on|to|in|there|remain\w*|left)\b))?",
    re.IGNORECASE,
)
_NOT_ASKED_WORDS = """total all general fact addition particular order terms form words simplest
    lowest this that which it them each there here one sum common fraction decimal percent
    notation"""
_NOT_ASKED = frozenset(_NOT_ASKED_WORDS.split())


def asked_units(problem: str) -> list[str]:
    """The units a question asks its answer in, in order: a unit word (`in meters`, `how many
    seconds`), or any word the question counts or measures in that ends its phrase (`how many
    kWh does`, `how many erg is`, `in kWh.`, `how many apples are`), the list of units aside."""
    found = []
    for m in _ASKED.finditer(problem):
        word = m.group(1)
        if len(word) < 2:
            continue
        if word in UNITS or (m.group("end") is not None and word.lower() not in _NOT_ASKED):
            found.append(word)
    return found


_OPTION = re.compile(
    r"\\text(?:bf|rm)?\s*\{\s*\(([A-E])\)\s*\}|\\mathrm\s*\{\s*\(([A-E])\)\s*\}|\(([A-E])\)"
    r"|(?m:^[ \t]*\**([A-E])[.):]\**(?=\s))"
)
_OPTION_END = re.compile(r"\\q?quad|\$|\n|\\\\|\\\]|\\\)")
_OPTION_SPACING = re.compile(r"^(?:\s|~|\\[,;: !]|\\hspace\{[^{}]*\})+|(?:\s|~|\\[,;: !]|[,;.])+$")
_OPTION_MATH = re.compile(r"^\s*(?:\$|\\\()")


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
        opened = _OPTION_MATH.match(text)  # `(B) $\\frac{\\sqrt{3}}{2}$`: the option's own math
        text = text[opened.end() :] if opened else text
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


_INEXACT = re.compile(
    r"\d\.\d|\d[eE][-+]?\d|\\pi|π|\bpi\b|\\sqrt|√|\broots?\b|\\(?:sin|cos|tan|sec|csc|cot|log|ln|exp)\b"
    r"|\b(?:sin|cos|tan|log|ln|exp)\b|\be\^|\\approx|≈|\b(?:approximat\w*|estimat\w*|round\w*|nearest"
    r"|decimal|significant|about|roughly|circles?|circular|spheres?|spherical|radius|radii|diameter"
    r"|circumference|cylinders?|cones?|arcs?|sectors?|hypotenuse|diagonal|angles?|degrees?|radians?"
    r"|interest|compound\w*|growth|decay|half-life|logarithm\w*|irrational|speed|velocity"
    r"|acceleration|measure\w*|physics|gravity)\b",
    re.IGNORECASE,
)


def exact_question(problem: str) -> bool:
    """Is the question's answer exact: a question (not empty) that names only whole numbers and
    fractions, and nothing measured (a decimal), irrational (`\\pi`, a root, a circle, an angle,
    a logarithm) or approximate (`about`, `round`, `nearest`)? A probability, a count, a mean of
    given integers. A decimal answer to it owes no rounding: it is right only at the exact
    value."""
    return bool(problem.strip()) and _INEXACT.search(problem) is None
