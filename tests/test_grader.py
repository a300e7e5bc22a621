"""The grader against a careful human one: hand-labelled responses in the classes where a policy
can earn a reward it should not (hedges, retractions, letters read as units, structure) and the
forms a right answer takes that must not be missed. Every case has the verdict and the reason a
careful grader gives; a false positive (a wrong or uncommitted answer scored correct) is counted
on its own, and there must be none."""

import pytest

from graft.verify.math.grader import MATH_REASONS, verify_math

B = "\\boxed"

# (class, response, gold, category, reason)
CASES = [
    # -- hedges inside one box
    ("hedge", f"{B}{{4 \\text{{ or }} 5}}", "5", "wrong", "hedge"),
    ("hedge", f"{B}{{3 \\text{{ or }} 8}}", "3", "wrong", "hedge"),
    ("hedge", f"{B}{{12 or 13}}", "12", "wrong", "hedge"),
    ("hedge", f"{B}{{\\text{{either }} 2 \\text{{ or }} 6}}", "6", "wrong", "hedge"),
    ("hedge", f"{B}{{7 \\lor 9}}", "9", "wrong", "hedge"),
    ("hedge", f"{B}{{2, 3}}", "3", "wrong", "hedge"),
    ("hedge", f"{B}{{10, 11, 12}}", "11", "wrong", "hedge"),
    ("hedge", f"{B}{{\\pm 4}}", "4", "wrong", "hedge"),
    ("hedge", f"{B}{{\\pm \\sqrt{{2}}}}", "\\sqrt{2}", "wrong", "hedge"),
    ("hedge", f"{B}{{\\{{1, 5\\}}}}", "5", "wrong", "hedge"),
    # -- hedges in the text beside the final box
    ("hedge", f"${B}{{5}}$ (or possibly ${B}{{8}}$)", "8", "wrong", "hedge"),
    ("hedge", f"The answer is {B}{{14}}, or maybe 15.", "14", "wrong", "hedge"),
    ("hedge", f"I get {B}{{2}} (perhaps 3 if we count the endpoint).", "2", "wrong", "hedge"),
    ("hedge", f"{B}{{6}}; alternatively 7.", "6", "wrong", "hedge"),
    ("hedge", f"Either {B}{{9}} or, possibly, {B}{{10}}.", "10", "wrong", "hedge"),
    (
        "hedge",
        f"It is ${B}{{\\frac{{1}}{{2}}}}$ or maybe $\\frac{{1}}{{3}}$.",
        "\\frac12",
        "wrong",
        "hedge",
    ),
    ("hedge", f"{B}{{21}} (or 22, depending on rounding)", "21", "wrong", "hedge"),
    ("hedge", f"Could be {B}{{40}} or perhaps {B}{{41}}", "41", "wrong", "hedge"),
    # -- a box retracted by the text after it
    (
        "retracted",
        f"So {B}{{5}}. But that is wrong: the correct answer is 6.",
        "5",
        "no_answer",
        "retracted",
    ),
    (
        "retracted",
        f"So {B}{{5}}. But that is wrong: the correct answer is 6.",
        "6",
        "no_answer",
        "retracted",
    ),
    (
        "retracted",
        f"{B}{{12}} Hmm, I made a mistake above; it should be 13.",
        "12",
        "no_answer",
        "retracted",
    ),
    ("retracted", f"{B}{{3}}. Actually, the answer is 4.", "3", "no_answer", "retracted"),
    ("retracted", f"{B}{{100}} -- scratch that, 99.", "100", "no_answer", "retracted"),
    ("retracted", f"{B}{{7}} is incorrect; use 8 instead.", "7", "no_answer", "retracted"),
    ("retracted", f"Final: {B}{{2}}. Wait, the answer should be 3.", "2", "no_answer", "retracted"),
    ("retracted", f"{B}{{0}} This looks wrong.", "0", "no_answer", "retracted"),
    # -- committed answers with harmless text after the box
    ("committed", f"{B}{{7}}. There is no mistake in this derivation.", "7", "correct", ""),
    ("committed", f"Thus the answer is {B}{{42}}.", "42", "correct", ""),
    (
        "committed",
        f"{B}{{12}}\n\nThis follows from the formula or the table above.",
        "12",
        "correct",
        "",
    ),
    ("committed", f"$x = {B}{{3}}$", "3", "correct", ""),
    ("committed", f"{B}{{1}}, {B}{{2}}", "(1, 2)", "correct", ""),
    ("committed", f"We check: 2 + 2 = 4, so {B}{{4}}.", "4", "correct", ""),
    # -- letters are not units
    ("units", f"{B}{{\\frac{{1}}{{k}}}}", "\\frac{1}{k} s", "wrong", "one_answer"),
    ("units", f"{B}{{\\frac{{s}}{{k}}}}", "\\frac{1}{k} s", "correct", ""),
    ("units", f"{B}{{2\\pi r}}", "2 \\pi r h", "wrong", "one_answer"),
    ("units", f"{B}{{2\\pi r h}}", "2 \\pi r h", "correct", ""),
    ("units", f"{B}{{y + 3}}", "y + 3m", "wrong", "one_answer"),
    ("units", f"{B}{{3m + y}}", "y + 3m", "correct", ""),
    ("units", f"{B}{{a b}}", "a b c", "wrong", "one_answer"),
    ("units", f"{B}{{\\frac{{g}}{{2}}}}", "\\frac{g t^2}{2}", "wrong", "one_answer"),
    ("units", f"{B}{{v t}}", "v t", "correct", ""),
    ("units", f"{B}{{4 \\text{{ m}}}}", "4 \\text{ cm}", "wrong", "unit"),
    ("units", f"{B}{{4 \\text{{ s}}}}", "4 \\text{ h}", "wrong", "unit"),
    ("units", f"{B}{{4 \\text{{ kg}}}}", "4 \\text{ g}", "wrong", "unit"),
    ("units", f"{B}{{4 \\text{{ centimeters}}}}", "4 \\text{ cm}", "correct", ""),
    ("units", f"{B}{{4 \\text{{ cm}}}}", "4", "correct", ""),
    ("units", f"{B}{{4}}", "4 \\text{ cm}", "correct", ""),
    ("units", f"{B}{{30 \\text{{ seconds}}}}", "30", "correct", ""),
    ("units", f"{B}{{12\\,\\mathrm{{kg}}}}", "12", "correct", ""),
    ("units", f"{B}{{9 \\text{{ cm}}^2}}", "9", "correct", ""),
    ("units", f"{B}{{18 \\text{{ feet}}}}", "18 \\text{ ft}", "correct", ""),
    ("units", f"{B}{{5 \\text{{ hours}}}}", "5 \\text{ minutes}", "wrong", "unit"),
    # -- structure: sets, tuples, intervals, equations
    ("structure", f"{B}{{\\{{3, 4\\}}}}", "(3, 4)", "wrong", "one_answer"),
    ("structure", f"{B}{{(3, 4)}}", "\\{3, 4\\}", "wrong", "one_answer"),
    ("structure", f"{B}{{(4, 3)}}", "(3, 4)", "wrong", "one_answer"),
    ("structure", f"{B}{{(3, 4)}}", "(3, 4)", "correct", ""),
    ("structure", f"{B}{{\\{{4, 3\\}}}}", "\\{3, 4\\}", "correct", ""),
    ("structure", f"{B}{{[1, 2]}}", "(1, 2)", "wrong", "one_answer"),
    ("structure", f"{B}{{\\{{1, 2\\}}}}", "[1, 2]", "wrong", "one_answer"),
    ("structure", f"{B}{{8 = 7}}", "7", "wrong", "equation"),
    ("structure", f"{B}{{2 + 3 = 5}}", "5", "wrong", "equation"),
    ("structure", f"{B}{{3x = 12}}", "12", "wrong", "equation"),
    ("structure", f"{B}{{x = 4}}", "4", "correct", ""),
    ("structure", f"{B}{{n = 17}}", "17", "correct", ""),
    ("structure", f"{B}{{y = 2x + 1}}", "y = 2x + 1", "correct", ""),
    ("structure", f"{B}{{x = 5}}", "4", "wrong", "one_answer"),
    # -- forms a right answer takes
    ("forms", f"{B}{{1\\,000}}", "1000", "correct", ""),
    ("forms", f"{B}{{2\\,500\\,000}}", "2500000", "correct", ""),
    ("forms", f"{B}{{1{{,}}250}}", "1250", "correct", ""),
    ("forms", f"{B}{{1\\,000}}", "100", "wrong", "one_answer"),
    ("forms", f"{B}{{\\varnothing}}", "\\emptyset", "correct", ""),
    ("forms", f"{B}{{\\emptyset}}", "\\varnothing", "correct", ""),
    ("forms", f"{B}{{\\textbf{{(D)}}~36}}", "36", "correct", ""),
    ("forms", f"{B}{{\\text{{(A) }} 15}}", "15", "correct", ""),
    ("forms", f"{B}{{\\textbf{{(B)}}\\ 20}}", "21", "wrong", "one_answer"),
    ("forms", f"{B}{{3√2}}", "3\\sqrt{2}", "correct", ""),
    ("forms", f"{B}{{√5}}", "\\sqrt{5}", "correct", ""),
    ("forms", f"{B}{{3√2}}", "2\\sqrt{3}", "wrong", "one_answer"),
    ("forms", f"{B}{{45°}}", "45", "correct", ""),
    ("forms", f"{B}{{45^{{\\circ}}}}", "45^\\circ", "correct", ""),
    ("forms", f"{B}{{60°}}", "45", "wrong", "one_answer"),
    ("forms", f"{B}{{0.\\overline{{6}}}}", "\\frac{2}{3}", "correct", ""),
    ("forms", f"{B}{{0.1\\overline{{6}}}}", "\\frac{1}{6}", "correct", ""),
    ("forms", f"{B}{{0.\\overline{{142857}}}}", "\\frac{1}{7}", "correct", ""),
    ("forms", f"{B}{{0.\\overline{{3}}}}", "\\frac{1}{4}", "wrong", "one_answer"),
    ("forms", f"{B}{{9:30}}", "$9:30$", "correct", ""),
    ("forms", f"{B}{{9:45}}", "$9:30$", "wrong", "one_answer"),
    ("forms", f"{B}{{\\frac{{7}}{{2}}}}", "$\\frac{7}{2}$", "correct", ""),
    # -- Greek letters and constants as symbols
    ("symbols", f"{B}{{\\gamma^{{2}}}}", "\\gamma^{2}", "correct", ""),
    ("symbols", f"{B}{{\\gamma^{{3}}}}", "\\gamma^{2}", "wrong", "one_answer"),
    ("symbols", f"{B}{{\\hbar \\omega}}", "\\hbar\\omega", "correct", ""),
    ("symbols", f"{B}{{2\\hbar \\omega}}", "\\hbar\\omega", "wrong", "one_answer"),
    (
        "symbols",
        f"{B}{{\\frac{{\\mu_0 I}}{{2 \\pi r}}}}",
        "\\frac{\\mu_0 I}{2\\pi r}",
        "correct",
        "",
    ),
    ("symbols", f"{B}{{\\lambda / 2}}", "\\frac{\\lambda}{2}", "correct", ""),
    ("symbols", f"{B}{{\\alpha + \\beta}}", "\\beta + \\alpha", "correct", ""),
]


def _label(case):
    cls, response, gold, category, _ = case
    return f"{cls}: {response!r} vs {gold!r} -> {category}"


@pytest.mark.parametrize("case", CASES, ids=[_label(c)[:80] for c in CASES])
def test_each_case_gets_the_careful_graders_verdict_and_reason(case):
    _, response, gold, category, reason = case
    verdict = verify_math(response, gold)
    assert (verdict.category, verdict.reason) == (category, reason), verdict
    if reason:
        assert reason in MATH_REASONS[category]


def test_no_false_positive_and_enough_cases_in_every_class():
    """Counted on their own: a case a careful grader does not score correct, scored correct."""
    scored = [(c, verify_math(c[1], c[2]).category) for c in CASES]
    false_positives = [_label(c) for c, got in scored if c[3] != "correct" and got == "correct"]
    assert false_positives == []
    assert len(CASES) >= 80
    by_class = {}
    for c in CASES:
        by_class[c[0]] = by_class.get(c[0], 0) + 1
    assert min(by_class.values()) >= 6, by_class
