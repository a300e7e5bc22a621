"""The grader's third round of hand-labelled cases, by class (issue #49): retractions after the box
in other languages, set against the box, or left unresolved ("let me redo this"); another value
offered as possible; boxes that rewrite what the question asks to evaluate; a choice letter whose
value is another option's. And right answers the grader missed: a box superseded by a later
final one, values and letters the question itself states, lists joined by "or", units written
without a space, rounded decimals, an equation naming the asked quantity, a value with its
option letter, Unicode digit styles, and innocent text after the box. Each class has cases that
must stay as they are beside the ones that change."""

import pytest

from graft.verify.math.grader import MATH_REASONS, verify_math

B = "\\boxed"
R = ("no_answer", "retracted")
H = ("wrong", "hedge")
OK = ("correct", "")
WRONG = ("wrong", "one_answer")
OTHER = ("no_answer", "other")
PRIME = "Which number is prime? (A) 21 (B) 27 (C) 29 (D) 33 (E) 39"
AMC = (
    "How many edges does a cube have?\n\n$\\textbf{(A)}\\ 8 \\qquad \\textbf{(B)}\\ 12 \\qquad "
    "\\textbf{(C)}\\ 16 \\qquad \\textbf{(D)}\\ 24 \\qquad \\textbf{(E)}\\ 32$"
)
LINES = "What is 4 cubed, halved?\nA. 16\nB. 24\nC. 32\nD. 48"
ROOTS = "Let $a$ and $b$ be the roots of $x^2 - 7x + 10 = 0$. Find $a + b$."

