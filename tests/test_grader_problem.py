"""The grader's second round of hand-labelled cases: the exact false positives and negatives an
independent probe found, and the classes they belong to (retractions and hedges in phrasings no
list anticipates, tentative boxes in cut-off responses, boxes that copy the question, units the
question did not ask for; choices, named components, units, rounded golds, Unicode digits), with
the innocent text after a box that must not void it. The problem text reaches the verifier, and
through the pool and the scoring path too."""

import pytest

from graft.types import Completion, Problem, Rollout
from graft.verify.math.grader import MATH_REASONS, verify_final_number, verify_math
from graft.verify.pool import VerifierPool
from graft.verify.scoring import verify_rollouts

B = "\\boxed"
SUM = "Compute $\\sum_{k=1}^{100} k$."
METERS = "A rope is 200 cm long. How long is it in meters?"

# (class, response, gold, problem, category, reason)
CASES = [
    # -- the three false positives of the first set, exactly
    ("hedge", "So $\\boxed{5}$, but it could also be $\\boxed{7}$.", "7", "", "wrong", "hedge"),
    ("retracted", "... \\boxed{5} ... the correct total is 6.", "5", "", "no_answer", "retracted"),
    ("restated", f"{B}{{\\sum_{{k=1}}^{{100}} k}}", "5050", SUM, "no_answer", "other"),
    # -- retractions in phrasings no list anticipates: judged by the value stated after the box
    ("retracted", f"{B}{{5}}. Non, en fait c'est 6.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{5}}. Nein, die Antwort ist 6.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{5}}. Oops, I dropped a term: it is 6.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{5}}. Oops.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{5}} -- strike that, 6.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{5}}\n\nCorrection: 6", "5", "", "no_answer", "retracted"),
    (
        "retracted",
        f"{B}{{5}}. Hmm, recounting the pairs gives 6.",
        "5",
        "",
        "no_answer",
        "retracted",
    ),
    ("retracted", f"{B}{{5}}. That can't be right.", "5", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{12}}. The answer is not 12 but 13.", "12", "", "no_answer", "retracted"),
    ("retracted", f"{B}{{12}}\n\nWait: x = 13.", "12", "", "no_answer", "retracted"),
    (
        "retracted",
        "First, \\boxed{5} apples in the basket, plus one in the bag: the total is 6.",
        "5",
        "",
        "no_answer",
        "retracted",
    ),
    # -- hedges in plain words, tentative boxes, several boxes whatever joins them
    ("hedge", f"{B}{{12}}. Though honestly I am not sure about this.", "12", "", "wrong", "hedge"),
    ("hedge", f"{B}{{12}}, I guess.", "12", "", "wrong", "hedge"),
    ("hedge", f"{B}{{12}}, but I couldn't verify the last step.", "12", "", "wrong", "hedge"),
    ("hedge", f"{B}{{12}}, probably.", "12", "", "wrong", "hedge"),
    (
        "hedge",
        f"Maybe {B}{{4}}? Let's check: 4 * 3 = 12, and 12 + 5 = 17, but we need",
        "4",
        "",
        "wrong",
        "hedge",
    ),
    (
        "hedge",
        f"Try {B}{{4}} and check it: 4 * 3 is 12, and then we add",
        "4",
        "",
        "wrong",
        "hedge",
    ),
    (
        "hedge",
        f"{B}{{3}} is what I got first; the cleaner count is {B}{{4}}.",
        "4",
        "",
        "wrong",
        "hedge",
    ),
    (
        "hedge",
        f"Part one: {B}{{9}}. Then, all things considered, {B}{{10}}.",
        "10",
        "",
        "wrong",
        "hedge",
    ),
    # -- boxes that compute nothing the question did not already state
    (
        "restated",
        f"{B}{{\\frac{{12}}{{18}}}}",
        "\\frac{2}{3}",
        "Simplify $\\frac{12}{18}$.",
        "no_answer",
        "other",
    ),
    (
        "restated",
        f"{B}{{84/126}}",
        "\\frac{2}{3}",
        "Reduce $84/126$ to lowest terms.",
        "no_answer",
        "other",
    ),
    ("restated", f"{B}{{(x-3)(x+2)}}", "(x+2)(x-3)", "Expand $(x+2)(x-3)$.", "no_answer", "other"),
    ("restated", f"{B}{{2^{{10}}}}", "1024", "Evaluate $2^{10}$.", "no_answer", "other"),
    (
        "restated",
        f"{B}{{\\sqrt{{8}}}}",
        "2\\sqrt{2}",
        "Simplify $\\sqrt{8}$.",
        "no_answer",
        "other",
    ),
    (
        "restated",
        f"{B}{{\\dfrac{{6}}{{8}}}}",
        "\\frac34",
        "Write $\\frac{6}{8}$ in lowest terms.",
        "no_answer",
        "other",
    ),
    # -- the answers to the same questions, and options picked from a list
    ("answered", f"{B}{{5050}}", "5050", SUM, "correct", ""),
    (
        "answered",
        f"{B}{{\\frac{{2}}{{3}}}}",
        "\\frac{2}{3}",
        "Simplify $\\frac{12}{18}$.",
        "correct",
        "",
    ),
    ("answered", f"{B}{{x^2 - x - 6}}", "x^2-x-6", "Expand $(x+2)(x-3)$.", "correct", ""),
    ("answered", f"{B}{{2\\sqrt{{2}}}}", "2\\sqrt{2}", "Simplify $\\sqrt{8}$.", "correct", ""),
    ("answered", f"{B}{{1024}}", "1024", "Evaluate $2^{10}$.", "correct", ""),
    (
        "answered",
        f"{B}{{\\frac{{1}}{{2}}}}",
        "\\frac12",
        "Which is larger, $\\frac{1}{2}$ or $\\frac{1}{3}$?",
        "correct",
        "",
    ),
    ("answered", f"{B}{{3}}", "3", "Which is smallest: $3$, $5$ or $8$?", "correct", ""),
    (
        "answered",
        f"{B}{{(4, 3)}}",
        "(4, 3)",
        "The point $(3, 4)$ is reflected over the line $y = x$. Where is its image?",
        "correct",
        "",
    ),
    # -- a unit the question did not ask for
    ("units", f"So the length is {B}{{2 \\text{{ cm}}}}.", "2", METERS, "wrong", "unit"),
    ("units", f"{B}{{2 \\text{{ m}}}}", "2", METERS, "correct", ""),
    ("units", f"{B}{{2 \\text{{ meters}}}}", "2", METERS, "correct", ""),
    (
        "units",
        f"{B}{{30 \\text{{ min}}}}",
        "30",
        "How many seconds does the trip take?",
        "wrong",
        "unit",
    ),
    (
        "units",
        f"{B}{{30 \\text{{ seconds}}}}",
        "30",
        "How many seconds does the trip take?",
        "correct",
        "",
    ),
    ("units", f"{B}{{2}}", "2", METERS, "correct", ""),
    # -- innocent text after a box does not void it
    ("committed", f"{B}{{12}}. A common wrong answer is 11.", "12", "", "correct", ""),
    (
        "committed",
        f"{B}{{12}}. A common mistake is to count the endpoint and get 13.",
        "12",
        "",
        "correct",
        "",
    ),
    (
        "committed",
        f"{B}{{12}}. If we forgot the endpoint we would get 11.",
        "12",
        "",
        "correct",
        "",
    ),
    ("committed", f"{B}{{12}}. A quicker way: $3 \\times 4 = 12$.", "12", "", "correct", ""),
    (
        "committed",
        f"{B}{{12}}. The shortcut: multiply the 3 rows by the 4 columns.",
        "12",
        "",
        "correct",
        "",
    ),
    (
        "committed",
        f"{B}{{12}}. There is no mistake here, and the check above confirms it.",
        "12",
        "",
        "correct",
        "",
    ),
    ("committed", f"{B}{{12}}\n\nNote that 12 = 3 \\cdot 4.", "12", "", "correct", ""),
    ("committed", f"So {B}{{x = 4}}. Substituting 4 back gives 8 = 8.", "4", "", "correct", ""),
    ("committed", f"{B}{{7}} and {B}{{7}} again, to be clear.", "7", "", "correct", ""),
    # -- right answers the grader missed (false negatives), exactly
    ("forms", f"{B}{{\\text{{(B) }} 12}}", "B", "", "correct", ""),
    ("forms", f"{B}{{\\textbf{{(C)}}~27}}", "C", "", "correct", ""),
    ("forms", f"{B}{{\\textbf{{(C)}}~27}}", "D", "", "wrong", "one_answer"),
    ("forms", f"{B}{{x=3, y=4}}", "(3,4)", "", "correct", ""),
    ("forms", f"{B}{{y=4, x=3}}", "(3,4)", "", "correct", ""),
    ("forms", f"{B}{{(x, y) = (3, 4)}}", "(3,4)", "", "correct", ""),
    ("forms", f"{B}{{x = 4, y = 3}}", "(3,4)", "", "wrong", "one_answer"),
    ("forms", f"{B}{{f(x) = 2x+1}}", "2x+1", "", "correct", ""),
    ("forms", f"{B}{{300\\mathrm{{~K}}}}", "300", "", "correct", ""),
    ("forms", f"{B}{{5 m/s}}", "5", "", "correct", ""),
    ("forms", f"{B}{{12\\textnormal{{ miles}}}}", "12", "", "correct", ""),
    ("forms", f"{B}{{7km}}", "7", "", "correct", ""),
    ("forms", f"{B}{{\\frac{{1}}{{360000}}}}", "2.7778e-6", "", "correct", ""),
    ("forms", f"{B}{{\\frac{{1}}{{3}}}}", "0.3333", "", "correct", ""),
    ("forms", f"{B}{{0.33334}}", "0.3333", "", "correct", ""),
    ("forms", f"{B}{{0.34}}", "0.3333", "", "wrong", "one_answer"),
    ("forms", f"{B}{{0.54}}", "0.5", "", "wrong", "one_answer"),
    ("forms", f"{B}{{\\frac{{1}}{{350000}}}}", "2.7778e-6", "", "wrong", "one_answer"),
    (
        "forms",
        f"{B}{{m_p c^2 (\\gamma^2-1) \\sin^2\\theta}}",
        "m_{p} c^{2}\\left(\\gamma^{2}-1\\right) \\sin^{2} \\theta",
        "",
        "correct",
        "",
    ),
    (
        "forms",
        f"{B}{{m_p c^2 \\gamma^2 \\sin^2\\theta}}",
        "m_{p} c^{2}\\left(\\gamma^{2}-1\\right) \\sin^{2} \\theta",
        "",
        "wrong",
        "one_answer",
    ),
    (
        "forms",
        f"{B}{{\\frac{{\\hbar \\omega}}{{2}}}}",
        "\\frac{1}{2} \\hbar \\omega",
        "",
        "correct",
        "",
    ),
    ("forms", f"{B}{{x²+1}}", "x^2+1", "", "correct", ""),
    ("forms", f"{B}{{１２}}", "12", "", "correct", ""),
    ("forms", f"{B}{{10³}}", "1000", "", "correct", ""),
    ("forms", f"{B}{{10²}}", "1000", "", "wrong", "one_answer"),
]


