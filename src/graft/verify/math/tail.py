"""The training rule for what follows a final box: any other value after it withholds the reward
(pure functions, no math libraries).

The careful reading of a response's tail (`graft.verify.math.commitment`) tells a retraction or an
alternative from a remark by its words, and each round of new phrasings ("One could argue for 9",
"(9 if the endpoints are included)", "in the end I think 13 is what the question wants") gets
past it. A policy under optimisation finds such phrasings. In training the rule is simpler and
cannot be gamed: once the answer is boxed, any other candidate value after it withholds the
reward. A model learns to stop at its answer.

A value after the box is the box's own, not another candidate, when:
- it equals the box (`\\boxed{12}. He kept 12.`), or rounds it where the text marks it as an
  approximation (`≈ 7.07` after `5\\sqrt{2}`, `commitment.APPROXIMATELY`);
- it is `X in Y` or `X out of Y` of the box's value (`1 in 4` after `\\frac{1}{4}`);
- it is an operand of a computation whose result is the box's value (`3 × 4 = 12`,
  `3 + 4 + 5 is 12`, `6! = 720`, `√50 ≈ 7.07`, `12 = 3 \\cdot 4`).

Everything else that is a number is another candidate: digits (`13`, `0.5`, `\\frac{1}{3}`,
`25%`) and number words from two to a million (`the count doubles to twelve`). Its cost: a tail
that names another quantity (`he kept 12 and sold 36`), an aside about another case (`for odd
exponents the answer is 2`) or a reading raised and rejected (`one might count 2 and 10 too`)
withholds the reward as well; BENCHMARKS.md states how often on the project's labelled cases.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from graft.verify.math.commitment import APPROXIMATELY, plain_text
from graft.verify.math.commitment_words import APPROXIMATE
from graft.verify.math.forms import NUMBER_WORDS

_VALUE = re.compile(r"(?<![A-Za-z0-9_^\\.])[-−]?\d+(?:[.,]\d+)*(?:\s*/\s*\d+)?(?:\s*\\?%)?(?![\d])")
_THOUSANDS = re.compile(r"[-−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_RATIO = re.compile(r"(?<![\w.])(\d+)\s+(?:in|out\s+of)\s+(\d+)(?!\w|\.\d)", re.IGNORECASE)
_WORDS = {w: n for w, n in NUMBER_WORDS.items() if w != "one"}  # `one could argue`: no value
_NUMBER_WORD = re.compile(rf"\b(?:{'|'.join(_WORDS)})\b", re.IGNORECASE)
_TERM = r"\(?\s*(?:\\sqrt\s*)?[-−]?\d+(?:\.\d+)?\s*!?\s*\)?"
_FUNCTION = r"\\sqrt\s*\d+(?:\.\d+)?|\d+\s*!"
_OPERATOR = (
    r"(?:[-+*/×÷·^x]|\\times|\\cdot|\\div"
    r"|\b(?:times|plus|minus|over|divided\s+by|multiplied\s+by|mal|fois)\b)"
)
_CHAIN = rf"(?:(?:{_TERM}\s*{_OPERATOR}\s*)+{_TERM}|{_FUNCTION})"
_RELATION = r"(?:=|≈|\\approx|\b(?:is|equals|gives|makes|ist|est)\b)"
_BEFORE = re.compile(rf"{_CHAIN}\s*{_RELATION}\s*$", re.IGNORECASE)
_AFTER = re.compile(rf"\s*{_RELATION}\s*{_CHAIN}", re.IGNORECASE)
"""A computation whose result is the box's value, before it (`3 × 4 = 12`, `6! = 720`,
`\\sqrt 50 ≈ 7.07`) or after it (`12 = 3 \\cdot 4`): its operands are the box's own."""


def _values(tail: str) -> list[tuple[int, int, str]]:
    """(start, end, value as written in digits) of every number in `tail`: ratios `1 in 4` as
    `1/4`, number words as digits."""
    found = [(m.start(), m.end(), f"{m.group(1)}/{m.group(2)}") for m in _RATIO.finditer(tail)]
    taken = [(s, e) for s, e, _ in found]
    for m in _VALUE.finditer(tail):
        if not any(s <= m.start() < e for s, e in taken):
            written = m.group(0)
            if _THOUSANDS.fullmatch(written.strip()):
                written = written.replace(",", "")
            found.append((m.start(), m.end(), written))
    for m in _NUMBER_WORD.finditer(tail):
        found.append((m.start(), m.end(), str(_WORDS[m.group(0).lower()])))
    return sorted(found)


def other_value(tail: str, same: Callable[[str], bool]) -> str:
    """The first value after the final box that is another candidate (module docstring), or
    "" when every value there is the box's own. `tail`: the text after the final box; `same`:
    `values.same_as` of the final boxes."""
    text = plain_text(tail)
    values = _values(text)
    excused: list[tuple[int, int]] = []
    for start, end, value in values:
        if same(value) or same(APPROXIMATELY + value):
            before = _BEFORE.search(text[:start])
            if before is not None:
                excused.append((before.start(), start))
            after = _AFTER.match(text, end)
            if after is not None:
                excused.append((end, after.end()))
    for start, _, value in values:
        if any(s <= start < e for s, e in excused) or same(value):
            continue
        if APPROXIMATE.search(text[max(0, start - 24) : start]) and same(APPROXIMATELY + value):
            continue
        return value.strip()
    return ""
