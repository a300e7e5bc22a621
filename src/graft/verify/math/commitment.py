"""Does a response commit to its final box? (pure functions, no math libraries)

A reward must not go to a box the response does not stand by. The rules judge classes, not phrases:
what follows the final box decides, read a sentence at a time (sentences end at `.`, `!`, `?`, `;`,
`:`, `。` or a line break; never inside a number), with a small closed vocabulary in a few languages
(`graft.verify.math.commitment_words`): evaluation words (wrong / right, negation flipping them,
the last one of a sentence deciding: `this looks wrong, but it is correct`), uncertainty words,
counterfactual markers and words that go back on an answer. An unknown phrasing of a correction
is caught by what it states, not by its words.

- **Another value stated as the answer** (retracted): a sentence after the box that ends in a
  value (optionally followed by units) different from the box, and carries no marker that the
  value is not the answer (evaluation words, negation, `if` / `would`, "common", "instead of").
  `... \\boxed{5} ... the correct total is 6.`, `Oops, it's 6.`, `No, it's 6`, `Correction: 13`,
  `En fait, c'est 6.` are retractions, and so is a value announced mid-sentence (`actually the
  answer is 11 because ...`, `I recounted and got 11 in the end`); `A common wrong answer is
  6.`, `If we forgot the endpoint we would get 11.`, `A quicker way: 3 x 4 = 12.` (ending in the
  box's own value) are not. So is a value set against the box (`it must be 12, not the value
  boxed above`).
- **The box called wrong** (retracted): a sentence whose evaluation is an error (`wrong`,
  `mistake`, `not right`, `contradicts`, `faux`, `falsch`, `不对`) that is about the box: it
  continues the box's own sentence or is the first one after it, speaks of the writer's work (`I`,
  `we`, `this`, `above`, `boxed`) or names the box's value, and names no other value (`A common
  mistake is 6` is about 6). `There is no mistake` is not one; nor is a supposition (`if`, `would`),
  nor an error in a part of the work placed before the answer (`my initial guess of 10 was
  wrong`, `the wrong step was the second one, fixed above`).
- **Gone back on** (retracted): `wait`, `let me redo this`, `I need to start over`, `No.`,
  `重新` after the box, with no later sentence that confirms it (its value, `yes`, `correct`).
- **Uncertainty** (hedge): an uncertainty word (`maybe`, `probably`, `I guess`, `vielleicht`) or a
  negated certainty (`not sure`, `couldn't verify`) after the box; an alternative offered beside
  it (`, or maybe 15`); another value given as possible (`it could be 9`, `it could be 9 if zero
  counts`: a supposition that is no mistake) or under another reading (`under the other
  convention the count would be 9`); or a question mark right after the box.
- **Unfinished** (hedge): text after the box that stops inside a sentence (it ends in a word or a
  comma, not in punctuation or math): a response cut off in its reasoning with a tentative box.
- **Several boxes with different values** (hedge): a box before the final answer that holds
  another value and that the response did not take back: the final answer is the last committed
  box. An earlier box is superseded when the text after it corrects it (`wait`, `no`, `no no no`,
  `wrong`, `actually`, `I forgot the corner`, `recounting gives`), when it is a draft inside
  `<think> ... </think>`, or when the final box is announced as the answer (`so the answer is`,
  a "Final Answer" heading); never when the final box is offered beside it (`or`, `also`,
  `could`): several boxes offered together are a hedge.

A value after the box that only approximates it (`√50 ≈ 7.07` after `5\\sqrt{2}`, or cuts it
after three digits or more, `≈ 0.666` after `\\frac{2}{3}`) is its value.
`same(text)` tells whether a value written in the text equals the final answer; the verifier passes
one that parses and compares values (`APPROXIMATELY + value` asks whether the value rounds to the
box), the default compares the spelling.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from graft.verify.math import commitment_words as W
from graft.verify.math.answer import BOX_COMMAND, box_at, final_boxes
from graft.verify.math.forms import UNITS

APPROXIMATELY = "\\approx "
"""Prefix of a value that the text gives as an approximation, for `same`."""

_SENTENCE_END = re.compile(r"(?<![\d)}])!|[?;\n。！？；—]|[.:](?!\d)|(?<!\d)[.:]")
_VALUE = re.compile(
    r"\\[dt]?frac\{[^{}]*\}\{[^{}]*\}"
    r"|(?<![A-Za-z0-9_^\\])[-−]?\d+(?:[.,]\d+)*(?:\s*/\s*\d+)?(?:\s*\\%|%)?"
)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_ELISIONS = {"l": "le", "d": "de", "c": "ce", "j": "je", "n": "ne", "s": "se", "qu": "que"}
_RATIO = re.compile(r"(?<![\w.])(\d+)\s+(?:in|out\s+of)\s+(\d+)(?!\w|\.\d)", re.IGNORECASE)
_MIS_HYPHEN = re.compile(r"\bmis-(?=[a-z])")
_MATH_MARKUP = re.compile(r"\$|\\[()\[\]]|\*\*|\\(?:text|textbf|textit|mathrm|mathbf|emph)\b")
_CLOSERS = " \t)]}\"'*,`~"
_SIMPLE_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_RESTATEMENT = re.compile(
    r"\s*(?:equivalently|equivalent(?:ly)?\s+to|in\s+other\s+words|simply)\b", re.I
)
_NEGATED_VALUE = re.compile(r"\b(?:not|no|never|isn't|wasn't)\s*$", re.IGNORECASE)
_NEGATED_BOX = re.compile(
    r"(?:\b(?:not|never|isn't|wasn't|aren't|no\s+longer)|≠|\\neq?(?![A-Za-z])|\\not\s*=)"
    r"\s*(?:(?:equal\s+to|equals?|be)\s*)?(?:\$|\\\(|\\\[|\s)*$",
    re.IGNORECASE,
)
_NEGATED_PHRASE = re.compile(r"\b(?:no|not|never|without|needn't|don't|won't)\b[^.,]{0,16}$")
_NO = r"(?:no(?:no)*|nope|nah|non|nein|нет)"
_REJECTION = re.compile(
    rf"^\s*(?:(?:actually|hmm+|oh|wait|well)[\s,]+)?{_NO}(?:[\s,!.]+{_NO})*\s*(?:[,!.]|$)"
    r"|^\s*不[，,]",
    re.IGNORECASE,
)
_HEDGE_OFFER = re.compile(r"\b(?:or|alternatively|otherwise|ou|oder)\b|或", re.IGNORECASE)
_MATHY = re.compile(r"\d|\\boxed|\$|\\frac|\\sqrt|\b[a-z]\b")
_HEDGE_WINDOW = 80
"""How far after the final box (in characters) an alternative counts as offered with it."""
_UNFINISHED_WORDS = 3
"""Text after the box of at least this many words that stops inside a sentence is unfinished."""
_SHORT_WORDS = 3
_LEAD_CHARS = 120
"""How far before the final box (within its sentence) words announce or offer it."""
_LEAD_END = re.compile(r"[!?;。！？]|\.(?!\d)")
_THINK_END = "</think>"


@dataclass(frozen=True)
class Commitment:
    """`kind` is "" (committed), "hedge" or "retracted"; `why` says what was found."""

    kind: str = ""
    why: str = ""


def plain_text(text: str) -> str:
    """Text with math markup removed (`$`, `\\(`, `**`, `\\text`), so words and values show."""
    text = _SIMPLE_FRACTION.sub(r"\1/\2", text)
    text = _MATH_MARKUP.sub(" ", text).replace("{", " ").replace("}", " ")
    return _RATIO.sub(r"\1/\2", text)  # `1 in 4` is the value 1/4


def _words(sentence: str) -> list[str]:
    """Lower-case words; a French elision (`l'erreur`, `n'est`) is two words; `mis-added` is
    one (`misadded`)."""
    out = []
    sentence = _MIS_HYPHEN.sub("mis", sentence.lower().replace("’", "'"))
    for word in _WORD.findall(sentence):
        head, apostrophe, rest = word.partition("'")
        out.extend([_ELISIONS[head], rest] if apostrophe and head in _ELISIONS else [word])
    return out


def _is_negation(word: str) -> bool:
    return word in W.NEGATION or word.endswith("n't")


def _negated(words: list[str], i: int) -> bool:
    return any(_is_negation(w) for w in words[max(0, i - 3) : i]) or words[i + 1 : i + 2] == [
        "nicht"
    ]


def _clause_polarity(clause: list[str], supposed: bool, conflict: bool) -> int:
    """The last evaluation of a clause: -1 an error, +1 right, 0 none. Conflict words
    (`contradicts`) count only with `conflict`: a sentence that names the box."""
    polarity = 0
    for i, w in enumerate(clause):
        bad = (
            w in W.BAD
            or W.is_mis_word(w)
            or (conflict and w in W.CONFLICT)
            or (w in W.BAD_AFTER and i > 0 and clause[i - 1] in W.BAD_AFTER[w])
        )
        if bad and not supposed:
            polarity = 1 if _negated(clause, i) else -1
        elif w in W.GOOD:
            polarity = -1 if _negated(clause, i) else 1
    return polarity


def _cjk_polarity(raw: str) -> int:
    found = []
    if raw.isascii():
        return 0
    for marks, sign in ((W.CJK_BAD, -1), (W.CJK_GOOD, 1)):
        for mark in marks:
            at = raw.find(mark)
            if at >= 0:
                negated = W.CJK_NEGATION.search(raw[max(0, at - 3) : at]) is not None
                found.append((at, -sign if negated else sign))
    return max(found)[1] if found else 0


def _supposes(words: list[str], raw: str) -> bool:
    if any(w in W.SUPPOSITION for w in words):
        return True
    return not raw.isascii() and any(m in raw for m in W.CJK_SUPPOSITION)


def _evaluation(words: list[str], raw: str, conflict: bool = False) -> int:
    """The sentence's evaluation: -1 an error, +1 right, 0 none. The last clause that evaluates
    decides (`looks wrong, but it is correct`); a clause of bare negation after a contrast
    (`but it isn't`) reverses the one before; errors in a supposition do not count, nor a
    conflict (`leads to a contradiction`) unless `conflict` says the sentence names the box."""
    supposed = _supposes(words, raw)
    clauses: list[list[str]] = [[]]
    for w in words:
        if w in W.CONTRAST:
            clauses.append([])
        else:
            clauses[-1].append(w)
    result = 0
    for clause in clauses:
        polarity = _clause_polarity(clause, supposed, conflict)
        if not polarity and result and any(_is_negation(w) for w in clause):
            polarity = -result
        result = polarity or result
    cjk = 0 if supposed else _cjk_polarity(raw)
    return result or cjk


def _says_doubt(words: list[str], raw: str) -> bool:
    for i, w in enumerate(words):
        if (w in W.UNCERTAIN and not _negated(words, i)) or (w in W.CERTAIN and _negated(words, i)):
            return True
    if W.UNCERTAIN_PHRASE.search(raw):
        return True
    return not raw.isascii() and any(m in raw for m in W.CJK_UNCERTAIN)


def _goes_back(words: list[str], raw: str) -> bool:
    """Does the sentence go back on what came before (`Wait`, `No,`, `let me redo this`)?"""
    opener = words[1:2] if words[:1] and words[0] in W.OPENER_LEADS else words[:1]
    if _REJECTION.match(raw) or any(w in W.REDO_OPENERS for w in opener):
        return True
    if any(w in W.REDO and not _negated(words, i) for i, w in enumerate(words)):
        return True
    phrase = W.REDO_PHRASE.search(raw)
    if phrase is not None and not _NEGATED_PHRASE.search(raw[: phrase.start()].lower()):
        return True
    return not raw.isascii() and any(
        m in raw and not W.CJK_NEGATION.search(raw[max(0, raw.find(m) - 2) : raw.find(m)])
        for m in W.CJK_REDO
    )


def _marks_not_answer(words: list[str], raw: str) -> bool:
    """Does the sentence mark the values it names as not the answer (errors, negation,
    counterfactuals, `instead of`)? An interjection (`Oops, it's 6`) does not."""
    return W.INSTEAD_OF.search(raw) is not None or any(
        (w in W.BAD and w not in W.INTERJECTIONS)
        or w in W.NEGATION
        or w in W.COUNTERFACTUAL
        or w.endswith(("n't", "'d"))
        for w in words
    )


def _is_own(value: str, before: str, same: Callable[[str], bool]) -> bool:
    """Is `value` the box's, or (marked as an approximation) does it round to the box?"""
    if same(value):
        return True
    return W.APPROXIMATE.search(before[-24:]) is not None and same(APPROXIMATELY + value)


