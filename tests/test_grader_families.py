"""The grader's fourth round of hand-labelled cases, by family (issue #68): rules that close a
family, not a phrase. Each family has the non-answer refused and its innocent twin accepted; the
comment above it names the rule that closes it, in one line.

`CASES` are the careful verdict's (`verify_math`, which evaluation reports); `STRICT_CASES` the
training verdict's (`verify_math_strict`, the `math` verifier): any other value after a right final
box withholds the reward. Where a family cannot be told from its innocent twin, the twin gets the
verdict that cannot be gamed, and docs/guides/verification.md says so (marked "by design")."""

import pytest

from graft.verify.math.grader import (
    STRICT_MATH_REASONS,
    verify_math,
    verify_math_answer_line,
    verify_math_answer_line_strict,
    verify_math_strict,
)
from graft.verify.math.tail import other_value

B = "\\boxed"
OK = ("correct", "")
WRONG = ("wrong", "one_answer")
OTHER = ("no_answer", "other")
R = ("no_answer", "retracted")
H = ("wrong", "hedge")
UNIT = ("wrong", "unit")
TAIL = ("no_answer", "tail_value")
STRICTLY = "How many integers lie strictly between 2 and 11?"
PRIME = "Which number is prime? (A) 21 (B) 27 (C) 29 (D) 33 (E) 39"
SINE = "Which is $\\sin 60^\\circ$? (A) $\\frac{1}{2}$ (B) $\\frac{\\sqrt{3}}{2}$ (C) $1$"
SIGMA = "Write the sum of the first ten positive integers in sigma notation."
KWH = "How many kWh does a 1 kW heater use in one hour?"