# (class, response, gold, problem, (category, reason))
CASES = [
    # -- retractions after the box in other languages
    ("retract_lang", f"{B}{{12}}. Non, attendez, c'est faux.", "12", "", R),
    ("retract_lang", f"{B}{{12}}\n\nNein, das stimmt nicht.", "12", "", R),
    ("retract_lang", f"{B}{{12}}. Espera, eso está mal.", "12", "", R),
    ("retract_lang", f"{B}{{12}}\n\n不对，重新算一下。", "12", "", R),
    ("retract_lang", f"{B}{{12}}。等等，我算错了。", "12", "", R),
    ("retract_lang", f"{B}{{7}}. Aspetta, ho sbagliato il conto.", "7", "", R),
    ("retract_lang", f"{B}{{7}}. Oups, j'ai fait une erreur.", "7", "", R),
    ("retract_lang", f"{B}{{7}}\n\nいや、違う。やり直します。", "7", "", R),
    ("retract_lang", f"{B}{{7}}. Нет, это неверно.", "7", "", R),
    ("retract_lang", f"{B}{{\\frac{{3}}{{4}}}}. Isso está errado.", "\\frac34", "", R),
    ("retract_lang", f"{B}{{12}}. C'est la bonne réponse.", "12", "", OK),
    ("retract_lang", f"{B}{{12}}. Es correcto, no hay ningún error.", "12", "", OK),
    ("retract_lang", f"{B}{{12}}。答案是12。", "12", "", OK),
    ("retract_lang", f"{B}{{12}}. Die Probe bestätigt es: 3 mal 4 ist 12.", "12", "", OK),
    ("retract_lang", f"{B}{{12}}. Ce résultat est juste.", "12", "", OK),
    ("retract_lang", f"{B}{{12}}. Mince, je me suis trompé.", "12", "", R),
    ("retract_lang", f"{B}{{12}}. Ups, da habe ich mich verrechnet.", "12", "", R),
    ("retract_lang", f"{B}{{12}}\n\n上面的答案是错的。", "12", "", R),
    ("retract_lang", f"{B}{{12}}. Ich bin mir nicht sicher.", "12", "", H),
    ("retract_lang", f"{B}{{12}}。我不确定。", "12", "", H),
    ("retract_lang", f"{B}{{12}}. Peut-être 13.", "12", "", H),
    ("retract_lang", f"{B}{{12}}。没错，就是12。", "12", "", OK),
    # -- another value set against the box
    (
        "set_against",
        f"{B}{{10}}. But this contradicts the second equation, so the answer must be 12, "
        "not the value boxed above.",
        "10",
        "",
        R,
    ),
    (
        "set_against",
        f"{B}{{10}}\n\nChecking again, the total is 12 rather than the boxed value.",
        "10",
        "",
        R,
    ),
    ("set_against", f"{B}{{45}}. The angle is really 135, not what I boxed.", "45", "", R),
    ("set_against", f"{B}{{45}}. The boxed value is inconsistent with the figure.", "45", "", R),
    ("set_against", f"{B}{{2}}. On reflection it is 3 and not 2.", "2", "", R),
    ("set_against", f"{B}{{12}}. The answer is 12, not 10 as one might expect.", "12", "", OK),
    (
        "set_against",
        f"{B}{{12}}. The count is 12 rather than 10 because the corner is shared.",
        "12",
        "",
        OK,
    ),
    ("set_against", f"{B}{{7}}. If x were 8, we would reach a contradiction.", "7", "", OK),
    ("set_against", f"{B}{{12}}. So 14 is the right count, contrary to the box.", "12", "", R),
    ("set_against", f"{B}{{45}}. But 45 contradicts the second condition.", "45", "", R),
    ("set_against", f"{B}{{3}}. Any larger value leads to a contradiction.", "3", "", OK),
    (
        "set_against",
        f"{B}{{3}}. Any other value contradicts the first equation, so this one is unique.",
        "3",
        "",
        OK,
    ),
    # -- gone back on, with nothing after it
    ("redo", f"{B}{{12}}\n\nHmm, I need to start over.", "12", "", R),
    ("redo", f"{B}{{12}}. Let me redo this.", "12", "", R),
    ("redo", f"{B}{{12}}. Wait.", "12", "", R),
    ("redo", f"{B}{{12}}\n\nActually, let me reconsider the problem from scratch.", "12", "", R),
    ("redo", f"{B}{{12}}. Hold on, the second term needs to be recomputed.", "12", "", R),
    ("redo", f"{B}{{12}}\n\nLet me try this again.", "12", "", R),
    ("redo", f"{B}{{-4}}. Wait, let me redo this: 3 \\times 5 = 15.", "-4", "", R),
    ("redo", f"{B}{{12}}. Warte, ich muss das noch einmal rechnen.", "12", "", R),
    ("redo", f"{B}{{12}}. Wait, let me double-check: $3 \\times 4 = 12$. Yes.", "12", "", OK),
    (
        "redo",
        f"{B}{{12}}\n\nLet me recompute to be sure: $3 \\cdot 4 = 12$, so the answer stands.",
        "12",
        "",
        OK,
    ),
    ("redo", f"{B}{{12}}. No need to start over: the count is right.", "12", "", OK),
    ("redo", f"{B}{{12}}. If we wait 5 more minutes the tank holds 20 liters.", "12", "", OK),
    ("redo", f"{B}{{12}}\n\nCorrection: the last step should read 4 × 3.25 = 13.", "12", "", R),
    ("redo", f"{B}{{12}}\n\nOh wait.", "12", "", R),
    ("redo", f"{B}{{12}}. Actually no.", "12", "", R),
    ("redo", f"{B}{{12}}. We wait for the bus for 12 minutes in total.", "12", "", OK),
    ("redo", f"{B}{{12}}. Reconsidering the cases gives the same total.", "12", "", OK),
    ("redo", f"{B}{{12}}. Hmm, let me double check. Yes, that's right.", "12", "", OK),
    # -- another value offered as possible
    ("possible", f"{B}{{8}}. Though it could be 9.", "8", "", H),
    ("possible", f"{B}{{8}}\n\nIt might also be 9.", "8", "", H),
    ("possible", f"{B}{{8}}. The answer may be 9 as well.", "8", "", H),
    ("possible", f"{B}{{8}}. Ça pourrait être 9.", "8", "", H),
    ("possible", f"{B}{{8}}。也可能是9。", "8", "", H),
    ("possible", f"{B}{{8}}. If the corner were counted twice, it could be 9.", "8", "", OK),
    ("possible", f"{B}{{8}}. It could not be 9, since 9 is odd.", "8", "", OK),
    ("possible", f"{B}{{8}}. A careless count could give 9.", "8", "", OK),
    (
        "possible",
        f"{B}{{12}}. Another layout could give 13 seats, but it breaks the rule.",
        "12",
        "",
        OK,
    ),
    # -- rewrites of what the question asks to evaluate
    ("rewrite", f"{B}{{\\sqrt{{25 \\cdot 2}}}}", "5\\sqrt{2}", "Simplify $\\sqrt{50}$.", OTHER),
    ("rewrite", f"{B}{{\\log_2 64}}", "6", "Evaluate log₂ 64.", OTHER),
    ("rewrite", f"{B}{{\\log_{{2}}(64)}}", "6", "Evaluate $\\log_2 64$.", OTHER),
    (
        "rewrite",
        f"{B}{{\\frac{{10}}{{12}}}}",
        "\\frac56",
        "A bag holds 10 red and 2 blue marbles. What is the probability of drawing a red one? "
        "Give it in lowest terms.",
        OTHER,
    ),
    ("rewrite", f"{B}{{15 \\cdot 4}}", "60", "Calculate $15 \\times 4$.", OTHER),
    ("rewrite", f"{B}{{\\sqrt{{36}}\\sqrt{{2}}}}", "6\\sqrt{2}", "Simplify $\\sqrt{72}$.", OTHER),
    ("rewrite", f"{B}{{\\frac{{6 \\cdot 5}}{{2}}}}", "15", "Evaluate $\\dbinom{6}{2}$.", OTHER),
    ("rewrite", f"{B}{{\\log_3 3^4}}", "4", "Find the value of $\\log_3 81$.", OTHER),
    ("rewrite", f"{B}{{\\frac{{9}}{{12}}}}", "\\frac34", "Reduce $\\frac{18}{24}$.", OTHER),
    ("rewrite", f"{B}{{5 \\cdot 4 \\cdot 3 \\cdot 2 \\cdot 1}}", "120", "Compute $5!$.", OTHER),
    ("rewrite", f"{B}{{2^6}}", "64", "Simplify $(2^3)^2$.", OTHER),
    ("rewrite", f"{B}{{\\sqrt{{2 \\cdot 25}}}}", "5\\sqrt{2}", "化简 $\\sqrt{50}$。", OTHER),
    ("rewrite", f"{B}{{5\\sqrt{{2}}}}", "5\\sqrt{2}", "Simplify $\\sqrt{50}$.", OK),
    ("rewrite", f"{B}{{6}}", "6", "Evaluate log₂ 64.", OK),
    ("rewrite", f"{B}{{2^{{64}}}}", "2^{64}", "How many subsets has a 64-element set?", OK),
    (
        "rewrite",
        f"{B}{{\\frac{{1}}{{3}}}}",
        "\\frac13",
        "Express $0.\\overline{3}$ as a fraction.",
        OK,
    ),
    ("rewrite", f"{B}{{\\log_2 15}}", "\\log_2 15", "Simplify $\\log_2 3 + \\log_2 5$.", OK),
    ("rewrite", f"{B}{{\\frac{{3x}}{{4}}}}", "\\frac{3x}{4}", "Simplify $\\frac{6x}{8}$.", OK),
    ("rewrite", f"{B}{{3 \\times 10^{{5}}}}", "300000", "Compute $600 \\cdot 500$.", OK),
    ("rewrite", f"{B}{{\\frac{{10}}{{12}}}}", "\\frac56", "What fraction of 12 is 10?", OK),
    # -- a choice letter whose value is another option's
    ("choice", f"{B}{{\\text{{(C) }} 27}}", "C", PRIME, WRONG),
    ("choice", f"{B}{{(C)\\ 33}}", "C", PRIME, WRONG),
    ("choice", f"{B}{{\\textbf{{(B)}}~16}}", "B", AMC, WRONG),
    ("choice", f"{B}{{\\text{{(D) }} 29}}", "29", PRIME, WRONG),
    ("choice", f"{B}{{24 \\text{{ (C)}}}}", "C", LINES, WRONG),
    ("choice", f"{B}{{\\text{{(C) }} 29}}", "C", PRIME, OK),
    ("choice", f"{B}{{\\textbf{{(B)}}~12}}", "B", AMC, OK),
    ("choice", f"{B}{{\\text{{(C) }} 29}}", "29", PRIME, OK),
    ("choice", f"{B}{{29}}", "C", PRIME, OK),
    ("choice", f"{B}{{27}}", "C", PRIME, WRONG),
    ("choice", f"{B}{{B: 12}}", "B", AMC, OK),
    ("choice", f"{B}{{B: 16}}", "B", AMC, WRONG),
    # -- a box superseded by a later final one
    (
        "superseded",
        f"So the answer is {B}{{5}}. Wait, I forgot the case $n = 0$. "
        f"Adding it, the count is {B}{{6}}.",
        "6",
        "",
        OK,
    ),
    (
        "superseded",
        f"{B}{{14}}\n\nNo, that's wrong: $3 \\times 5 = 15$, so the answer is {B}{{15}}.",
        "15",
        "",
        OK,
    ),
    (
        "superseded",
        f"We get {B}{{7}}. Hmm, plugging back in gives 9 on the left. Actually 8 works. "
        f"So the answer is {B}{{8}}.",
        "8",
        "",
        OK,
    ),
    (
        "superseded",
        f"<think>Maybe {B}{{3}}? Check: no, 4 fits.</think>\nThe answer is {B}{{4}}.",
        "4",
        "",
        OK,
    ),
    (
        "superseded",
        f"Step 1 gives {B}{{12}}.\n\nThe remaining terms add one more.\n\n"
        f"**Final Answer**\n\\[\n{B}{{13}}\n\\]",
        "13",
        "",
        OK,
    ),
    ("superseded", f"{B}{{5}}. Espera, me equivoqué. La respuesta es {B}{{6}}.", "6", "", OK),
    ("superseded", f"{B}{{5}}。不对，重新计算：答案是 {B}{{6}}。", "6", "", OK),
    (
        "superseded",
        f"Area: {B}{{10}}\n\nWait, the question asks for the perimeter. "
        f"The perimeter is {B}{{14}}.",
        "14",
        "",
        OK,
    ),
    (
        "superseded",
        f"<think>\nSo $x = {B}{{2}}$.\nPlugging in fails.\n</think>\n\n{B}{{3}}",
        "3",
        "",
        OK,
    ),
    (
        "superseded",
        f"So the answer is {B}{{5}}. Wait, I forgot the case $n = 0$. "
        f"Adding it, the count is {B}{{6}}.",
        "5",
        "",
        WRONG,
    ),
    ("superseded", f"It is {B}{{5}}, though it could also be {B}{{6}}.", "6", "", H),
    (
        "superseded",
        f"Possible answers: {B}{{5}} and, depending on convention, {B}{{6}}.",
        "6",
        "",
        H,
    ),
    ("superseded", f"{B}{{5}} if we count the endpoints; otherwise {B}{{6}}.", "6", "", H),
    (
        "superseded",
        f"<think>Try {B}{{4}}.</think> The answer is {B}{{5}} or maybe {B}{{6}}.",
        "6",
        "",
        H,
    ),
    ("superseded", f"One way gives {B}{{5}}; another way gives {B}{{6}}.", "6", "", H),
    (
        "superseded",
        f"If $n$ is even the answer is {B}{{5}}; if odd, the answer is {B}{{6}}.",
        "6",
        "",
        H,
    ),
    (
        "superseded",
        f"The answer is {B}{{5}}. Actually, another valid answer is {B}{{6}}.",
        "6",
        "",
        H,
    ),
    ("superseded", f"Part (a): {B}{{10}}. Part (b): {B}{{12}}.", "12", "", H),
    ("superseded", f"{B}{{5}}. Wait, if we include 0, the count is {B}{{6}}.", "6", "", OK),
    (
        "superseded",
        f"Initially I got {B}{{10}}, but I made an arithmetic error. Correcting it: {B}{{12}}.",
        "12",
        "",
        OK,
    ),
    ("superseded", f"Draft: {B}{{10}}.\n\n## Final Answer\n{B}{{12}}", "12", "", OK),
    # -- values and letters the question itself states
    ("stated", f"{B}{{\\text{{(C)}}}}", "C", PRIME, OK),
    ("stated", f"{B}{{(C)}}", "C", PRIME, OK),
    ("stated", f"{B}{{\\textbf{{(B)}}}}", "B", AMC, OK),
    (
        "stated",
        f"{B}{{\\$12.50}}",
        "12.50",
        "Sam paid $\\$12.50$ for a book and $\\$3$ for a pen. How much did the book cost?",
        OK,
    ),
    (
        "stated",
        f"{B}{{85\\%}}",
        "85",
        "Ana answered $85\\%$ of the questions. What percent did she answer?",
        OK,
    ),
    ("stated", f"{B}{{\\$1,200}}", "1200", "A bike costs $\\$1,200$. What is its price?", OK),
    ("stated", f"{B}{{\\sqrt{{2}}}}", "\\sqrt{2}", "Which is larger, $\\sqrt{2}$ or $1.4$?", OK),
    ("stated", f"{B}{{\\frac{{12}}{{18}}}}", "\\frac23", "Simplify $\\frac{12}{18}$.", OTHER),
    ("stated", f"{B}{{\\sqrt{{8}}}}", "2\\sqrt2", "Simplify $\\sqrt{8}$.", OTHER),
    # -- a list joined by "or" against a set of values
    ("or_list", f"{B}{{3 \\text{{ or }} -3}}", "\\pm 3", "", OK),
    ("or_list", f"{B}{{3 \\text{{ or }} -3}}", "\\{3, -3\\}", "", OK),
    ("or_list", f"{B}{{x = 2 \\text{{ or }} x = 5}}", "2, 5", "", OK),
    ("or_list", f"{B}{{-1 \\quad\\text{{or}}\\quad 4}}", "\\{-1, 4\\}", "", OK),
    ("or_list", f"{B}{{1, 2, \\text{{or}} 3}}", "1, 2, 3", "", OK),
    ("or_list", f"{B}{{2 \\text{{ or }} 3}}", "2, 5", "", WRONG),
    ("or_list", f"{B}{{3 \\text{{ or }} -3}}", "3", "", H),
    ("or_list", f"{B}{{2 \\text{{ or maybe }} 5}}", "2, 5", "", H),
    # -- units without a space, rounded decimals
    ("units", f"{B}{{0.02m}}", "0.02", "", OK),
    ("units", f"{B}{{15s}}", "15", "", OK),
    ("units", f"{B}{{3 m}}", "3", "", OK),
    ("units", f"{B}{{0.02m}}", "0.03", "", WRONG),
    ("units", f"{B}{{2x}}", "2", "", WRONG),
    ("units", f"{B}{{3m}}", "3m", "", OK),
    ("units", f"{B}{{7.071\\mathrm{{~m}}}}", "7.07", "", OK),
    ("units", f"{B}{{7.07\\mathrm{{~m}}}}", "7.071", "", OK),
    ("units", f"{B}{{6.67 \\times 10^{{-11}} \\mathrm{{~N}}}}", "6.674e-11", "", OK),
    ("units", f"{B}{{1.50 \\times 10^{{8}} \\text{{ km}}}}", "1.496e8", "", OK),
    ("units", f"{B}{{1.5 \\times 10^{{8}} \\text{{ km}}}}", "1.496e8", "", WRONG),
    ("units", f"{B}{{6.68 \\times 10^{{-11}}}}", "6.674e-11", "", WRONG),
    ("units", f"{B}{{0.333}}", "0.3333", "", OK),
    ("units", f"{B}{{0.334}}", "0.3333", "", WRONG),
    # -- an equation whose left side is the asked quantity
    ("equation", f"{B}{{a + b = 7}}", "7", ROOTS, OK),
    ("equation", f"{B}{{x^2 + y^2 = 25}}", "25", "What is the value of $x^2+y^2$?", OK),
    ("equation", f"{B}{{f(2) = 7}}", "7", "Find $f(2)$ if $f(x) = 3x + 1$.", OK),
    ("equation", f"{B}{{2a - b = 3}}", "3", "Compute $2a - b$ given $a = 2$, $b = 1$.", OK),
    (
        "equation",
        f"{B}{{a - b = 7}}",
        "7",
        "Find $a+b$ if $a-b=7$ and $ab = 0$.",
        OTHER,
    ),
    ("equation", f"{B}{{a + b = 8}}", "7", ROOTS, WRONG),
    ("equation", f"{B}{{2 + 5 = 7}}", "7", ROOTS, ("wrong", "equation")),
    ("equation", f"{B}{{3x = 12}}", "12", "Solve $3x = 12$.", OTHER),
    (
        "equation",
        f"{B}{{a - b = 3}}",
        "3",
        "Find $a+b$ given $a-b$ is three.",
        ("wrong", "equation"),
    ),
    # -- a value followed by its option letter
    ("letter_after", f"{B}{{32 \\text{{ (C)}}}}", "C", LINES, OK),
    ("letter_after", f"{B}{{32 \\text{{ (C)}}}}", "32", LINES, OK),
    ("letter_after", f"{B}{{12 \\; \\textbf{{(B)}}}}", "B", AMC, OK),
    ("letter_after", f"{B}{{29\\ (C)}}", "C", PRIME, OK),
    ("letter_after", f"{B}{{32 \\text{{ (C)}}}}", "C", "", OK),
    ("letter_after", f"{B}{{32 \\text{{ (D)}}}}", "C", LINES, WRONG),
    ("letter_after", f"{B}{{24 \\text{{ (B)}}}}", "C", LINES, WRONG),
    # -- Unicode digit styles
    ("unicode", f"{B}{{𝟏𝟐}}", "12", "", OK),
    ("unicode", f"{B}{{𝟏𝟑}}", "12", "", WRONG),
    ("unicode", f"{B}{{１２．５}}", "12.5", "", OK),
    ("unicode", f"{B}{{𝟑/𝟒}}", "\\frac34", "", OK),
    ("unicode", f"{B}{{١٢}}", "12", "", OK),
    ("unicode", f"{B}{{१२}}", "12", "", OK),
    ("unicode", f"{B}{{𝟐𝐱 + 𝟏}}", "2x+1", "", OK),
    ("unicode", f"{B}{{𝟙𝟘}}", "10", "", OK),
    ("unicode", f"{B}{{½}}", "\\frac12", "", OK),
    ("unicode", f"{B}{{x₁ + x₂}}", "x_1 + x_2", "", OK),
    ("unicode", f"{B}{{٣٫٥}}", "3.5", "", OK),
    ("unicode", f"So the total is {B}{{𝟒𝟐}}. Indeed 𝟒𝟐 = 6 · 7.", "42", "", OK),
    # -- innocent text after the box
    (
        "innocent",
        f"{B}{{5\\sqrt{{2}}}}. This agrees with $\\sqrt{{50}} \\approx 7.07$.",
        "5\\sqrt2",
        "",
        OK,
    ),
    ("innocent", f"{B}{{\\frac{{1}}{{3}}}}, which is about 0.333.", "\\frac13", "", OK),
    ("innocent", f"{B}{{\\pi}}\n\nNumerically, that is approximately 3.1416.", "\\pi", "", OK),
    ("innocent", f"{B}{{2\\sqrt{{3}}}} $\\approx 3.46$", "2\\sqrt3", "", OK),
    ("innocent", f"{B}{{7.07}}, roughly 7.", "7.07", "", OK),
    ("innocent", f"{B}{{12}}. At first this looks wrong, but it is correct.", "12", "", OK),
    (
        "innocent",
        f"{B}{{12}}. It may seem like a mistake to count the corner twice, but it isn't.",
        "12",
        "",
        OK,
    ),
    ("innocent", f"{B}{{0}}. This looks wrong at first glance, yet it checks out.", "0", "", OK),
    ("innocent", f"{B}{{12}}. A common mistake is forgetting the shared corner.", "12", "", OK),
    ("innocent", f"{B}{{\\frac{{7}}{{2}}}} or equivalently $3.5$.", "\\frac72", "", OK),
    ("innocent", f"{B}{{3.5}}, that is, $\\frac{{7}}{{2}}$.", "3.5", "", OK),
    ("innocent", f"{B}{{720}}. That is $6! = 720$.", "720", "", OK),
    ("innocent", f"{B}{{2}}. (We discard $x=-3$.)", "2", "", OK),
    ("innocent", f"{B}{{1/6}}, i.e. about 16.7%.", "\\frac16", "", OK),
    ("innocent", f"{B}{{12}}\n\nThe mistake to avoid is double-counting the corner.", "12", "", OK),
    ("innocent", f"{B}{{9.8}}\n\nThe relative error is small.", "9.8", "", OK),
    ("innocent", f"{B}{{12}}. Wrong.", "12", "", R),
    ("innocent", f"{B}{{5}}. Oops, it's 6.", "5", "", R),
    ("innocent", f"{B}{{7}}. Use 8 instead.", "7", "", R),
    ("innocent", f"{B}{{12}}. This looks right, but it is wrong.", "12", "", R),
    ("innocent", f"{B}{{5\\sqrt{{2}}}}. Numerically this is 7.5.", "5\\sqrt2", "", R),
    ("innocent", f"{B}{{\\frac{{1}}{{3}}}}, which is about 0.5.", "\\frac13", "", R),
    ("innocent", f"{B}{{0.35}}. Oops, it's 0.4.", "0.35", "", R),
    ("innocent", f"{B}{{12}}. Hmm, about 15 actually.", "12", "", R),
]