def _final_value(sentence: str, same: Callable[[str], bool]) -> tuple[str, bool] | None:
    """The value a sentence ends with (units and closing marks may follow it) and whether it is
    the box's, or None. After an equation, only when its left side is a name (`x = 6`);
    `3 \\cdot 4 = 12` or `8 = 8` is a computation, not an answer."""
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
    trailing = rest.replace("/", " / ").split()
    if rest and not all(w.strip(".") in UNITS or w.lower() in W.FILLER for w in trailing):
        return None
    last = values[-1]
    return last.group(0), _is_own(last.group(0), sentence[: last.start()], same)


def _set_against_box(raw: str, own: list[re.Match[str]], other: list[re.Match[str]]) -> bool:
    """Is another value set against the box (`12, not the value boxed above`, `13 rather than
    12`)?"""
    for mark in W.CONTRAST_NEGATION.finditer(raw):
        if not any(m.end() <= mark.start() for m in other):
            continue
        after = raw[mark.end() : mark.end() + 60]
        if W.BOX_REFERENCE.search(after) or any(m.start() >= mark.end() for m in own):
            return True
    return False


def _offers_other(raw: str, words: list[str], other: list[re.Match[str]]) -> bool:
    """Is another value offered as a possibility (`it could be 9`, `可能是9`, `it could be 9 if
    zero counts`), or given under another reading (`under the other convention it would be
    9`)? Not when the sentence calls it an error or supposes a mistake (`if the corner were
    counted twice, it could be 9`)."""
    if not other or any(w in W.BAD for w in words) or any(w in W.MISTAKE for w in words):
        return False
    if W.ALTERNATIVE_READING.search(raw) and not any(_is_negation(w) for w in words):
        return True
    if _supposes(words, raw) and not any(w in W.POSSIBLE for w in words):
        return False
    if raw.isascii() and not any(w in W.POSSIBLE for w in words):
        return False
    for value in other:
        before = raw[: value.start()]
        if W.CJK_POSSIBLE.search(before):
            return True
        near = _words(before[-40:])
        modal = max((i for i, w in enumerate(near) if w in W.POSSIBLE), default=None)
        if (
            modal is not None
            and len(near) - modal <= 5
            and not any(_is_negation(w) for w in near[modal:])
            and (
                any(w in W.BE for w in words)
                or (
                    any(w in W.OFFER_VERBS for w in near[modal:])
                    and not _rejected_after(raw, value)
                )
            )
        ):
            return True
    return False


