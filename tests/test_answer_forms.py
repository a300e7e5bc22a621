"""The grader on answer formats beyond one plain box: several boxes (sets, tuples, hedges), golds
in forms the LaTeX parser misreads (clock times, ellipsis sequences, `\\mathrm{e}`, trailing
periods, e-notation, NumPy-style Minerva golds), the opt-in answer-line extraction and the reason
names of verdicts. Every category has right AND wrong answers: a grader that says "correct" to
everything fails here."""

from __future__ import annotations

import pytest

from graft.types import Verdict
from graft.verify.math.answer import answer_line, final_boxes
from graft.verify.math.forms import ClockTime, clock_time, rewrite
from graft.verify.math.grader import MATH_REASONS, verify_math, verify_math_answer_line


def judge(response: str, gold: str) -> str:
    return verify_math(response, gold).category


# ---------------------------------------------------------------------------- several boxes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{1}, \\boxed{2}, \\boxed{3}", ("1", "2", "3")),
        ("$\\boxed{3}$ and $\\boxed{4}$.", ("3", "4")),
        ("\\boxed{2} or \\boxed{-2}", ("2", "-2")),
        ("\\boxed{1}\n\\boxed{2}", ("1", "2")),
        ("first \\boxed{5}, then more reasoning, so \\boxed{7}", ("7",)),
        ("\\boxed{5} and then \\boxed{7", None),
        ("no box", None),
    ],
)
def test_final_boxes(text, expected):
    assert final_boxes(text) == expected


@pytest.mark.parametrize(
    ("response", "gold", "category"),
    [
        # a set split over boxes: any order
        ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "1, 2, 3", "correct"),
        ("\\boxed{3}, \\boxed{1}, \\boxed{2}", "\\{1, 2, 3\\}", "correct"),
        ("\\boxed{1}, \\boxed{2}", "1, 2, 3", "wrong"),
        ("\\boxed{1}, \\boxed{2}, \\boxed{4}", "1, 2, 3", "wrong"),
        ("\\boxed{2} or \\boxed{-2}", "\\pm 2", "correct"),
        ("\\boxed{2} or \\boxed{3}", "\\pm 2", "wrong"),
        # a tuple or a pair split over boxes: in order
        ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "(1, 2, 3)", "correct"),
        ("\\boxed{3}, \\boxed{2}, \\boxed{1}", "(1, 2, 3)", "wrong"),
        ("\\boxed{1}, \\boxed{2}", "(1, 2)", "correct"),
        ("\\boxed{2}, \\boxed{1}", "(1, 2)", "wrong"),
        # the same value twice is one answer
        ("\\boxed{5}, \\boxed{5}", "5", "correct"),
        ("\\boxed{\\frac{1}{2}} and \\boxed{0.5}", "\\frac{1}{2}", "correct"),
        ("\\boxed{6}, \\boxed{6}", "5", "wrong"),
    ],
)
def test_several_boxes_are_one_answer(response, gold, category):
    assert judge(response, gold) == category


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{3}, \\boxed{4}, \\boxed{5}",
        "$\\boxed{4}$ or $\\boxed{5}$",
        "\\boxed{5} and \\boxed{-5}",
        "\\boxed{1}\n\\boxed{5}",
    ],
)
def test_hedge_over_several_boxes_is_wrong_even_when_the_last_is_right(response):
    verdict = verify_math(response, "5")
    assert verdict.category == "wrong"
    assert verdict.reason == "several_boxes"


# ---------------------------------------------------------------------------- gold forms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12:00", ClockTime(12, 0)),
        ("9:05:30", ClockTime(9, 5, 30)),
        ("3:15 p.m.", ClockTime(3, 15, 0, "pm")),
        ("\\text{9:05 am}", ClockTime(9, 5, 0, "am")),
        ("25:00", None),
        ("12:60", None),
        ("1:2", None),
    ],
)
def test_clock_time(text, expected):
    assert clock_time(text) == expected


@pytest.mark.parametrize(
    ("answer", "gold", "category"),
    [
        ("12:00", "12:00", "correct"),
        ("12", "12:00", "wrong"),
        ("11:00", "12:00", "wrong"),
        ("\\text{12:00}", "12:00", "correct"),
        ("3:15 p.m.", "15:15", "correct"),
        ("3:15 a.m.", "15:15", "wrong"),
        ("3:15", "3:15 p.m.", "correct"),
        ("4:15", "3:15 p.m.", "wrong"),
    ],
)
def test_clock_time_golds(answer, gold, category):
    assert judge(f"\\boxed{{{answer}}}", gold) == category