def _label(case):
    cls, response, gold, problem, (category, _) = case
    return f"{cls}: {response!r} vs {gold!r} ({problem[:20]!r}) -> {category}"


def check_case(case) -> None:
    """The grader gives `case` (class, response, gold, problem, (category, reason)) its verdict
    and reason, a reason of the category's closed set."""
    _, response, gold, problem, (category, reason) = case
    verdict = verify_math(response, gold, problem)
    assert (verdict.category, verdict.reason) == (category, reason), verdict
    if reason:
        assert reason in MATH_REASONS[category]


@pytest.mark.parametrize("case", CASES, ids=[_label(c)[:90] for c in CASES])
def test_each_case_gets_the_careful_graders_verdict_and_reason(case):
    check_case(case)


def test_no_false_positive_and_no_false_negative_in_any_class():
    scored = [(c, verify_math(c[1], c[2], c[3]).category) for c in CASES]
    false_positives = [_label(c) for c, got in scored if c[4][0] != "correct" and got == "correct"]
    false_negatives = [_label(c) for c, got in scored if c[4][0] == "correct" and got != "correct"]
    assert (false_positives, false_negatives) == ([], [])
    by_class: dict[str, list[int]] = {}
    for c in CASES:
        counts = by_class.setdefault(c[0], [0, 0])
        counts[c[4][0] == "correct"] += 1
    assert all(wrong >= 1 and right >= 1 for wrong, right in by_class.values()), by_class
    assert sum(map(sum, by_class.values())) >= 150


