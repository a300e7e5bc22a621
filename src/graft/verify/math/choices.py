"""Verdicts of boxes judged against a list: a choice against the options the question lists
(`graft.verify.math.problem_text.options`), and values joined by "or" against a gold that is
the set of them. Each returns None when its form is not involved, and the verifier goes on."""

from __future__ import annotations

import re
from typing import Any

from graft.types import Verdict, clip_detail
from graft.verify.math import forms
from graft.verify.math.problem_text import options
from graft.verify.math.values import (
    _math,
    differ,
    joint_answer,
    math_equal,
    parse_answer,
    same_value,
)


def judge_choice(gold: str, box: str, problem: str) -> Verdict | None:
    """A choice's verdict: its letter against a letter gold; wrong when the value written with
    the letter is not that option's value in the problem (`\\text{(B) } 14` where (B) is 12);
    a bare value against a letter gold by the option it is. None when no choice is involved."""
    listed = options(problem)
    letter, value = forms.choice_letter(box), forms.choice_value(box)
    if letter in listed and value is not None and differ(value, listed[letter]):
        return Verdict(
            "wrong",
            clip_detail(f"({letter}) is {listed[letter]}, not {value}: {box}"),
            "one_answer",
        )
    wanted = forms.choice_letter(gold, whole=True)
    if wanted is None:
        return None
    if letter is None:
        matching = [key for key, option in listed.items() if same_value(box, option)]
        letter = matching[0] if len(matching) == 1 else None
    if letter is None:
        return None
    return Verdict.judged(letter == wanted, clip_detail(box))


_OR = re.compile(r"\\text\{\s*(?:or|either)\s*\}|\\(?:lor|vee)(?![A-Za-z])|\b(?:or|either)\b")
_SPACES = re.compile(r"\\q?quad|\\[,;: !]|~")
_NAMED_VALUE = re.compile(r"^\s*[A-Za-z]\s*=\s*(.+)$", re.DOTALL)


def judge_or_list(gold_expr: Any, box: str) -> Verdict | None:
    """A list of values joined by "or" (`3 \\text{ or } -3`, `x = 2 \\text{ or } x = 5`) judged
    as the set of them, when the gold is a set of several values; None otherwise (a hedge)."""
    s = _math().sympy
    if not (isinstance(gold_expr, s.FiniteSet) and len(gold_expr.args) > 1):
        return None
    if re.search(r"\b(?:maybe|possibly)\b", box):
        return None
    parts = [
        p for chunk in _OR.split(_SPACES.sub(" ", box)) for p in forms.split_top_level(chunk) if p
    ]
    if len(parts) < 2:
        return None
    values = []
    for part in parts:
        named = _NAMED_VALUE.match(part)
        try:
            values.append(parse_answer(named.group(1) if named else part))
        except Exception as exc:
            return Verdict(
                "no_answer", clip_detail(f"unparseable answer {box!r}: {exc}"), "unparseable_answer"
            )
    pair = joint_answer(gold_expr, values)
    right = pair is not None and math_equal(*pair)
    return Verdict.judged(right, clip_detail(box))