@pytest.mark.parametrize(
    ("answer", "gold", "category"),
    [
        ("1, 2, 4, 8, \\ldots", "1, 2, 4, 8, \\ldots", "correct"),
        ("1, 2, 4, 8, \\dots", "1, 2, 4, 8, \\cdots", "correct"),
        ("\\frac{2}{2}, 2, 4, 8, \\ldots", "1, 2, 4, 8, \\ldots", "correct"),
        ("1, 2, 4, 9, \\ldots", "1, 2, 4, 8, \\ldots", "wrong"),
        ("1, 2, 4, 8", "1, 2, 4, 8, \\ldots", "wrong"),
        ("1, 2, \\ldots, 8", "1, 2, 4, 8, \\ldots", "wrong"),
        ("\\{1, 3, 5, \\ldots\\}", "\\{1, 3, 5, \\ldots\\}", "correct"),
    ],
)
def test_ellipsis_sequences(answer, gold, category):
    assert judge(f"\\boxed{{{answer}}}", gold) == category


@pytest.mark.parametrize(
    ("answer", "gold", "category"),
    [
        ("e", "\\mathrm{e}", "correct"),
        ("e^{2}", "\\mathrm{e}^{2}", "correct"),
        ("\\mathrm{e}^{2}", "e^{2}", "correct"),
        ("2.718", "\\mathrm{e}", "wrong"),
        ("e^{3}", "\\mathrm{e}^{2}", "wrong"),
        ("3 + 4i", "3 + 4\\mathrm{i}", "correct"),
        ("3 - 4i", "3 + 4\\mathrm{i}", "wrong"),
    ],
)
def test_mathrm_constants(answer, gold, category):
    assert judge(f"\\boxed{{{answer}}}", gold) == category


@pytest.mark.parametrize(
    ("response", "gold", "category"),
    [
        ("\\boxed{5.}", "5", "correct"),
        ("\\boxed{6.}", "5", "wrong"),
        ("\\boxed{5}", "5.", "correct"),
        ("\\boxed{\\frac{1}{2}.}", "\\frac{1}{2}", "correct"),
        ("\\boxed{x = 3.}", "3", "correct"),
        ("\\boxed{1.5}", "1.5", "correct"),
        ("\\boxed{1.5.}", "15", "wrong"),
    ],
)
def test_trailing_period_inside_the_box(response, gold, category):
    assert judge(response, gold) == category


# ---------------------------------------------------------------------------- Minerva golds


@pytest.mark.parametrize(
    ("text", "rewritten"),
    [
        ("4.5e33", "(4.5 \\times 10^{33})"),
        ("1e-3", "(1 \\times 10^{-3})"),
        ("-1./3", "-1/3"),
        ("np.arcsin(10/13)", "\\arcsin(10/13)"),
        ("2e", "2e"),  # 2 times Euler's number stays so
        ("e^{3}", "e^{3}"),
    ],
)
def test_rewrites(text, rewritten):
    assert rewrite(text) == rewritten


@pytest.mark.parametrize(
    ("answer", "gold", "category"),
    [
        ("4.5 \\times 10^{33}", "4.5e33", "correct"),
        ("4.5e33", "4.5e33", "correct"),
        ("4.5 \\cdot 10^{33}", "4.5e33", "correct"),
        ("4.6 \\times 10^{33}", "4.5e33", "wrong"),
        ("403.6608", "4.5e33", "wrong"),  # = 4.5 * e * 33, the misreading
        ("4.5e33", "4.5 \\times 10^{33}", "correct"),
        ("4.5e32", "4.5 \\times 10^{33}", "wrong"),
        ("6 \\times 10^{-3}", "6e-3", "correct"),
        ("6 \\times 10^{3}", "6e-3", "wrong"),
        ("\\arcsin(10/13)", "np.arcsin(10/13)", "correct"),
        ("\\arcsin\\left(\\frac{10}{13}\\right)", "np.arcsin(10/13)", "correct"),
        ("\\arccos(10/13)", "np.arcsin(10/13)", "wrong"),
        ("-\\frac{1}{3}", "-1./3", "correct"),
        ("\\frac{1}{3}", "-1./3", "wrong"),
        ("-1.5", "-3./2", "correct"),
        ("E_{1}, E_{2}", "E_{1},E_{2}", "correct"),
        ("E_{1}", "E_{1},E_{2}", "wrong"),
    ],
)
def test_minerva_golds(answer, gold, category):
    assert judge(f"\\boxed{{{answer}}}", gold) == category