def test_many_corrected_boxes_and_long_tails_are_judged_in_one_pass(monkeypatch):
    """Supersession is one pass over the response (each earlier box is not re-read against all
    the text after it: each sentence is split into words once), and a superseded box is never
    parsed (the gold and the last box alone are). Counted, not timed."""
    import graft.verify.math.commitment as commitment
    import graft.verify.math.grader as grader

    calls = {"words": 0, "parse": 0}

    def counting(name, function):
        def counted(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return counted

    monkeypatch.setattr(commitment, "_words", counting("words", commitment._words))
    monkeypatch.setattr(grader, "parse_answer", counting("parse", grader.parse_answer))
    drafts = "".join(f"Try {B}{{{i}}}, with a few more words of the attempt. " for i in range(400))
    corrected = drafts + "Wait, none of these fits the last condition. Recounting gives "
    long_tail = f"{B}{{12}}. " + "We check 3 x 4 = 12 again. " * 2000
    for text, gold, category, sentences in (
        (corrected + f"{B}{{999}}.", "999", "correct", 402),
        (drafts + f"So {B}{{999}}.", "999", "wrong", 401),  # a hedge
        (long_tail, "12", "correct", 2001),
    ):
        calls.update(words=0, parse=0)
        assert verify_math(text, gold).category == category
        assert calls["parse"] <= 2 and calls["words"] <= 2 * sentences, calls