def _label(case):
    cls, response, gold, problem, category, _ = case
    return f"{cls}: {response!r} vs {gold!r} ({problem[:20]!r}) -> {category}"


@pytest.mark.parametrize("case", CASES, ids=[_label(c)[:90] for c in CASES])
def test_each_case_gets_the_careful_graders_verdict_and_reason(case):
    _, response, gold, problem, category, reason = case
    verdict = verify_math(response, gold, problem)
    assert (verdict.category, verdict.reason) == (category, reason), verdict
    if reason:
        assert reason in MATH_REASONS[category]


def test_no_false_positive_and_no_false_negative():
    scored = [(c, verify_math(c[1], c[2], c[3]).category) for c in CASES]
    false_positives = [_label(c) for c, got in scored if c[4] != "correct" and got == "correct"]
    false_negatives = [_label(c) for c, got in scored if c[4] == "correct" and got != "correct"]
    assert (false_positives, false_negatives) == ([], [])
    assert len(CASES) >= 70


def test_a_box_copying_the_question_counts_only_with_the_problem_text():
    """Without the problem text the grader cannot tell a copy from an answer: that is why the
    verifier interface carries it."""
    box = f"{B}{{\\sum_{{k=1}}^{{100}} k}}"
    assert verify_math(box, "5050").category == "correct"
    assert verify_math(box, "5050", SUM).category == "no_answer"