def _rejected_after(raw: str, value: re.Match[str]) -> bool:
    """Is a value raised and then rejected in its sentence (`another layout could give 13 seats,
    but it breaks the rule`, `one might count 2 and 10 too, but 'between' is strict`)?"""
    return any(w in W.CONTRAST for w in _words(raw[value.end() :]))


def _earlier_step(words: list[str], own: list[re.Match[str]]) -> bool:
    """Does the sentence speak of a part of the work before the answer (`my initial guess of 10
    was wrong`, `the wrong step was the second one, fixed above`), not of the box?"""
    return (
        not own
        and any(w in W.STEP for w in words)
        and any(w in W.EARLIER for w in words)
        and not any(w in W.ANSWER for w in words)
    )


def _announced(raw: str, own: list[re.Match[str]], other: list[re.Match[str]]) -> bool:
    """Does a sentence announce another value as the answer mid-sentence (`actually the answer
    is 11 because ...`, `I recounted and got 11 in the end`)? The last value after a copula
    decides (`3 + 4 is 7 and 7 + 5 is 12`); one after a computation (`3 + 4 is 7`) does not."""
    if not other or W.ANNOUNCE.search(raw) is None:
        return False
    stated = [
        m
        for m in sorted(own + other, key=lambda m: m.start())
        if (W.COPULA.search(raw[: m.start()]) or W.COPULA_AFTER.match(raw[m.end() :]))
        and not re.search(r"[\d)}]\s*(?:\S+\s*)?$", raw[: m.start()])
        and not re.match(r"\s*(?:[-+*/×^=]|\\times|\\cdot)", raw[m.end() :])
    ]
    return bool(stated) and stated[-1] in other