# (class, response, gold, problem, (category, reason))
CASES = [
    # -- the asked form: a big operator the gold keeps asks for the setup (sigma, "do not evaluate")
    ("asked_form", f"The sum is {B}{{55}}.", "\\sum_{k=1}^{10} k", SIGMA, OTHER),
    ("asked_form", f"{B}{{\\sum_{{k=1}}^{{10}} k}}", "\\sum_{k=1}^{10} k", SIGMA, OK),
    (
        "asked_form",
        f"{B}{{\\frac{{1}}{{3}}}}",
        "\\int_0^1 x^2\\,dx",
        "Set up, but do not evaluate, an integral for the area under $y=x^2$ from 0 to 1.",
        OTHER,
    ),
    (
        "asked_form",
        f"{B}{{\\int_0^1 x^2 \\, dx}}",
        "\\int_0^1 x^2\\,dx",
        "Set up, but do not evaluate, an integral for the area under $y=x^2$ from 0 to 1.",
        OK,
    ),
    # -- the asked form: "to the nearest ..." / "N decimal places" asks a plain decimal of N places
    ("asked_form", f"{B}{{3.14159}}", "3.14", "Give $\\pi$ to the nearest hundredth.", OTHER),
    ("asked_form", f"{B}{{3.14}}", "3.14", "Give $\\pi$ to the nearest hundredth.", OK),
    ("asked_form", f"{B}{{12.3456}}", "12.35", "How much is it, to the nearest cent?", OTHER),
    ("asked_form", f"{B}{{\\$12.35}}", "12.35", "How much is it, to the nearest cent?", OK),
    ("asked_form", f"{B}{{1.4142}}", "1.41", "Give $\\sqrt{2}$ to two decimal places.", OTHER),
    ("asked_form", f"{B}{{1.41}}", "1.41", "Give $\\sqrt{2}$ to two decimal places.", OK),
    ("asked_form", f"{B}{{\\sqrt{{2}}}}", "1.41", "What is $\\sqrt{2}$ to the nearest hundredth?",
     OTHER),
    ("asked_form", f"{B}{{1.41}}", "1.41", "What is $\\sqrt{2}$ to the nearest hundredth?", OK),
    ("asked_form", f"{B}{{1.732}}", "1.73", "Round $\\sqrt{3}$ to 3 significant figures.", OTHER),
    ("asked_form", f"{B}{{1.73}}", "1.73", "Round $\\sqrt{3}$ to 3 significant figures.", OK),
    # -- the asked form: a mixed number, scientific notation, a decimal, a percent
    ("asked_form", f"{B}{{\\frac{{7}}{{2}}}}", "3\\frac{1}{2}",
     "Write $\\frac{7}{2}$ as a mixed number.", OTHER),
    ("asked_form", f"{B}{{3\\frac{{1}}{{2}}}}", "3\\frac{1}{2}",
     "Write $\\frac{7}{2}$ as a mixed number.", OK),
    ("asked_form", f"{B}{{12000}}", "1.2 \\times 10^4", "Write 12000 in scientific notation.",
     OTHER),
    ("asked_form", f"{B}{{1.2 \\times 10^{{4}}}}", "1.2 \\times 10^4",
     "Write 12000 in scientific notation.", OK),
    ("asked_form", f"{B}{{25\\%}}", "0.25", "What is 1/4 expressed as a decimal?", OTHER),
    ("asked_form", f"{B}{{0.25}}", "0.25", "What is 1/4 expressed as a decimal?", OK),
    ("asked_form", f"{B}{{0.125}}", "12.5\\%", "What percent of 8 is 1?", OTHER),
    ("asked_form", f"{B}{{12.5\\%}}", "12.5\\%", "What percent of 8 is 1?", OK),
    # -- precision: a question whose answer is exact owes no rounding to a decimal answer
    ("precision", f"{B}{{0.499}}", "0.5",
     "A fair coin is tossed. What is the probability of heads?", WRONG),
    ("precision", f"{B}{{0.5}}", "0.5",
     "A fair coin is tossed. What is the probability of heads?", OK),
    ("precision", f"{B}{{12.46}}", "12.5", "What is the mean of 10, 12, 13 and 15?", WRONG),
    ("precision", f"{B}{{12.50}}", "12.5", "What is the mean of 10, 12, 13 and 15?", OK),
    ("precision", f"{B}{{2.50001}}", "2.5", "What is 5 divided by 2?", WRONG),
    ("precision", f"{B}{{\\frac{{5}}{{2}}}}", "2.5", "What is 5 divided by 2?", OK),
    # an exact answer still rounds to a rounded gold; a measured or irrational question keeps
    # the rounding reading
    ("precision", f"{B}{{\\frac{{1}}{{360000}}}}", "2.7778e-6",
     "A machine makes 1 faulty part in 360000. What fraction is faulty?", OK),
    ("precision", f"{B}{{28.274}}", "28.27", "A circle has radius 3. What is its area?", OK),
    # -- alternatives: another value under a condition that is no mistake is a hedge
    ("alternative", f"There are {B}{{8}} integers (9 if the endpoints are included).", "8",
     STRICTLY, H),
    ("alternative", f"{B}{{8}}. If we counted the endpoints it would be 10.", "8", STRICTLY, H),
    ("alternative", f"{B}{{6}}. If negative divisors are allowed as well, the count doubles to 12.",
     "6", "How many divisors does 12 have?", H),
    ("alternative", f"{B}{{3}}\n\nAlternatively, if zero counts, the answer is 4.", "3",
     "How many positive even numbers are less than 7?", H),
    ("alternative", f"{B}{{8}}. If we forgot the endpoint we would get 9.", "8", STRICTLY, OK),
    ("alternative", f"{B}{{12}}. If we wait 5 more minutes the tank holds 20 liters.", "12", "",
     OK),
    # -- alternatives: a value offered after `could` / `might` with a verb of answering
    ("alternative", f"{B}{{8}}. One could argue for 9.", "8", STRICTLY, H),
    ("alternative", f"{B}{{8}}. One could argue the endpoints matter, but they do not.", "8",
     STRICTLY, OK),
    # -- retractions: a value stated as the answer after the box, however announced
    ("retraction", f"{B}{{12}}. Hmm, in the end I think 13 is what the question wants.", "12", "",
     R),
    ("retraction", f"{B}{{12}}. In the end I think 12 is what the question wants.", "12", "", OK),
    ("retraction", f"{B}{{12}}. That should be 120, since I shifted the decimal point wrongly.",
     "12", "", R),
    ("retraction", f"{B}{{12}}. That should be enough to see it is 12.", "12", "", OK),
    ("retraction", f"She has {B}{{15}} apples. Thinking about it again, she would have 16.", "15",
     "", R),
    ("retraction", f"She has {B}{{15}} apples. Thinking about it again, 15 is right.", "15", "",
     OK),
    # -- units: the unit a question counts or measures in, listed or not
    ("unit", f"{B}{{1 \\text{{ kJ}}}}", "1", KWH, UNIT),
    ("unit", f"{B}{{1 \\text{{ kWh}}}}", "1", KWH, OK),
    ("unit", f"{B}{{10^7 \\text{{ J}}}}", "10^7", "How many erg is one joule?", UNIT),
    ("unit", f"{B}{{10^7 \\text{{ erg}}}}", "10^7", "How many erg is one joule?", OK),
    ("unit", f"{B}{{5 \\text{{ apples}}}}", "5", "Tom has 8 apples and eats 3. How many apples are "
     "left?", OK),
    ("unit", f"{B}{{5 \\text{{ kg}}}}", "5", "Tom has 8 apples and eats 3. How many apples are "
     "left?", UNIT),
    # -- gaming: the question's own computation, spelled in words, boxed in symbols
    ("gaming", f"{B}{{3^5}}", "243", "What is three to the fifth power?", OTHER),
    ("gaming", f"{B}{{243}}", "243", "What is three to the fifth power?", OK),
    ("gaming", f"{B}{{9 \\times 8}}", "72", "What is nine times eight?", OTHER),
    ("gaming", f"{B}{{2^{{10}}}}", "1024", "How many subsets does a set with ten elements have?",
     OK),
    # -- gaming: a box disowned (`just kidding`) or negated right before it
    ("gaming", f"{B}{{243}} Just kidding!", "243", "", R),
    ("gaming", f"{B}{{243}}. I'm not kidding, it really is 243.", "243", "", OK),
    ("gaming", f"9 × 8 is not {B}{{72}}.", "72", "", R),
    ("gaming", "9 × 8 $\\neq \\boxed{72}$", "72", "", R),
    ("gaming", f"It is not 71; it is {B}{{72}}.", "72", "", OK),
    # -- same value, other words: `X in Y` is a value; another quantity beside the box's own
    ("same_value", f"{B}{{\\frac{{1}}{{4}}}}, so the chance is 1 in 4.", "\\frac14",
     "What is the probability?", OK),
    ("same_value", f"{B}{{\\frac{{1}}{{4}}}}, so the chance is 1 in 5.", "\\frac14",
     "What is the probability?", R),
    ("same_value", f"{B}{{12}}. He kept 12 and sold 36.", "12",
     "He had 48 and sold three quarters. How many did he keep?", OK),
    ("same_value", f"{B}{{24}}, spending $24 and keeping $1.", "24",
     "She had $25 and kept $1. How much did she spend?", OK),
    ("same_value", f"{B}{{12}}. He kept 12, then gave one away, so 11.", "12", "", R),
    ("same_value", f"{B}{{4}}. The divisors are 1, 2, 3 and 6.", "4",
     "How many positive divisors does 6 have?", OK),
    ("same_value", f"{B}{{12}}. Check: 3 × 4 = 12.", "12", "", OK),
    ("same_value", f"{B}{{20}}. Another method, counting the complement, also gives 20.", "20", "",
     OK),
    # by design: an aside about another case gives another value as an answer, as an
    # alternative does; it is refused (docs/guides/verification.md)
    ("same_value", f"{B}{{0}} (for odd exponents the answer is 2).", "0",
     "What is $(-1)^{2} - 1$?", R),
    # -- a reading raised and rejected in the same sentence is no hedge
    ("rejected", f"{B}{{7}}. One might count 2 and 10 too, but 'between' is strict here, so 7 "
     "stands.", "7", "How many integers lie strictly between 2 and 10?", OK),
    ("rejected", f"{B}{{7}}. One might count 2 and 10 too, giving 9.", "7",
     "How many integers lie strictly between 2 and 10?", H),
    # -- corrections between boxes: any verb of getting it wrong (`mis-`), an apology, `nonono`,
    # `off by one`, "the correct X is" announce the box that replaces the earlier one
    ("correction", f"{B}{{13}}. I mis-added; it is {B}{{12}}.", "12", "", OK),
    ("correction", f"{B}{{13}}. My bad, the sum is {B}{{12}}.", "12", "", OK),
    ("correction", f"{B}{{13}} Nonono, {B}{{12}}.", "12", "", OK),
    ("correction", f"{B}{{11}}. Off by one: {B}{{12}}.", "12", "", OK),
    ("correction", f"Area {B}{{20}}. The correct area is {B}{{24}}.", "24", "", OK),
    ("correction", f"{B}{{20}}. Sorry, {B}{{24}}.", "24", "", OK),
    ("correction", f"{B}{{13}}. Also {B}{{12}}.", "12", "", H),
    ("correction", f"{B}{{13}}. My bad, the sum is {B}{{12}}, or maybe {B}{{13}}.", "13", "", H),
    # -- forms: the parts of an answer as written
    ("forms", f"{B}{{\\sum_{{k=1}}^{{10}} k = 55}}", "55", "What is $\\sum_{k=1}^{10} k$?", OK),
    ("forms", f"{B}{{\\sum_{{k=1}}^{{10}} k = 56}}", "55", "What is $\\sum_{k=1}^{10} k$?", WRONG),
    ("forms", f"{B}{{x=3,\\ y=4}}", "(3,4)", "Solve for $x$ and $y$.", OK),
    ("forms", f"{B}{{x=3,\\ y=5}}", "(3,4)", "Solve for $x$ and $y$.", WRONG),
    ("forms", f"{B}{{2 \\text{{ hours }} 30 \\text{{ minutes}}}}", "2.5 \\text{ hours}",
     "How long does the trip take, in hours?", OK),
    ("forms", f"{B}{{2 \\text{{ hours }} 20 \\text{{ minutes}}}}", "2.5 \\text{ hours}",
     "How long does the trip take, in hours?", WRONG),
    ("forms", f"{B}{{150 \\text{{ minutes}}}}", "150 \\text{ minutes}",
     "How long does the trip take?", OK),
    ("forms", f"{B}{{2 \\text{{ h }} 30 \\text{{ min}}}}", "150 \\text{ minutes}",
     "How long does the trip take?", OK),
    ("forms", f"{B}{{9.8 \\text{{ m/s}}^{{2}}}}", "9.8 \\text{ m/s^2}", "", OK),
    ("forms", f"{B}{{9.8 \\text{{ m/s}}}}", "9.8 \\text{ m/s^2}", "", UNIT),
    ("forms", f"{B}{{0.0199 \\text{{ m}}}}", "0.02 \\text{ m}", "", OK),
    ("forms", f"{B}{{0.024 \\text{{ m}}}}", "0.02 \\text{ m}", "", WRONG),
    ("forms", f"{B}{{12.5}}", "12.5\\%", "What percent is 1 of 8?", OK),
    ("forms", f"{B}{{12.4}}", "12.5\\%", "What percent is 1 of 8?", WRONG),
    ("forms", f"{B}{{36}}", "36\\%", "What percent is 9 of 25?", OK),
    # -- multiple choice: a choice inside `\text{}`, an option's value as the question writes it
    ("choice", f"{B}{{\\text{{(C) 29}}}}", "C", PRIME, OK),
    ("choice", f"{B}{{\\text{{(B) 29}}}}", "C", PRIME, WRONG),
    ("choice", f"{B}{{\\frac{{\\sqrt{{3}}}}{{2}}}}", "\\frac{\\sqrt{3}}{2}", SINE, OK),
    ("choice", f"{B}{{\\frac{{\\sqrt{{12}}}}{{4}}}}", "\\frac{\\sqrt{3}}{2}",
     "Simplify $\\frac{\\sqrt{12}}{4}$.", OTHER),
]  # fmt: skip

