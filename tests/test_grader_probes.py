"""The grader's fourth round, by class of wrong verdict an independent probe reported: a box that
restates a big operator instead of its value, a second value offered in the last sentence, a
retraction in running text, a form the question asks for and the answer ignores (false
positives); a correction toward the gold between two boxes, "no no no" rejections, innocent
approximations and remarks on an intermediate step, units in scientific notation and rounded
short golds, and golds spelled in Minerva's style (false negatives). Each class has both
directions: the non-answer refused and its innocent twin accepted."""

import pytest

from graft.verify.math.grader import verify_math
from test_grader_classes import _label, check_case

B = "\\boxed"
R = ("no_answer", "retracted")
H = ("wrong", "hedge")
OK = ("correct", "")
WRONG = ("wrong", "one_answer")
OTHER = ("no_answer", "other")
TEN = "Find the sum of the first ten positive integers."
LINEUP = "In how many orders can five runners finish a race?"
AREA = "What is the area under the line $y = 2x$ between $x = 0$ and $x = 1$?"
LIMIT = "What does $\\frac{n+1}{n}$ approach as $n$ grows without bound?"
THIRD = "Write $\\frac{1}{3}$ as a repeating decimal."
SEVEN = "Express $\\frac{7}{16}$ as a decimal."
HALF = "A coin is tossed twice. What is the probability of exactly one head? Express your answer "
HALF += "as a common fraction."

