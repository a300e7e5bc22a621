"""Does a response commit to its final box? (pure functions, no math libraries)

A reward must not go to a box the response does not stand by. The rules judge classes, not phrases:
what follows the final box decides, read a sentence at a time (sentences end at `.`, `!`, `?`, `;`,
`:` or a line break; never inside a number), with a small closed vocabulary of evaluation words
(wrong / right, with negation flipping them), uncertainty words and counterfactual markers. An
unknown phrasing of a correction is caught by what it states, not by its words.

- **Another value stated as the answer** (retracted): a sentence after the box that ends in a
  value (optionally followed by units) different from the box, and carries no marker that the
  value is not the answer (evaluation words, negation, `if` / `would`, "common", "instead of").
  `... \\boxed{5} ... the correct total is 6.`, `Oops, it's 6.`, `Correction: 13`,
  `En fait, c'est 6.` are retractions; `A common wrong answer is 6.`, `If we forgot the endpoint
  we would get 11.`, `A quicker way: 3 x 4 = 12.` (ending in the box's own value) are not.
- **The box called wrong** (retracted): a sentence with an evaluation of error (`wrong`, `mistake`,
  `not right`, `doesn't work`, `oops`) that is about the box: it continues the box's own sentence,
  speaks of the writer's work (`I`, `we`, `this`, `above`, `my answer`) or names the box's value,
  and names no other value (`A common mistake is 6` is about 6). `There is no mistake` is not one.
- **Uncertainty** (hedge): an uncertainty word (`maybe`, `probably`, `I guess`, `doubt`) or a
  negated certainty (`not sure`, `couldn't verify`) after the box; or an alternative offered
  beside it (`, or maybe 15`); or a question mark right after the box.
- **Unfinished** (hedge): text after the box that stops inside a sentence (it ends in a word or a
  comma, not in punctuation or math): a response cut off in its reasoning with a tentative box.
- **Several boxes with different values** (hedge): a box anywhere before the final answer that
  holds another value; the words between them do not matter. The same value boxed again is fine.

`same(text)` tells whether a value written in the text equals the final answer; the verifier passes
one that parses and compares values, the default compares the spelling.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from graft.tasks.answer import BOX_COMMAND, box_at, final_boxes
from graft.tasks.forms import UNITS

_SENTENCE_END = re.compile(r"[!?;\n]|[.:](?!\d)|(?<!\d)[.:]")
_VALUE = re.compile(
    r"\\[dt]?frac\{[^{}]*\}\{[^{}]*\}"
    r"|(?<![\w^_\\])[-−]?\d+(?:[.,]\d+)*(?:\s*/\s*\d+)?(?:\s*\\%|%)?"
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_MATH_MARKUP = re.compile(r"\$|\\[()\[\]]|\*\*|\\(?:text|textbf|textit|mathrm|mathbf|emph)\b")
_CLOSERS = " \t)]}\"'*,`~"

_NEGATION = frozenset(["not", "no", "never", "nothing", "none", "nor", "without", "cannot"])
_BAD = frozenset(
    [
        "wrong",
        "incorrect",
        "mistake",
        "mistaken",
        "mistakes",
        "error",
        "errors",
        "erroneous",
        "invalid",
        "false",
        "flawed",
        "bogus",
        "oops",
        "whoops",
    ]
)
_GOOD = frozenset(["right", "correct", "true", "valid", "work", "works", "holds", "checks"])
_INTERJECTIONS = frozenset(["oops", "whoops"])
_BACK_REFERENCE = frozenset(["this", "that", "that's", "it", "it's"])
"""A sentence that opens with one of these speaks of what came just before: the box."""
_NEGATED_VALUE = re.compile(r"\b(?:not|no|never|isn't|wasn't)\s*$", re.IGNORECASE)
_UNCERTAIN = frozenset(
    [
        "unsure",
        "uncertain",
        "doubt",
        "doubtful",
        "guess",
        "guessing",
        "guessed",
        "probably",
        "presumably",
        "maybe",
        "perhaps",
        "possibly",
        "tentative",
        "tentatively",
        "unverified",
    ]
)
_CERTAIN = frozenset(["sure", "certain", "confident", "verify", "verified", "check", "checked"])
_SELF = frozenset(
    [
        "i",
        "i'm",
        "i've",
        "my",
        "me",
        "we",
        "we've",
        "we're",
        "our",
        "this",
        "above",
        "previous",
        "earlier",
    ]
)
_COUNTERFACTUAL = frozenset(
    [
        "if",
        "would",
        "could",
        "unless",
        "common",
        "commonly",
        "typical",
        "trap",
        "pitfall",
        "instead",
        "rather",
        "careless",
        "naive",
        "naively",
        "tempting",
        "forget",
        "forgot",
        "forgetting",
    ]
)
_HEDGE_OFFER = re.compile(r"\b(?:or|alternatively|otherwise)\b", re.IGNORECASE)
_MATHY = re.compile(r"\d|\\boxed|\$|\\frac|\\sqrt|\b[a-z]\b")
_HEDGE_WINDOW = 80
"""How far after the final box (in characters) an alternative counts as offered with it."""
_UNFINISHED_WORDS = 3
"""Text after the box of at least this many words that stops inside a sentence is unfinished."""


@dataclass(frozen=True)
class Commitment:
    """`kind` is "" (committed), "hedge" or "retracted"; `why` says what was found."""

    kind: str = ""
    why: str = ""


def _plain(text: str) -> str:
    """Text with math markup removed (`$`, `\\(`, `**`, `\\text`), so words and values show."""
    return _MATH_MARKUP.sub(" ", text).replace("{", " ").replace("}", " ")


def _words(sentence: str) -> list[str]:
    return _WORD.findall(sentence.lower().replace("’", "'"))


def _negated(words: list[str], i: int) -> bool:
    before = words[max(0, i - 3) : i]
    return any(w in _NEGATION or w.endswith("n't") for w in before)


def _says_error(words: list[str]) -> bool:
    """An evaluation of error: a bad word not negated, or a good word negated."""
    for i, w in enumerate(words):
        if (w in _BAD and not _negated(words, i)) or (w in _GOOD and _negated(words, i)):
            return True
    return False


def _says_doubt(words: list[str]) -> bool:
    for i, w in enumerate(words):
        if (w in _UNCERTAIN and not _negated(words, i)) or (w in _CERTAIN and _negated(words, i)):
            return True
    return False


def _marks_not_answer(words: list[str]) -> bool:
    """Does the sentence mark the values it names as not the answer (errors, negation,
    counterfactuals)?"""
    return any(
        w in _BAD or w in _NEGATION or w in _COUNTERFACTUAL or w.endswith(("n't", "'d"))
        for w in words
    )


def _final_value(sentence: str) -> str | None:
    """The value a sentence ends with (units and closing marks may follow it), or None. After an
    equation, only when its left side is a name (`x = 6`); `3 \\cdot 4 = 12` or `8 = 8` is a
    computation, not an answer."""
    lhs, equals, rhs = sentence.rpartition("=")
    if equals:
        before = lhs.split()
        if not before or re.search(r"\d", before[-1]):
            return None
        sentence = rhs
    values = list(_VALUE.finditer(sentence))
    if not values:
        return None
    rest = sentence[values[-1].end() :].strip(_CLOSERS)
    if rest and not all(w.strip(".") in UNITS for w in rest.replace("/", " / ").split()):
        return None
    return values[-1].group(0)


def _tail_verdict(tail: str, same: Callable[[str], bool]) -> Commitment:
    for index, raw in enumerate(_SENTENCE_END.split(_plain(tail))):
        words = _words(raw)
        values = [m.group(0) for m in _VALUE.finditer(raw)]
        own = [v for v in values if same(v)]
        other = [v for v in values if not same(v)]
        about_box = (
            index == 0
            or bool(own)
            or any(w in _SELF or w in _INTERJECTIONS for w in words)
            or (bool(words) and words[0] in _BACK_REFERENCE)
        )
        if _says_error(words) and about_box and (own or not other):
            return Commitment("retracted", f"the box called wrong: {raw.strip()}")
        if any(
            _NEGATED_VALUE.search(raw[: m.start()])
            for m in _VALUE.finditer(raw)
            if same(m.group(0))
        ):
            return Commitment("retracted", f"the box's value negated: {raw.strip()}")
        if _says_doubt(words):
            return Commitment("hedge", f"uncertain: {raw.strip()}")
        final = _final_value(raw)
        if final is not None and not same(final) and not _marks_not_answer(words):
            return Commitment("retracted", f"another value stated: {raw.strip()}")
    return Commitment()


def _unfinished(tail: str) -> bool:
    plain = _plain(tail).strip()
    if len(_words(plain)) < _UNFINISHED_WORDS:
        return False
    return bool(re.search(r"[A-Za-z,(+\-*/=]\s*$", plain))


def _offered_alternative(tail: str) -> bool:
    near = tail[:_HEDGE_WINDOW].split("\n\n")[0]
    offer = _HEDGE_OFFER.search(near)
    return offer is not None and _MATHY.search(near[offer.end() :]) is not None


def commitment(text: str, same: Callable[[str], bool] | None = None) -> Commitment:
    """Whether `text` commits to its final box (module docstring); committed also when there is
    no closed final box (extraction says `no_answer` then)."""
    answer = final_boxes(text)
    if answer is None:
        return Commitment()
    if same is None:
        spelled = {"".join(a.split()) for a in answer}

        def same(value: str) -> bool:
            return "".join(value.split()) in spelled

    boxes = [box_at(text, m.start(), m.end()) for m in BOX_COMMAND.finditer(text)]
    final = boxes[len(boxes) - len(answer) :]
    for _, _, content in boxes[: len(boxes) - len(answer)]:
        if content is not None and content and not same(content):
            return Commitment("hedge", f"another box holds {content}")
    tail = text[final[-1][1] :]
    if tail.lstrip().startswith("?"):
        return Commitment("hedge", "a question mark after the box")
    if _offered_alternative(tail):
        return Commitment("hedge", f"an alternative beside the box: {tail[:_HEDGE_WINDOW]}")
    found = _tail_verdict(tail, same)
    if found.kind:
        return found
    if _unfinished(tail):
        return Commitment("hedge", "the response stops inside a sentence after the box")
    return Commitment()