def test_the_arithmetic_verifier_takes_the_problem_and_ignores_it():
    assert verify_final_number("3 + 4 = 7", "7", "3 + 4 =").category == "correct"
    assert verify_final_number("7", "7", "").category == "correct"


def test_the_pool_and_the_scoring_path_pass_the_problem_text():
    problem = Problem(prompt="Compute $\\sum_{k=1}^{100} k$.", gold="5050")
    rollout = Rollout(
        problem=problem,
        policy="p",
        prompt_ids=(1,),
        completions_G=tuple(
            Completion(text=t, token_ids=(1,), logprobs=(0.0,), finish_reason="stop")
            for t in (f"{B}{{\\sum_{{k=1}}^{{100}} k}}", f"{B}{{5050}}")
        ),
    )
    with VerifierPool(workers=1, timeout_s=30) as pool:
        ((copied, answered),) = verify_rollouts(pool, "math", [rollout])
        assert (copied.category, answered.category) == ("no_answer", "correct")
        got = pool.verify(
            [
                ("problem_verifier:sees_problem", "Compute it", "x", "Compute the sum"),
                ("problem_verifier:sees_problem", "Add it", "x", "Compute the sum"),
                ("problem_verifier:two_args", "x", "x", "Compute the sum"),
                ("problem_verifier:two_args", "x", "x"),  # no problem text: still accepted
            ]
        )
    assert [v.category for v in got] == ["correct", "wrong", "correct", "correct"]
    assert got[0].detail == "Compute the sum"