# (class, response, gold, problem, (category, reason))
CASES = [
    # 1. a box holding an unevaluated big operator whose value is the gold
    ("operator", f"The total is {B}{{\\sum_{{j=1}}^{{10}} j}}.", "55", TEN, OTHER),
    ("operator", f"{B}{{\\prod_{{i=1}}^{{5}} i}}", "120", LINEUP, OTHER),
    ("operator", f"{B}{{\\int_0^1 2x \\, dx}}", "1", AREA, OTHER),
    ("operator", f"So {B}{{\\lim_{{n \\to \\infty}} \\frac{{n+1}}{{n}}}}.", "1", LIMIT, OTHER),
    ("operator", f"$\\sum_{{j=1}}^{{10}} j = {B}{{55}}$", "55", TEN, OK),
    ("operator", f"Multiplying, $\\prod_{{i=1}}^{{5}} i$ is {B}{{120}}.", "120", LINEUP, OK),
    ("operator", f"{B}{{\\int_0^1 e^{{-x^2}} \\, dx}}", "\\int_0^1 e^{-x^2} \\, dx", "", OK),
    # 2. a second value offered only in the last sentence, unboxed, after the box
    ("second_value", f"{B}{{8}}. Under the other convention the count would be 9.", "8", "", H),
    ("second_value", f"{B}{{8}}. It could equally be 9 if zero counts.", "8", "", H),
    ("second_value", f"{B}{{8}}. With a different reading of the rule one gets 9.", "8", "", H),
    ("second_value", f"{B}{{8}}. Under the usual convention this is exactly 8.", "8", "", OK),
    ("second_value", f"{B}{{8}}. If the corner were counted twice, it could be 9.", "8", "", OK),
    ("second_value", f"{B}{{8}}. A different rule would not change the count.", "8", "", OK),
    # 3. a retraction that replaces the value in running text, with no new box
    ("running_text", f"{B}{{12}}. Actually the answer is 11 because the corner is shared.", "12",
     "", R),
    ("running_text", f"{B}{{12}}. On second thought, it's 11 since the corner is shared.", "12",
     "", R),
    ("running_text", f"{B}{{12}}. So the real answer is 11, as one corner is shared.", "12", "", R),
    ("running_text", f"{B}{{12}}. I recounted and got 11 in the end.", "12", "", R),
    ("running_text", f"{B}{{12}}. The first count was 11, and adding the corner gives 12.", "12",
     "", OK),
    ("running_text", f"{B}{{12}}. Actually, $3 \\times 4 = 12$ confirms it.", "12", "", OK),
    ("running_text", f"{B}{{12}}. The answer is 12, since 11 misses the corner.", "12", "", OK),
    # 4. a form the question asks for, ignored by the answer
    ("asked_form", f"{B}{{\\frac{{1}}{{3}}}}", "0.\\overline{3}", THIRD, OTHER),
    ("asked_form", f"{B}{{\\frac{{7}}{{16}}}}", "0.4375", SEVEN, OTHER),
    ("asked_form", f"{B}{{0.5}}", "\\frac12", HALF, OTHER),
    ("asked_form", f"{B}{{0.\\overline{{3}}}}", "0.\\overline{3}", THIRD, OK),
    ("asked_form", f"{B}{{0.4375}}", "0.4375", SEVEN, OK),
    ("asked_form", f"{B}{{\\frac{{1}}{{2}}}}", "\\frac12", HALF, OK),
    ("asked_form", f"{B}{{\\frac{{7}}{{16}}}}", "\\frac{7}{16}", "What is $7 \\div 16$?", OK),
    # 5. a correction toward the gold between two boxes, the final box the gold
    ("correction", f"So {B}{{11}}. Hmm, I forgot the shared corner; adding it gives {B}{{12}}.",
     "12", "", OK),
    ("correction", f"That gives {B}{{11}}. Recounting carefully gives {B}{{12}}.", "12", "", OK),
    ("correction", f"That gives {B}{{11}}. Fixing the arithmetic slip, we get {B}{{12}}.", "12",
     "", OK),
    ("correction", f"Either {B}{{11}} or, counting the corner, {B}{{12}}.", "12", "", H),
    ("correction", f"For part one {B}{{11}}; for the whole, {B}{{12}}.", "12", "", H),
    # 6. "no no no" rejections between two boxes, the last committed
    ("rejection", f"So {B}{{11}}. No no no, the corner is shared, so {B}{{12}}.", "12", "", OK),
    ("rejection", f"So {B}{{11}}. NO NO. {B}{{12}}.", "12", "", OK),
    ("rejection", f"{B}{{12}}. No no no, it's 11.", "12", "", R),
    ("rejection", f"{B}{{12}}. Nope nope.", "12", "", R),
    ("rejection", f"So {B}{{11}}, and also {B}{{12}}.", "12", "", H),
    # 7. innocent tails: a truncated approximation, a remark on an intermediate step
    ("innocent_tail", f"{B}{{\\frac{{2}}{{3}}}} ≈ 0.666", "\\frac23", "", OK),
    ("innocent_tail", f"{B}{{\\pi}}, about 3.1415.", "\\pi", "", OK),
    ("innocent_tail", f"{B}{{12}}. The wrong step was the second one, fixed above.", "12", "",
     OK),
    ("innocent_tail", f"{B}{{12}}. My initial guess of 10 was wrong.", "12", "", OK),
    ("innocent_tail", f"{B}{{12}}. My mistake in the first attempt was dropping the corner.",
     "12", "", OK),
    ("innocent_tail", f"{B}{{\\frac{{2}}{{3}}}} ≈ 0.5", "\\frac23", "", R),
    ("innocent_tail", f"{B}{{12}}. The step that produced this was wrong.", "12", "", R),
    ("innocent_tail", f"{B}{{12}}. My final answer above is wrong.", "12", "", R),
    # 8. a value with a unit, in scientific notation, within the gold's rounding
    ("sci_unit", f"{B}{{2.78 \\times 10^{{-6}}\\ \\text{{kWh}}}}", "2.7778e-6", "", OK),
    ("sci_unit", f"{B}{{4.5 \\times 10^{{33}} \\text{{ erg}}}}", "4.5e33", "", OK),
    ("sci_unit", f"{B}{{0.0199 \\mathrm{{~m}}}}", "0.02", "", OK),
    ("sci_unit", f"{B}{{0.0201}}", "0.02", "", OK),
    ("sci_unit", f"{B}{{2.70 \\times 10^{{-6}}\\ \\text{{kWh}}}}", "2.7778e-6", "", WRONG),
    ("sci_unit", f"{B}{{0.024 \\mathrm{{~m}}}}", "0.02", "", WRONG),
    ("sci_unit", f"{B}{{0.54}}", "0.5", "", WRONG),
    ("sci_unit", f"{B}{{0.543}}", "0.5", "", WRONG),
    ("sci_unit", f"{B}{{5 \\text{{ kWh}}}}", "5", "What is the energy in kJ?", ("wrong", "unit")),
    # 9. golds in Minerva's style: spacing, `\left( \right)` products
    ("gold_style", f"{B}{{6}}", "\\left(2\\right)\\left(3\\right)", "", OK),
    ("gold_style", f"{B}{{5}}", "\\left(2\\right)\\left(3\\right)", "", WRONG),
    ("gold_style", f"{B}{{1}}", "2\\left(\\frac{1}{2}\\right)", "", OK),
    ("gold_style", f"{B}{{(2)(3)}}", "5", "", WRONG),
    ("gold_style", f"{B}{{\\frac{{\\pi}}{{4}}}}", "\\frac\\pi4", "", OK),
    ("gold_style", f"{B}{{7.5 \\text{{ km/s}}}}", "7.5 \\mathrm {~km} / \\mathrm{s}", "", OK),
    ("gold_style", f"{B}{{7.5 \\text{{ m/s}}}}", "7.5 \\mathrm {~km} / \\mathrm{s}", "",
     ("wrong", "unit")),
    ("gold_style", f"{B}{{\\text{{red}}}}", "\\operatorname {red}", "", OK),
    ("gold_style", f"{B}{{\\text{{blue}}}}", "\\operatorname {red}", "", WRONG),
    ("gold_style", f"{B}{{\\text{{red}}}}", "\\text {\\emph {red}}", "", OK),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[_label(c)[:90] for c in CASES])
def test_each_probe_case_gets_its_verdict_and_reason(case):
    check_case(case)


def test_each_probe_class_has_both_directions():
    by_class: dict[str, list[int]] = {}
    for c in CASES:
        counts = by_class.setdefault(c[0], [0, 0])
        counts[c[4][0] == "correct"] += 1
    assert len(by_class) == 9
    assert all(wrong >= 1 and right >= 1 for wrong, right in by_class.values()), by_class


def test_no_probe_gold_is_unparseable():
    """A gold spaced or parenthesized in Minerva's style is never `error/unparseable_gold`."""
    for _, _, gold, problem, _ in CASES:
        assert verify_math("", gold, problem).reason != "unparseable_gold", gold