# ---------------------------------------------------------------------------- answer line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So 6 * 7 = 42.\nThe final answer is $42$.", "42"),
        ("Answer: x = 3", "x = 3"),
        ("**Answer:** 7", "7"),
        ("The answer is \\(\\frac{1}{2}\\)", "\\frac{1}{2}"),
        ("the answer is 42\nbut wait, let me check", None),  # not the last line
        ("we get 42", None),
        ("", None),
    ],
)
def test_answer_line(text, expected):
    assert answer_line(text) == expected


def test_answer_line_extraction_is_opt_in():
    response = "6 * 7 = 42.\nThe final answer is 42."
    assert verify_math(response, "42").category == "no_answer"
    assert verify_math_answer_line(response, "42").category == "correct"
    assert verify_math_answer_line(response, "43").category == "wrong"
    assert verify_math_answer_line("6 * 7 = 42, I think", "42").category == "no_answer"
    # A box still wins over the answer line, and the line after it takes the box back.
    assert verify_math_answer_line("\\boxed{41}\nThe answer is 42", "42").category == "no_answer"
    assert verify_math_answer_line("\\boxed{41}\nThe answer is 41", "42").category == "wrong"
    assert verify_math_answer_line("\\boxed{5} then \\boxed{42", "42").category == "no_answer"


# ---------------------------------------------------------------------------- reasons


@pytest.mark.parametrize(
    ("verdict", "reason"),
    [
        (verify_math("no box at all", "5"), "no_box"),
        (verify_math("\\boxed{}", "5"), "empty_box"),
        (verify_math("\\boxed{1 +}", "5"), "unparseable_answer"),
        (verify_math("\\boxed{5}", "\\frac{1}{2"), "unparseable_gold"),
        (verify_math("\\boxed{5}", "\\frac{1}{0}"), "unparseable_gold"),
        (verify_math("\\boxed{4}", "5"), "one_answer"),
        (verify_math("\\boxed{4}, \\boxed{5}", "5"), "several_boxes"),
        (verify_math("\\boxed{5}", "5"), ""),
        (verify_math("\\boxed{x}", "5", "Find y."), "one_answer"),
    ],
)
def test_verdict_reasons(verdict, reason):
    assert verdict.reason == reason
    if reason:
        assert reason in MATH_REASONS[verdict.category]


@pytest.mark.parametrize(
    ("verdict", "counted"),
    [
        (Verdict("wrong", "off by one"), "one_answer"),
        (Verdict("error", "ZeroDivisionError: x"), "other"),
        (Verdict("no_answer", "hedge: 4"), "other"),  # a plug-in's detail is never read
        (Verdict("wrong", "hedge: 4", "hedge"), "hedge"),
        (Verdict("wrong", "", "made_up"), "one_answer"),
    ],
)
def test_a_plug_in_verdict_without_a_known_reason_counts_under_its_category(verdict, counted):
    from graft.verify.registry import counted_reason

    assert counted_reason(verdict, MATH_REASONS) == counted


def test_verdict_counts_split_every_category_by_reason():
    from graft.verify.registry import verdict_counts

    verdicts = [
        verify_math("no box", "5"),
        verify_math("no box either", "5"),
        verify_math("\\boxed{1 +}", "5"),
        verify_math("\\boxed{4}, \\boxed{5}", "5"),
        verify_math("\\boxed{5}", "5"),
        Verdict("timeout", ""),
    ]
    counts = verdict_counts(verdicts)
    assert counts["verdict/no_answer"] == 3
    assert counts["verdict/no_answer/no_box"] == 2
    assert counts["verdict/no_answer/unparseable_answer"] == 1
    assert counts["verdict/no_answer/empty_box"] == 0
    assert counts["verdict/wrong/several_boxes"] == 1
    assert counts["verdict/correct"] == 1 and counts["verdict/timeout"] == 1
    for category, reasons in MATH_REASONS.items():
        total = sum(counts[f"verdict/{category}/{r}"] for r in reasons)
        assert total == counts[f"verdict/{category}"]
