"""The form a question asks its answer in, and whether a box keeps it (pure functions, no math
libraries).

A right value in another form than the one asked is no answer: the question asked for the form
too. `asked_forms` reads every form a question asks for; `broken_form` names the first one a box
breaks while its gold keeps it (a gold that breaks it itself is the data's choice, not the
answer's fault). Each form closes one family of the asked form:

- "decimal" (`as a decimal`, `as a repeating decimal`, `in decimal form`): a fraction or a
  percentage is another form (`\\frac{1}{3}`, `25\\%`);
- "fraction" (`as a common fraction`): a decimal is another form (`0.5`);
- "percent" (`what percent`, `as a percentage`): a number that is not the gold's percentage
  number (`0.25` for 25%) is another form;
- "mixed" (`as a mixed number`): an improper fraction or a decimal is another form (`\\frac{7}{2}`
  for `3\\frac{1}{2}`);
- "scientific" (`in scientific notation`): a number without its power of ten (`12000`);
- "places:N" (`to the nearest hundredth`, `to the nearest cent`, `to two decimal places`,
  `to the nearest whole number`): anything but a plain decimal with at most N decimals (more
  digits `3.14159`, a surd `\\sqrt{2}`, a fraction);
- "figures:N" (`to three significant figures`): a plain number with more significant digits.

A big operator the gold keeps (`\\sum`, `\\prod`, `\\int`, a limit: sigma notation, "set up but
do not evaluate") asks for the setup whatever the question's words; `graft.verify.math.grader`
refuses a box that evaluates it away (`unevaluated.leftover_work`).
"""

from __future__ import annotations

import re

from graft.verify.math.forms import NUMBER_WORDS
from graft.verify.math.unevaluated import FRACTION

_COUNT = r"(\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten)"
_PLACE_NAMES = {
    "tenth": 1, "hundredth": 2, "thousandth": 3, "ten-thousandth": 4, "ten thousandth": 4,
    "whole number": 0, "integer": 0, "whole": 0, "unit": 0, "dollar": 0, "cent": 2,
    "degree": 0, "percent": 0, "one": 0,
}  # fmt: skip
_NEAREST = re.compile(
    r"\bnearest\s+(ten[- ]thousandth|tenth|hundredth|thousandth|whole\s+number|integer|whole"
    r"|unit|dollar|cent|degree|percent|one)s?\b",
    re.IGNORECASE,
)
_PLACES = re.compile(
    rf"\b{_COUNT}\s+(?:decimal\s+places?|places?\s+after\s+the\s+decimal|decimal\s+digits?"
    r"|digits?\s+after\s+the\s+decimal(?:\s+point)?)\b",
    re.IGNORECASE,
)
_FIGURES = re.compile(rf"\b{_COUNT}\s+significant\s+(?:figures?|digits?)\b", re.IGNORECASE)
_DECIMAL = re.compile(
    r"\b(?:as|in|to)\s+(?:an?\s+)?(?:repeating\s+|terminating\s+|exact\s+)?decimal\b"
    r"(?!\s+(?:place|digit))|\bdecimal\s+(?:form|expansion|notation)\b",
    re.IGNORECASE,
)
_FRACTION = re.compile(
    r"\b(?:as|in|to)\s+(?:an?\s+)?(?:common|simplified|reduced|proper|improper|irreducible)?"
    r"\s*fraction\b|\bcommon\s+fraction\b",
    re.IGNORECASE,
)
_PERCENT = re.compile(
    r"\bwhat\s+(?:percent|percentage)\b|\b(?:as|in|to)\s+(?:an?\s+)?(?:percent|percentage)\b"
    r"|\bpercent(?:age)?\s+form\b",
    re.IGNORECASE,
)
_MIXED = re.compile(r"\bmixed\s+(?:number|numeral|fraction)s?\b", re.IGNORECASE)
_SCIENTIFIC = re.compile(r"\bscientific\s+notation\b|\bstandard\s+index\s+form\b", re.IGNORECASE)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBER_WORDS[word.lower()]