def _under_condition(raw: str, words: list[str], other: list[re.Match[str]]) -> bool:
    """Is another value given under a condition (`9 if the endpoints are included`, `if
    negative divisors count, it doubles to 12`, `alternatively, if zero counts, 4`) that is not
    a mistake (`if we forgot the endpoint we would get 9`, `if x were 8`)? Another reading of the
    question, offered beside the box: a hedge."""
    if not other or not any(w in W.CONDITIONAL for w in words):
        return False
    bare = any(
        re.match(r"\s*\(?\s*(?:if|unless)\b", raw[m.end() :], re.I)
        or W.ANSWER_SUBJECT.search(raw[: m.start()])
        for m in other
    )
    if not bare and not any(w in W.ANSWER or w in W.TALLY for w in words):
        return False  # `if we wait 5 more minutes the tank holds 20 liters`: another quantity
    return not any(w in W.MISTAKE or w in W.BAD or w in W.FIXES or W.is_mis_word(w) for w in words)


def _besides_own(raw: str, own: list[re.Match[str]], values: list[re.Match[str]]) -> bool:
    """Does a sentence that names the box's value go on to another quantity (`he kept 12 and
    sold 36`, `spending 24 and keeping 1`), joined by `and` or a comma, with no word between
    that turns against the box (contrast, negation, a correction, an announcement) or concludes
    (`so 11`)?"""
    if not own or not values or values[-1] in own or own[-1].start() > values[-1].start():
        return False
    between = raw[own[-1].end() : values[-1].start()]
    if not re.search(r"\band\b|,", between) or W.ANNOUNCE.search(between):
        return False
    turning = W.CONTRAST | W.NEGATION | W.CORRECTION | W.REJECTIONS | W.REDO_OPENERS | W.CONCLUSION
    return not any(w in turning or _is_negation(w) for w in _words(between))