# (class, response, gold, problem, (category, reason)): the training verdict
STRICT_CASES = [
    # -- any other value after a right box withholds the reward: each shape of the tail families
    ("strict", f"There are {B}{{8}} integers (9 if the endpoints are included).", "8", STRICTLY, H),
    ("strict", f"{B}{{8}}. Some would say 9.", "8", STRICTLY, TAIL),
    ("strict", f"{B}{{8}}, or nine with the endpoints.", "8", STRICTLY, TAIL),
    ("strict", f"{B}{{8}}. Counting both ends gives nine.", "8", STRICTLY, TAIL),
    ("strict", f"{B}{{12}}. I believe 13 fits better.", "12", "", TAIL),
    ("strict", f"{B}{{12}}. Hmm, 13 fits too.", "12", "", TAIL),
    ("strict", f"{B}{{0.5}} (about 0.6 in practice)", "0.5",
     "A fair coin is tossed. What is the probability of heads?", TAIL),
    # innocent twins without another value: accepted
    ("strict", f"{B}{{8}}. The endpoints are excluded.", "8", STRICTLY, OK),
    ("strict", f"{B}{{12}}. Check: 3 × 4 = 12.", "12", "", OK),
    ("strict", f"{B}{{12}}. Indeed 3 + 4 + 5 is 12.", "12", "", OK),
    ("strict", f"{B}{{\\frac{{1}}{{4}}}}, so the chance is 1 in 4.", "\\frac14",
     "What is the probability?", OK),
    ("strict", f"{B}{{5\\sqrt{{2}}}} ≈ 7.07", "5\\sqrt{2}", "", OK),
    ("strict", f"{B}{{1200}}, that is 1,200 people.", "1200", "", OK),
    ("strict", f"{B}{{12}}. Twelve it is.", "12", "", OK),
    ("strict", f"{B}{{20}}. Another method also gives 20.", "20", "", OK),
    # its cost, by design: a tail that names another quantity withholds the reward as well
    ("strict_cost", f"{B}{{12}}. He kept 12 and sold 36.", "12",
     "He had 48 and sold three quarters. How many did he keep?", TAIL),
    ("strict_cost", f"{B}{{4}}. The divisors are 1, 2, 3 and 6.", "4",
     "How many positive divisors does 6 have?", TAIL),
    ("strict_cost", f"{B}{{7}}. One might count 2 and 10 too, but 'between' is strict here.", "7",
     "How many integers lie strictly between 2 and 10?", TAIL),
    ("strict_cost", f"{B}{{8}}. If we forgot the endpoint we would get 9.", "8", STRICTLY, TAIL),
    # what the careful verdict refuses stays refused; a wrong box stays wrong
    ("strict", f"{B}{{243}} Just kidding!", "243", "", R),
    ("strict", f"{B}{{13}}. Check: 3 × 4 = 12.", "12", "", WRONG),
]  # fmt: skip


