"""Answer forms that the LaTeX parser misreads, handled before it (pure functions, no sympy).

Each rewrite keeps the value and only changes the spelling (tests/test_answer_forms.py):
- e-notation is a number: `4.5e33` -> `(4.5 \\times 10^{33})`, never 4.5 * e * 33;
- Python-style numbers and NumPy calls (as in Minerva's golds): `-1./3` -> `-1/3`,
  `np.arcsin(10/13)` -> `\\arcsin(10/13)`, `np.pi` -> `\\pi`;
- a trailing period is punctuation: `5.` -> `5`;
- `\\mathrm{e}` / `\\mathrm{i}` are Euler's number and the imaginary unit, like plain `e` / `i`;
- `E_{1}` is a subscripted symbol (the parser reads a bare `E` as Euler's number and fails).

- an answer wrapped in `$...$` is its content (gold `$12:00$`);
- `1\\,000` and `1{,}000` are one thousand (a thin space or braced comma between digit groups);
- `\\varnothing` is `\\emptyset`; `2√3` is `2\\sqrt{3}`; `90°` is 90 degrees (`90^\\circ`);
- a repeating decimal `0.\\overline{3}` is the fraction it equals (1/3);
- an AMC choice written with its value, `\\textbf{(C)}~27`, `\\text{(B) } 12`, `B: 12` or after it,
  `27 \\text{ (C)}`, is the value (`choice_letter` reads its letter, for a gold that is the letter);
- digits written in Unicode are digits: superscripts are powers (`10³` -> `10^{3}`), subscripts
  subscripts (`x₁` -> `x_{1}`), full-width and mathematical styles are ASCII (`１２`, bold `𝟏𝟐`,
  double-struck `𝟙𝟚` -> `12`), digits of other scripts are ASCII digits (`١٢`, `१२`), `½` is a
  fraction and `−` is a minus sign;
- `\\gamma` is a symbol (the parser reads `\\gamma^{2}-1` as the gamma function of -1);
- a number or `)` before a parenthesized number is a product: `2\\left(3\\right)`, `(2)(3)`,
  `2(\\frac{1}{2})` (the parser reads them as mixed numbers, 2 + 3); `\\frac\\pi4` is
  `\\frac{\\pi}{4}`;
- text markup the parser does not read (`\\operatorname {red}`, `\\text {\\emph {red}}`, a
  trailing `\\\\`) is respelled `\\text{red}` (`respell_text`), only when the text does not parse
  as written.

Units are split off by `split_unit` before parsing (the parser's own unit stripping is off):
only words that are units (`UNITS`) inside `\\text{}` / `\\mathrm{}` (or bare, for words of two
letters or more), and degrees; never a letter of the expression (`\\frac{1}{m} t` keeps its t).
Units joined by `/` or `\\cdot` are one (`\\mathrm {~km} / \\mathrm{s}` is km/s), and a short token
in `\\text{}` right after a plain number is a unit the list lacks (`2.78 \\times 10^{-6}\\
\\text{kWh}`, `4.5 \\text{ erg}`), never a word of a sentence (`or`, `not`, `maybe`).
`unit_letter` reads a one-letter unit written against a number (`0.02m`), for a numeric gold.

Two forms are not LaTeX expressions at all and are read here into their own values:
- clock times `12:00`, `9:05:30`, `3:15 p.m.` (`ClockTime`), which the parser reads as 12/0;
- sequences with an ellipsis `1, 2, 4, \\ldots` (`Elided`), compared element by element with the
  ellipsis in the same place.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

_E_NOTATION = re.compile(r"(?<![\w\\.])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
# "1." as a number (Python style, or a period ending the answer); not "0.\\overline{3}".
_BARE_POINT = re.compile(r"(\d)\.(?=$|[\s/)\],;}*+=-])")
_NUMPY_CALL = re.compile(r"\bnp\.(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|exp|log|sqrt)\(")
_MATHRM_CONSTANT = re.compile(r"\\(?:mathrm|operatorname|rm)\s*\{\s*([ei])\s*\}")
_SUBSCRIPTED_E = re.compile(r"(?<![A-Za-z\\{])E(?=_)")
_CLOCK = re.compile(
    r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(?:\\[,; ]|~)?\s*(?:\\text\{\s*)?"
    r"(?:([aApP])\.?\s*[mM]\.?)?\s*\}?"
)
_ELLIPSIS = ("\\ldots", "\\dots", "\\cdots", "...", "\\dotsc", "\\dotsb")
_SET_BRACES = (("\\{", "\\}"), ("\\left\\{", "\\right\\}"))


@dataclass(frozen=True)
class ClockTime:
    """A time of day as written: hour, minute, second and "am" / "pm" / "" (none given)."""

    hour: int
    minute: int
    second: int = 0
    half: str = ""

    def same_time(self, other: ClockTime) -> bool:
        """Equal times; a 12-hour time matches a 24-hour one (3:15 p.m. = 15:15), and a time
        without am/pm matches either half unless its hour shows it is a 24-hour time."""
        if (self.minute, self.second) != (other.minute, other.second):
            return False
        if self.half and other.half:
            return (self.hour % 12, self.half) == (other.hour % 12, other.half)
        if not self.half and not other.half:
            return self.hour == other.hour
        timed, plain = (self, other) if self.half else (other, self)
        if plain.hour > 12 or plain.hour == 0:  # written as a 24-hour time
            return timed.hour % 12 + (12 if timed.half == "pm" else 0) == plain.hour % 24
        return timed.hour % 12 == plain.hour % 12


ELLIPSIS = "..."
"""The element standing for the dots of an `Elided` sequence."""


@dataclass(frozen=True)
class Elided:
    """A sequence written with an ellipsis: parsed elements, `ELLIPSIS` where the dots stand."""

    items: tuple[Any, ...]


_DOLLARS = re.compile(r"^\$+(.*?)\$+$", re.DOTALL)
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:(?:\\,|\{,\})\d{3})+)(?![\d])")
_SQRT_SIGN = re.compile(r"√\s*(\{[^{}]*\}|\d+(?:\.\d+)?|[A-Za-z])")
_DEGREE = re.compile(r"\s*(?:°|\^\s*\{?\s*\\circ\s*\}?|\\degree)\s*$")
_OVERLINE = re.compile(r"^(-?)(\d*)\.(\d*)\\overline\{(\d+)\}$")
_AMC_CHOICE = re.compile(
    r"^(?:\\textbf\{\s*\(?[A-E]\)?\s*\}|\\text\{\s*\(?[A-E]\)\s*\}|\([A-E]\)"
    r"|[A-E](?:\s*[:)]|\.(?=\s)))\s*(?:~|\\[,;: ]|\\quad)*\s*(.+)$"
)
# The same choice written after its value: `32 \\text{ (C)}`, `32 \\; \\textbf{(C)}`, `32 (C)`.
# A number or `)` right before a parenthesized number is a product (`2\\left(3\\right)`,
# `(2)(3)`, `2(\\frac{1}{2})`); the parser reads it as a mixed number (2 + 3).
_JUXTAPOSED = re.compile(
    r"(?<=[\d)])\s*((?:\\left\s*)?\(\s*-?(?:\d+(?:\.\d+)?|\\[dt]?frac\s*\{\s*\d+\s*\}\s*"
    r"\{\s*\d+\s*\})\s*(?:\\right\s*)?\))"
)
# `\\frac\\pi4`: a fraction whose arguments are single tokens, one of them a command.
_SYMBOL_COMMAND = r"\\[A-Za-z]+(?![A-Za-z])(?!\s*[{\[_^])"
_BARE_FRACTION = re.compile(
    rf"\\([dt]?frac)\s*(?:({_SYMBOL_COMMAND})\s*([A-Za-z0-9]|{_SYMBOL_COMMAND})"
    rf"|([A-Za-z0-9])\s*({_SYMBOL_COMMAND}))"
)
_TRAILING_CHOICE = re.compile(
    r"^(.*?[\d}).])\s*(?:,|~|\\[,;: ]|\\quad)*\s*"
    r"(?:\\text(?:bf)?\s*\{\s*\(([A-E])\)\s*\}|\(([A-E])\))\s*$",
    re.DOTALL,
)


def repeating_decimal(text: str) -> str | None:
    """`0.\\overline{3}` -> `\\frac{1}{3}`, `1.2\\overline{45}` -> its fraction; None otherwise."""
    match = _OVERLINE.match(text.strip())
    if match is None:
        return None
    sign, whole, fixed, repeat = match.groups()
    den = 10 ** len(fixed) * (10 ** len(repeat) - 1)
    num = int(fixed + repeat) - int(fixed or "0")
    num += int(whole or "0") * den
    return f"{sign}\\frac{{{num}}}{{{den}}}"


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁽⁾", "0123456789+-()")
_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁽⁾]+")
_SUBSCRIPTS = str.maketrans("₀₁₂₃₄₅₆₇₈₉₊₋₍₎", "0123456789+-()")
_SUBSCRIPT_RUN = re.compile("[₀₁₂₃₄₅₆₇₈₉₊₋₍₎]+")
# Full-width forms, mathematical alphanumerics (bold 𝟏𝟐, double-struck, monospace, italic 𝑥)
# and enclosed digits (①): compatibility forms of ASCII characters.
_COMPATIBLE = re.compile("[\uff01-\uff5e\U0001d400-\U0001d7ff\u2460-\u24ff]+")
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")  # a decimal digit of another script (١٢, १२)
_VULGAR = re.compile("[\u00bc-\u00be\u2150-\u215e]")
_GAMMA = re.compile(r"\\gamma(?![A-Za-z])(?!\s*(?:\(|\\left\())")


def _vulgar_fraction(char: str) -> str:
    num, _, den = unicodedata.normalize("NFKC", char).partition("\u2044")
    return f"\\frac{{{num}}}{{{den}}}" if num.isdigit() and den.isdigit() else char


def unicode_digits(text: str) -> str:
    """Superscript runs as powers, subscript runs as subscripts, full-width, mathematical
    (bold, double-struck...) and enclosed characters as ASCII, digits of other scripts as ASCII
    digits (and the Arabic decimal separator), `½` as a fraction, `−` as `-`."""
    text = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    text = _SUBSCRIPT_RUN.sub(lambda m: "_{" + m.group(0).translate(_SUBSCRIPTS) + "}", text)
    text = _COMPATIBLE.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)
    text = _OTHER_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group(0))), text)
    text = _VULGAR.sub(lambda m: _vulgar_fraction(m.group(0)), text)
    return text.replace("−", "-").replace("٫", ".").replace("٬", "")


def rewrite(text: str) -> str:
    """The same answer, spelled so that the LaTeX parser reads its value (module docstring)."""
    text = unicode_digits(text.strip())
    dollars = _DOLLARS.match(text)
    if dollars is not None and dollars.group(1).strip():
        text = dollars.group(1).strip()
    text = choice_value(text) or text
    text = _THOUSANDS.sub(lambda m: m.group(1) + re.sub(r"\\,|\{,\}", "", m.group(2)), text)
    text = text.replace("\\varnothing", "\\emptyset")
    text = _SQRT_SIGN.sub(lambda m: f"\\sqrt{{{m.group(1).strip('{}')}}}", text)
    text = _DEGREE.sub("", text)
    fraction = repeating_decimal(text)
    if fraction is not None:
        text = fraction
    text = _E_NOTATION.sub(lambda m: f"({m.group(1)} \\times 10^{{{int(m.group(2))}}})", text)
    text = _NUMPY_CALL.sub(lambda m: f"\\{m.group(1)}(", text)
    text = re.sub(r"\bnp\.pi\b", r"\\pi", text)
    text = _BARE_POINT.sub(r"\1", text)
    text = _MATHRM_CONSTANT.sub(r"\1", text)
    text = _SUBSCRIPTED_E.sub(r"\\mathrm{E}", text)
    text = _GAMMA.sub(r"{\\gamma}", text)
    text = _JUXTAPOSED.sub(r" \\cdot \1", text)
    text = _BARE_FRACTION.sub(_braced_fraction, text)
    while text.endswith(".") and not text.endswith(("...", "\\.")):
        text = text[:-1].rstrip()
    return text


def _braced_fraction(match: re.Match[str]) -> str:
    command = match.group(1)
    num, den = match.group(2) or match.group(4), match.group(3) or match.group(5)
    return f"\\{command}{{{num}}}{{{den}}}"


_TEXT_COMMAND = re.compile(
    r"\\(?:emph|textsf|texttt|textup|textnormal|textit|textbf|textrm|hbox|mbox|operatorname"
    r"|mathrm|mathsf|mathbf|mathit|rm|text)\s*\{"
)
_RM_GROUP = re.compile(r"\{\s*\\rm\s+([^{}]*)\}")
_NESTED_TEXT = re.compile(r"\\text\{\s*\\text\{([^{}]*)\}\s*\}")
_TRAILING_BREAK = re.compile(r"(?:\s|\\\\|\\text\{\s*\.?\s*\})+$")


def respell_text(text: str) -> str:
    """Text markup spelled the one way the parser reads (`\\operatorname {red}`, `\\emph{red}`,
    `{\\rm red}`, `\\text{\\textbf{red}}` -> `\\text{red}`; a trailing `\\\\` or `\\text{.}`
    dropped). Tried only on a gold or an answer that does not parse as written."""
    text = _RM_GROUP.sub(r"\\text{\1}", _TEXT_COMMAND.sub(r"\\text{", text))
    while _NESTED_TEXT.search(text):
        text = _NESTED_TEXT.sub(r"\\text{\1}", text)
    return _TRAILING_BREAK.sub("", text)


def clock_time(text: str) -> ClockTime | None:
    """The time of day that `text` is, whole (`12:00`, `3:15 p.m.`, `\\text{9:05 am}`), or None."""
    inner = text.strip()
    if inner.startswith("\\text{") and inner.endswith("}"):
        inner = inner[len("\\text{") : -1]
    match = _CLOCK.fullmatch(inner.strip())
    if match is None:
        return None
    hour, minute = int(match.group(1)), int(match.group(2))
    second = int(match.group(3) or 0)
    half = (match.group(4) or "").lower()
    if minute > 59 or second > 59 or hour > 24 or (half and not 1 <= hour <= 12):
        return None
    return ClockTime(hour, minute, second, f"{half}m" if half else "")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets and braces (`(1, 2), 3` -> ["(1, 2)", "3"])."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            depth += 1 if text[i + 1] == "{" else -1
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def elided_parts(text: str) -> list[str] | None:
    """The elements of a comma-separated sequence holding an ellipsis as one of its elements,
    with `ELLIPSIS` for the dots (set braces around it are dropped); None for anything else."""
    inner = text.strip()
    for left, right in _SET_BRACES:
        if inner.startswith(left) and inner.endswith(right):
            inner = inner[len(left) : -len(right)]
            break
    parts = split_top_level(inner)
    if len(parts) < 2:
        return None
    marked = [ELLIPSIS if p in _ELLIPSIS else p for p in parts]
    return marked if ELLIPSIS in marked else None


_UNIT_WORDS = """
    m cm mm km nm um μm kg g mg s sec secs second seconds ms min mins minute minutes h hr hrs
    hour hours day days week weeks month months year years yr yrs l L ml mL liter liters litre
    litres in inch inches ft foot feet yd yard yards mi mile miles mph kph km/h m/s cm/s m/s^2
    N J kJ W kW MW V mV A mA Pa kPa MPa atm bar K C F Hz kHz MHz GHz eV keV MeV GeV mol Ohm ohm
    ohms T G rad radian radians deg degree degrees dollar dollars cent cents unit units
    square cubic sq cu meter meters metre metres centimeter centimeters millimeter millimeters
    kilometer kilometers gram grams kilogram kilograms pound pounds lb lbs oz ounce ounces
    gallon gallons quart quarts pint pints cup cups ton tons tonne tonnes calorie calories cal kcal
    """
UNITS = frozenset(_UNIT_WORDS.split())
"""Words read as units when they trail an answer (in `\\text{}` / `\\mathrm{}`, or bare when
two letters or more). Single letters count only inside `\\text{}` / `\\mathrm{}`."""

_TEXT_GROUP = re.compile(
    r"\\(?:text|mathrm|textrm|textnormal|mbox|rm)\s*\{([^{}]*)\}(\s*\^\s*\{?-?\d\}?)?\s*$"
)
_UNIT_JOINER = re.compile(r"\s*(/|\\cdot)\s*$")
_PLAIN_NUMBER = re.compile(
    r"\(?\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:\s*\\(?:times|cdot)\s*10\^\s*\{?\s*[-+]?\d+\s*\}?)?\s*\)?"
)
_UNIT_SHAPED = re.compile(r"[A-Za-zµμΩÅ]{2,4}(?:[/.·][A-Za-zµμΩÅ]{1,4})*")
_NOT_UNIT_WORDS = """or and to is are be if so then thus only each both all ok okay true sure yes
    no not nope maybe may might could can about less more than per one two ten"""
_NOT_UNITS = frozenset(_NOT_UNIT_WORDS.split())
"""Short words that are never a unit, whatever follows a number in `\\text{}`."""
_BARE_WORD = re.compile(
    r"(?<=[\d}\s])\s*([A-Za-z]{2,}(?:/[A-Za-z]+)?|[A-Za-z]/[A-Za-z]+)(\s*\^\s*\{?\d\}?)?\s*$"
)
_TRAILING_SPACE = re.compile(r"(?:\\[,;: !]|~|\\quad|\s)+$")


def _is_unit(words: str) -> bool:
    parts = re.sub(r"\\[,;: ]|~", " ", words).split()
    return bool(parts) and all(w.strip(".") in UNITS for w in parts)


def _unit_shaped(words: str, before: str) -> bool:
    """A short token in `\\text{}` right after a plain number (`2.78 \\times 10^{-6}\\
    \\text{kWh}`, `4.5 \\text{ erg}`): a unit the list lacks, never a word of a sentence."""
    token = re.sub(r"\\[,;: ]|~", " ", words).strip()
    return (
        _UNIT_SHAPED.fullmatch(token) is not None
        and token.lower() not in _NOT_UNITS
        and _PLAIN_NUMBER.fullmatch(_TRAILING_SPACE.sub("", before).strip()) is not None
    )


def split_unit(text: str) -> tuple[str, str]:
    """(the value, its unit) of an answer with a trailing unit (`5 \\text{ cm}^2` -> ("5",
    "cm^2")); ("text", "") when nothing trails it that is a unit. Units joined by `/` or
    `\\cdot` are one unit (`\\mathrm{~km} / \\mathrm{s}` -> "km/s"); a short token in `\\text{}`
    after a plain number is a unit (`_unit_shaped`). Degrees are dropped (90° = 90), as
    math-verify does."""
    value, units, joiner = text.strip(), [], ""
    while True:
        match = _TEXT_GROUP.search(value)
        bare = None if match else _BARE_WORD.search(value)
        found = match or bare
        before = value[: found.start()] if found else ""
        if found is None or not (
            _is_unit(found.group(1)) or (match and _unit_shaped(found.group(1), before))
        ):
            break
        if not before.strip() or not re.search(r"[\w})]", before):
            break  # the unit is the whole answer: leave it
        unit = " ".join(re.sub(r"\\[,;: ]|~", " ", found.group(1)).split())
        unit += (found.group(2) or "").replace(" ", "")
        if joiner:
            units[0] = unit + joiner + units[0]
        else:
            units.insert(0, unit)
        value, joiner = _joined_unit(_TRAILING_SPACE.sub("", before))
    return value, " ".join(units)


def _joined_unit(value: str) -> tuple[str, str]:
    """(`value` without a trailing `/` or `\\cdot`, the joiner) when a unit in `\\text{}` comes
    before that joiner (`7.5 \\mathrm{~km} /`); (`value`, "") otherwise."""
    joined = _UNIT_JOINER.search(value)
    if joined is None:
        return value, ""
    head = value[: joined.start()]
    group = _TEXT_GROUP.search(head)
    if group is None or not _is_unit(group.group(1)):
        return value, ""
    if not re.search(r"[\w})]", head[: group.start()]):
        return value, ""
    return head, "/" if joined.group(1) == "/" else " "


def asked_unit(text: str, asked: list[str]) -> tuple[str, str]:
    """(the value, the unit) of an answer whose trailing `\\text{}` names what the question
    counts or measures in (`5 \\text{ apples}` for "how many apples", `10^7 \\text{ erg}` for
    "how many erg": `asked`, from `problem_text.asked_units`), a unit the list lacks; (text, "")
    otherwise."""
    match = _TEXT_GROUP.search(text)
    if match is None or match.group(2) or not asked:
        return text, ""
    words = " ".join(re.sub(r"\\[,;: ]|~", " ", match.group(1)).split())
    before = _TRAILING_SPACE.sub("", text[: match.start()]).strip()
    if not words or not re.search(r"[\d})]", before[-1:]):
        return text, ""
    if any(same_unit(words, a) or same_unit(words.rstrip("s"), a.rstrip("s")) for a in asked):
        return before, words
    return text, ""


_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
NUMBER_WORDS: dict[str, int] = (
    {w: i for i, w in enumerate(_ONES)}
    | {w: 20 + 10 * i for i, w in enumerate(_TENS)}
    | {"hundred": 100, "thousand": 1000, "million": 1000000}
)
"""Numbers spelled as one English word, by value."""
TENS_WORDS = _TENS

_SECONDS = {
    "s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "h": 3600, "hr": 3600, "hour": 3600,
    "day": 86400, "week": 604800,
}  # fmt: skip
_TIME_PART = re.compile(
    r"\s*(\d+(?:\.\d+)?)\s*(?:\\[,;: ]|~)*\s*(?:\\(?:text|mathrm)\s*\{\s*)?([A-Za-z]+)\s*\}?"
    r"\s*(?:,|\band\b|\\text\s*\{\s*(?:,|and)?\s*\})?"
)


def _seconds_per(unit: str) -> int | None:
    """Seconds in a unit of time (`hours`, `min`, `h`), or None for another word."""
    unit = unit.lower()
    if unit in _SECONDS:
        return _SECONDS[unit]
    return _SECONDS.get(unit[:-1]) if unit.endswith("s") else None


def compound_time(text: str, unit: str = "") -> str | None:
    """A duration in several units of time (`2 \\text{ hours } 30 \\text{ minutes}`,
    `1 h 15 min`) as one value in `unit` (a unit of time; the largest of the text's own when
    "" or not one): `\\frac{5}{2} \\text{ hours}`; None when `text` is not such a duration."""
    from fractions import Fraction

    parts, at = [], 0
    while at < len(text):
        match = _TIME_PART.match(text, at)
        if match is None or match.end() == at or _seconds_per(match.group(2)) is None:
            return None
        parts.append((Fraction(match.group(1)), match.group(2), _seconds_per(match.group(2))))
        at = match.end()
    sizes = [size for _, _, size in parts]
    if len(parts) < 2 or sizes != sorted(sizes, reverse=True) or len(set(sizes)) < len(sizes):
        return None
    total = sum((value * size for value, _, size in parts), Fraction(0))
    size = _seconds_per(unit) if unit else None
    if size is None:
        unit, size = parts[0][1], parts[0][2]
    value = total / size
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}} \\text{{ {unit}}}"


_UNIT_NAMES = {
    "centimeter": "cm", "millimeter": "mm", "kilometer": "km", "meter": "m", "metre": "m",
    "second": "s", "sec": "s", "minute": "min", "hour": "h", "hr": "h", "gram": "g",
    "kilogram": "kg", "inch": "in", "foot": "ft", "feet": "ft", "yard": "yd", "mile": "mi",
    "liter": "l", "litre": "l", "degree": "deg", "radian": "rad", "pound": "lb", "year": "yr",
    "ounce": "oz", "ohm": "ohm", "square": "sq", "cubic": "cu", "dollar": "dollar",
    "cent": "cent", "day": "day", "week": "week",
}  # fmt: skip


_ATTACHED_UNIT = re.compile(
    r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)"
    r"(?:\s*\\(?:times|cdot)\s*10\^\{?[-+]?\d+\}?)?)\s*([A-Za-z])\s*$"
)


def unit_letter(text: str) -> str:
    """A number followed by a one-letter unit (`0.02m`, `5 s`) spelled with the unit in
    `\\text{}`, so that `split_unit` reads it; any other text unchanged. Only for a gold that is a
    number: against a symbolic gold, `3m` is 3 times m."""
    match = _ATTACHED_UNIT.match(text)
    if match is None or match.group(2) not in UNITS:
        return text
    return f"{match.group(1)} \\text{{ {match.group(2)}}}"


def same_unit(a: str, b: str) -> bool:
    """Do two units from `split_unit` name the same unit (`cm` = `centimeters`)?"""

    def canonical(unit: str) -> str:
        out = []
        for word in unit.lower().replace("{", "").replace("}", "").replace("^", " ^").split():
            word = (
                word[:-1]
                if len(word) > 3 and word.endswith("s") and word[:-1] in _UNIT_NAMES
                else word
            )
            word = "ft" if word in ("feet", "foot") else _UNIT_NAMES.get(word, word)
            out.append(word)
        return " ".join(out)

    return canonical(a) == canonical(b)


_LETTER_MARK = re.compile(r"\s*(?:[:)]|\.(?=\s))")
_CHOICE = re.compile(
    r"^\s*(?:\\text(?:bf)?\s*\{\s*\(?([A-E])\)?\s*\}|\(([A-E])\)|([A-E]))(?![A-Za-z])"
)


_WHOLE_TEXT = re.compile(r"^\\text(?:bf|rm)?\s*\{([^{}]*)\}$")


def _unwrapped(text: str) -> str:
    """A choice wholly inside `\\text{}` (`\\text{(C) 29}`) as its content."""
    whole = _WHOLE_TEXT.match(text.strip())
    return whole.group(1).strip() if whole and _CHOICE.match(whole.group(1)) else text


def choice_value(text: str) -> str | None:
    """The value of a choice written with its letter (`\\textbf{(C)}~27`, `27 \\text{ (C)}` or
    `\\text{(C) 27}` -> "27"), or None when `text` is not one."""
    text = _unwrapped(text)
    choice = _AMC_CHOICE.match(text) or _TRAILING_CHOICE.match(text)
    return None if choice is None else choice.group(1).strip()


def choice_letter(text: str, *, whole: bool = False) -> str | None:
    """The multiple-choice letter that `text` starts with (`\\text{(B) } 12`, `(C) 27`, `B`) or
    ends with after its value (`27 \\text{ (C)}`), or None; with `whole`, only when the letter is
    all of `text` (a gold `B` or `(B)`)."""
    text = _unwrapped(unicode_digits(text.strip()).strip("$").strip())
    match = _CHOICE.match(text)
    if match is None:
        trailing = None if whole else _TRAILING_CHOICE.match(text)
        return None if trailing is None else trailing.group(2) or trailing.group(3)
    if whole and text[match.end() :].strip(" .~"):
        return None
    rest = text[match.end() :]
    if match.group(3) and not whole and rest.strip() and not _LETTER_MARK.match(rest):
        return None  # a bare `B x` is an expression, not a choice (`B: 12` is one)
    return next(g for g in match.groups() if g)


_LEADING_SPACE = re.compile(r"^(?:\\[,;:! ]|\\q?quad|~|\s)+")
_NAME = r"[A-Za-z](?:_\{?\w+\}?)?|\\[A-Za-z]+(?:_\{?\w+\}?)?"
_NAMED = re.compile(rf"^\s*({_NAME})\s*=\s*(.+?)\s*$", re.DOTALL)
_NAMES_TUPLE = re.compile(rf"^\s*\\?\(\s*((?:{_NAME})(?:\s*,\s*(?:{_NAME}))+)\s*\\?\)\s*=\s*(.+)$")


def named_components(text: str) -> list[str] | None:
    """The values of an answer given as named components, in the order of their names:
    `x=3, y=4` and `y=4, x=3` -> ["3", "4"]; `(x, y) = (3, 4)` -> ["3", "4"]; None otherwise."""
    tupled = _NAMES_TUPLE.match(text.strip())
    if tupled is not None:
        names = [n.strip() for n in tupled.group(1).split(",")]
        values = split_top_level(tupled.group(2).strip().removeprefix("(").removesuffix(")"))
        if len(values) != len(names):
            return None
        pairs = list(zip(names, values, strict=True))
    else:
        parts = split_top_level(re.sub(r"\\text\{\s*and\s*\}|\band\b", ",", text))
        parts = [_LEADING_SPACE.sub("", p) for p in parts]  # `x=3,\\ y=4`
        matches = [_NAMED.match(p) for p in parts if p]
        if len(matches) < 2 or any(m is None for m in matches):
            return None
        pairs = [(m.group(1), m.group(2)) for m in matches if m is not None]
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        return None
    return [value for _, value in sorted(pairs)]


_DECIMAL = re.compile(r"^[-+]?(\d*)(\.?)(\d*)(?:\s*\\(?:times|cdot)\s*10\^\{?([-+]?\d+)\}?)?$")


def significant_digits(text: str) -> int | None:
    """How many significant digits a gold written as a decimal has (`2.7778e-6` -> 5,
    `0.0120` -> 3), or None when it is not a decimal (an integer, a fraction, an expression)."""
    match = _DECIMAL.match(rewrite(text).replace("(", "").replace(")", "").strip())
    if match is None or not (match.group(2) or match.group(4)):
        return None
    digits = (match.group(1) + match.group(3)).lstrip("0")
    return len(digits) or None