def _enumerates(raw: str, values: list[re.Match[str]]) -> bool:
    """Does the sentence end in a list of three values or more (`the divisors are 1, 2, 3 and
    6`)? Its last element is one of the list, not a value stated as the answer."""
    if len(values) < 3:
        return False
    last = values[-3:]
    return all(
        re.fullmatch(r"\s*(?:,\s*(?:and\s+)?|and\s+|&\s*)", raw[a.end() : b.start()])
        for a, b in itertools.pairwise(last)
    )


def _sentence_verdict(
    raw: str, all_words: list[str], about_box: bool, same: Callable[[str], bool]
) -> Commitment:
    """What one sentence after the box says of it (the module docstring's rules)."""
    rejection = _REJECTION.match(raw)
    # The rejection itself marks no value as not the answer: `No, it's 6` states 6.
    words = _words(raw[rejection.end() :]) if rejection else all_words
    values = list(_VALUE.finditer(raw))
    own = [m for m in values if _is_own(m.group(0), raw[: m.start()], same)]
    other = [m for m in values if m not in own]
    about_box = about_box or bool(own) or any(w in W.SELF or w in W.INTERJECTIONS for w in words)
    about_box = about_box or (bool(words) and words[0] in W.BACK_REFERENCE)
    about_box = about_box and not _earlier_step(words, own)
    names_box = bool(own) or W.CONFLICT_TARGET.search(raw) is not None
    if _evaluation(words, raw, names_box) < 0 and about_box and (own or not other):
        return Commitment("retracted", f"the box called wrong: {raw.strip()}")
    if any(_NEGATED_VALUE.search(raw[: m.start()]) for m in own):
        return Commitment("retracted", f"the box's value negated: {raw.strip()}")
    if _set_against_box(raw, own, other):
        return Commitment("retracted", f"another value set against the box: {raw.strip()}")
    if _says_doubt(words, raw) and not _earlier_step(words, own):
        return Commitment("hedge", f"uncertain: {raw.strip()}")
    if _offers_other(raw, words, other):
        return Commitment("hedge", f"another value offered: {raw.strip()}")
    if _under_condition(raw, words, other):
        return Commitment("hedge", f"another value under a condition: {raw.strip()}")
    final = _final_value(raw, same)
    restated = final is not None and (_besides_own(raw, own, values) or _enumerates(raw, values))
    stated = (final is not None and not final[1] and not restated) or _announced(raw, own, other)
    if stated and not _marks_not_answer(words, raw):
        return Commitment("retracted", f"another value stated: {raw.strip()}")
    return Commitment()


def _confirms(raw: str, words: list[str], same: Callable[[str], bool]) -> bool:
    """Does a sentence confirm the box (its value, not negated; `yes`; `correct`)?"""
    for m in _VALUE.finditer(raw):
        if _is_own(m.group(0), raw[: m.start()], same) and not _NEGATED_VALUE.search(
            raw[: m.start()]
        ):
            return True
    return _evaluation(words, raw) > 0 or any(w in W.YES for w in words)