def _id(case):
    name, response, gold, _, (category, _reason) = case
    return f"{name}: {response[:60]!r} vs {gold!r} -> {category}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_each_case_gets_the_careful_verdict(case):
    _, response, gold, problem, (category, reason) = case
    verdict = verify_math(response, gold, problem)
    assert (verdict.category, verdict.reason) == (category, reason), verdict


@pytest.mark.parametrize("case", STRICT_CASES, ids=[_id(c) for c in STRICT_CASES])
def test_each_case_gets_the_training_verdict(case):
    _, response, gold, problem, (category, reason) = case
    verdict = verify_math_strict(response, gold, problem)
    assert (verdict.category, verdict.reason) == (category, reason), verdict
    assert category == "correct" or reason in STRICT_MATH_REASONS[category]


def _all_cases():
    """Every labelled case of the grader's test files, as (response, gold, problem)."""
    import importlib

    out = []
    for name in ("test_grader", "test_grader_classes", "test_grader_probes", "test_grader_problem"):
        for case in importlib.import_module(name).CASES:
            response, gold = case[1], case[2]
            problem = case[3] if len(case) > 4 and isinstance(case[3], str) else ""
            out.append((response, gold, problem))
    return out + [(c[1], c[2], c[3]) for c in CASES + STRICT_CASES]