def asked_forms(problem: str) -> tuple[str, ...]:
    """Every form the question asks its answer in (module docstring), in a fixed order; "decimal"
    and "fraction" both asked (`write the fraction as a decimal`) ask for neither."""
    found = []
    decimal, fraction = _DECIMAL.search(problem), _FRACTION.search(problem)
    if decimal and not fraction:
        found.append("decimal")
    if fraction and not decimal:
        found.append("fraction")
    if _PERCENT.search(problem):
        found.append("percent")
    if _MIXED.search(problem):
        found.append("mixed")
    if _SCIENTIFIC.search(problem):
        found.append("scientific")
    places = [
        _PLACE_NAMES[" ".join(m.group(1).lower().split())] for m in _NEAREST.finditer(problem)
    ]
    places += [_count(m.group(1)) for m in _PLACES.finditer(problem)]
    if places:
        found.append(f"places:{max(places)}")
    figures = [_count(m.group(1)) for m in _FIGURES.finditer(problem)]
    if figures:
        found.append(f"figures:{max(figures)}")
    return tuple(found)


_MARKUP = re.compile(
    r"\\[$%]|[$%]|\\[,;:! ]|~|\{,\}|\\(?:text|mathrm|textbf)\s*\{[^{}]*\}|\\left|\\right"
    r"|\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\s+"
)
_PLAIN_DECIMAL = re.compile(r"[-+]?(\d+)(?:\.(\d*))?|[-+]?\.(\d+)")
_FRACTION_SPELLING = re.compile(r"\\[dt]?frac|(?<![\d.])\d+\s*/\s*\d+")
_DECIMAL_SPELLING = re.compile(r"\d?\.\d|\\overline")
_PERCENT_SPELLING = re.compile(r"%|\\%|\bpercent")
_MIXED_NUMBER = re.compile(
    r"[-+]?\d+\s*(?:\\[dt]?frac\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}|\\[dt]?frac\s*\d\s*\d"
    r"|\s\d+\s*/\s*\d+)"
)
_POWER_OF_TEN = re.compile(r"(?:\\times|\\cdot|×|\*)\s*10\s*\^|^\(?[-+]?10\s*\^|\d[eE][-+]?\d")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _plain_number(text: str) -> tuple[str, str] | None:
    """(integer digits, decimal digits) of a plain decimal number (a price `\\$12.35`, a
    percentage, a unit aside), or None for anything else."""
    bare = _THOUSANDS.sub("", _MARKUP.sub("", text))
    match = _PLAIN_DECIMAL.fullmatch(bare)
    if match is None:
        return None
    if match.group(3) is not None:
        return "0", match.group(3)
    return match.group(1), match.group(2) or ""


def _significant(whole: str, decimals: str) -> int:
    if decimals:
        return len((whole + decimals).lstrip("0")) or 1
    return len(whole.lstrip("0").rstrip("0")) or 1


def _number_part(text: str) -> str:
    return _THOUSANDS.sub("", _MARKUP.sub("", _PERCENT_SPELLING.sub("", text)))


def breaks(text: str, form: str) -> bool:
    """Is `text` (a box, or its gold) written in another form than `form` (module docstring)?"""
    kind, _, count = form.partition(":")
    if kind == "decimal":
        return bool(_FRACTION_SPELLING.search(text) or _PERCENT_SPELLING.search(text))
    if kind == "fraction":
        return _DECIMAL_SPELLING.search(text) is not None
    if kind == "mixed":
        if _MIXED_NUMBER.fullmatch(_MARKUP.sub(" ", text).strip()):
            return False
        whole = _plain_number(text)
        if whole is not None:
            return bool(whole[1])  # 3 is a mixed number's whole part alone; 3.5 is a decimal
        improper = FRACTION.fullmatch(_MARKUP.sub("", text).lstrip("+-"))
        if improper is None:
            return False
        num, den = (int(g) for g in improper.groups() if g is not None)
        return num >= den
    if kind == "scientific":
        return _POWER_OF_TEN.search(text.strip()) is None
    if kind in ("places", "figures"):
        number = _plain_number(text)
        if number is None:
            return True
        limit = int(count)
        return len(number[1]) > limit if kind == "places" else _significant(*number) > limit
    return False


def broken_form(box: str, gold: str, problem: str) -> str:
    """The first form the question asks for that the box breaks and its gold keeps, or "".
    "percent" is broken by a box without a percent sign whose number is not the gold's
    (`0.25` for a gold `25\\%` or `25`)."""
    for form in asked_forms(problem):
        if form == "percent":
            if not _PERCENT_SPELLING.search(box) and _number_part(box) != _number_part(gold):
                return form
        elif breaks(box, form) and not breaks(gold, form):
            return form
    return ""