def _tail_verdict(tail: str, same: Callable[[str], bool]) -> Commitment:
    pending = ""
    first = True
    for index, raw in enumerate(_SENTENCE_END.split(plain_text(tail))):
        if not raw.strip():
            continue
        words = _words(raw)
        # The first sentence after the box speaks of it when it is short (`Wrong.`) or in a
        # script without spaces (`上面的答案是错的`); a longer one names its own subject.
        first = first and (len(words) <= _SHORT_WORDS or not raw.isascii())
        found = _sentence_verdict(raw, words, index == 0 or first, same)
        if found.kind:
            return found
        first = False
        if _goes_back(words, raw):
            pending = raw.strip()
        if pending and _confirms(raw, words, same):
            pending = ""
    if pending:
        return Commitment("retracted", f"the box gone back on: {pending}")
    return Commitment()


def _unfinished(tail: str) -> bool:
    plain = plain_text(tail).strip()
    if len(_words(plain)) < _UNFINISHED_WORDS:
        return False
    return bool(re.search(r"[A-Za-z,(+\-*/=]\s*$", plain))


def _offered_alternative(tail: str) -> bool:
    near = tail[:_HEDGE_WINDOW].split("\n\n")[0]
    offer = _HEDGE_OFFER.search(near)
    if offer is None or _RESTATEMENT.match(near[offer.end() :]):
        return False  # `or equivalently 3.5` restates the box (its value is then checked)
    return _MATHY.search(near[offer.end() :]) is not None


def _corrects(raw: str) -> bool:
    """Does a sentence after an earlier box correct it (`wait`, `no no no`, `wrong`, `actually`,
    `I forgot the corner`, `recounting gives`)?"""
    words = _words(raw)
    if _goes_back(words, raw) or _evaluation(words, raw) < 0 or W.FIX_PHRASE.search(raw):
        return True
    return any(
        w in W.CORRECTION or w in W.INTERJECTIONS or w in W.FIXES or W.is_mis_word(w) for w in words
    )


def _last_correction(text: str, start: int, end: int, cuts: list[int]) -> int:
    """Where the last sentence of `text[start:end]` that corrects a box begins (sentences also
    end at each of `cuts`, the ends of the earlier boxes); -1 when none. One pass, from the end."""
    bounds = {start, end, *(c for c in cuts if start < c < end)}
    bounds.update(m.end() for m in _SENTENCE_END.finditer(text, start, end))
    ordered = sorted(bounds)
    for left, right in reversed(list(itertools.pairwise(ordered))):
        if _corrects(plain_text(text[left:right])):
            return left
    return -1


def _first_kept(
    text: str, earlier: list[tuple[int, str]], final_start: int, same: Callable[[str], bool]
) -> str:
    """The value of the first box before the final answer that holds another value and that the
    final answer does not supersede (module docstring), or "". `earlier`: (end, content) of the
    boxes before the final answer. Nothing is superseded when the final box is offered beside
    the others; a superseded box is never parsed."""
    window = text[max(earlier[-1][0], final_start - _LEAD_CHARS) : final_start]
    ends = list(_LEAD_END.finditer(window))
    lead = window[ends[-1].end() :] if ends else window
    offered = W.ALTERNATIVE.search(plain_text(lead)) is not None
    if not offered and W.FINAL_MARKER.search(lead) and not W.CONDITION.search(plain_text(lead)):
        return ""
    think_end = -1 if offered else text.rfind(_THINK_END, 0, final_start)
    corrected = -1
    if not offered:
        corrected = _last_correction(text, earlier[0][0], final_start, [e for e, _ in earlier])
    for end, content in earlier:
        if think_end < end and corrected < end and content and not same(content):
            return content
    return ""


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
    earlier = [(end, content or "") for _, end, content in boxes[: len(boxes) - len(answer)]]
    kept = _first_kept(text, earlier, final[0][0], same) if earlier else ""
    if kept:
        return Commitment("hedge", f"another box holds {kept}")
    if _NEGATED_BOX.search(text[max(0, final[0][0] - 40) : final[0][0]]):
        return Commitment("retracted", "the box negated: it is not the answer")
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