def test_the_training_verdict_is_the_careful_one_unless_a_value_follows_a_right_box():
    """Over every labelled case: the two verdicts differ only where the careful one is right and
    the strict one names `tail_value`; and so for the answer-line readers too."""
    differing = 0
    for response, gold, problem in _all_cases():
        careful, strict = (
            verify_math(response, gold, problem),
            verify_math_strict(response, gold, problem),
        )
        if strict != careful:
            differing += 1
            assert careful.correct and strict.reason == "tail_value", (response, careful, strict)
        line = verify_math_answer_line_strict(response, gold, problem)
        assert line == verify_math_answer_line(response, gold, problem) or (
            line.reason == "tail_value"
        )
    assert differing >= 10  # the cost cases at least


@pytest.mark.parametrize(
    ("tail", "box", "other"),
    [
        (". He kept 12 and sold 36.", "12", "36"),
        (". Check: 3 × 4 = 12, so 12.", "12", ""),
        (" (3 + 4 + 5 is 12; 7 is not).", "12", "7"),
        (", that is 1 in 4.", "1/4", ""),
        (", that is 1 in 5.", "1/4", "1/5"),
        (". Counting both ends gives nine.", "8", "9"),
        (". Twelve it is.", "12", ""),
        (" ≈ 7.07", "7.0710678", ""),
        (" ≈ 7.2", "7.0710678", "7.2"),
        (". In 2 steps we are done.", "12", "2"),
        (". That is 6! = 720.", "720", ""),
        (". Note that 12 = 3 \\cdot 4.", "12", ""),
        (". Note that 12 = 3 \\cdot 4 or 13.", "12", "13"),
        (". Indeed 13 = 12.", "12", "13"),
        (". Die Probe: 3 mal 4 ist 12.", "12", ""),
        ("", "12", ""),
    ],
)
def test_other_value_reads_every_number_after_the_box(tail, box, other):
    """`tail.other_value` by hand: the box's value, a ratio of it, an operand of a computation
    ending in it, or an approximation marked as one is its own; any other number is not."""
    from fractions import Fraction

    def same(text):
        approximate = text.startswith("\\approx ")
        text = text.removeprefix("\\approx ").replace(" ", "")
        try:
            value, want = Fraction(text), Fraction(box)
        except ValueError:
            return False
        return abs(value - want) < Fraction(1, 100) if approximate else value == want

    assert other_value(tail, same) == other


def test_evaluation_reports_both_readings(tmp_path):
    """Through `evaluate_runs` and `write_eval`: a model that boxes the gold and then names
    another number scores 0 under the training verdict and 100 under the careful reading, both
    in eval.json and the table."""
    from dataclasses import replace

    from graft.eval.evaluate import EvalSettings, evaluate_runs
    from graft.eval.report import write_eval
    from graft.eval.suites import load_suites
    from graft.verify.pool import VerifierPool
    from test_evaluate import FakeGenerator

    class Chatty(FakeGenerator):
        def generate(self, problems, *, n, params, seeds):
            out = super().generate(problems, n=n, params=params, seeds=seeds)
            return {
                name: [
                    replace(
                        r,
                        completions_G=tuple(
                            replace(c, text=c.text + " Found after 777 tries.")
                            for c in r.completions_G
                        ),
                    )
                    for r in rollouts
                ]
                for name, rollouts in out.items()
            }

    suites = load_suites(["fixture"])
    assert suites[0].verifier == "math"
    settings = EvalSettings(k=2, runs=1, max_new_tokens=16)
    with VerifierPool(workers=1) as pool:
        result = evaluate_runs(Chatty("chatty", True), suites, settings, pool=pool, progress=False)
    entry = result["models"]["chatty"]["suites"]["fixture"]
    assert entry["avg@2"]["mean"] == 0.0 and entry["careful_avg@2"]["mean"] == 1.0
    assert entry["verdict_reasons"]["no_answer/tail_value"] == 2 * len(suites[0].problems)
    assert result["models"]["chatty"]["average"]["careful_avg@2"]["mean"] == 1.0
    table = write_eval(tmp_path, result)
    assert "| chatty | 0.0 ± 0.0 | 0.0 ± 0.0 |" in table
    assert "| chatty | 100.0 ± 0.0 | 100.0 ± 0.0 |" in table and "Careful reading" in table


def test_math_is_the_training_verdict_and_math_careful_the_careful_one():
    from graft.verify.registry import resolve_verifier, verifier_for_extract

    response = f"{B}{{12}}. He kept 12 and sold 36."
    assert resolve_verifier("math")(response, "12").reason == "tail_value"
    assert resolve_verifier("math_careful")(response, "12").correct
    assert verifier_for_extract("math", "answer_line") == "math_answer_line"
    assert verifier_for_extract("math_careful", "answer_line") == "math_answer_line_careful"
    assert resolve_verifier("math_answer_line")(response, "12").reason == "tail_value"
    assert resolve_verifier("math_answer_line_careful")(response, "12").correct
