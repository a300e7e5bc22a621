"""The math graders: `verify_math` (a final boxed answer), `verify_math_answer_line` (or an answer
line), their training verdicts `verify_math_strict` and `verify_math_answer_line_strict`, and
`verify_final_number` (the last integer), each `(response, gold, problem) -> Verdict`.

`verify_math` is stricter than math-verify 0.9.0 used as is (each point is a trap observed there,
pinned by a test in tests/test_verify.py):
- the answer is the content of the LAST closed `\\boxed{}` (`graft.verify.math.answer.last_boxed`);
  no box, or an unclosed last box, is `no_answer`, never "the last number in the text" or an
  earlier box;
- gold and answer are each parsed WHOLE as LaTeX (math-verify's normalisation, then latex2sympy2):
  the text is read as the content of a `$...$` math environment, so gold `2^{64}` is 2^64, not 2,
  and `\\pm 2021` is {-2021, 2021}. math-verify's `parse()` is not used, because when the whole
  fails to parse it retries on fragments (`1 + \\frac{1}{e} \\foo` reads as 1); here anything that
  does not parse whole is a failure: an unparseable gold is `error` (never reward 1), an
  unparseable boxed answer is `no_answer`;
- numbers are compared exactly (rationals, including powers like 2^{-99}) or by relative error of
  high-precision values: < 1e-30 for exact expressions (sqrt(12) = 2 sqrt(3)), < 1e-9 when a
  decimal is involved. math-verify rounds to ~6 decimals, so 1e-20 "equals" 1e-21. The same holds
  for the elements of tuples, sets and intervals of numbers. Everything else (symbols, equations,
  matrices, percentages) goes to `math_verify.verify`, with its SIGALRM timeout disabled: the pool
  enforces the time limit by killing the worker process;
- a final answer written as several adjacent boxes (`\\boxed{1}, \\boxed{2}, \\boxed{3}`,
  `graft.verify.math.answer.final_boxes`) is judged as a whole: as a tuple (in order) when the
  gold is a tuple or a pair, as a set when the gold is a set; against any other gold, boxes that do
  not all hold the same value are a hedge and `wrong`, even when the last box is right;
- forms the LaTeX parser misreads are read first (`graft.verify.math.forms`): e-notation,
  NumPy-style golds, trailing periods, `\\mathrm{e}`, clock times, sequences with an ellipsis,
  thin-space thousands, `\\varnothing`, `√`, degrees, repeating decimals, AMC choices with their
  value;
- the answer must be committed to (`graft.verify.math.commitment`): a hedge inside the box,
  beside it or after it (uncertainty, an unfinished sentence, another value offered as possible,
  another box with another value offered with it) is `wrong/hedge`; a box taken back by the text
  after it (called wrong, another value stated as the answer or set against it, `let me redo this`
  left unresolved) is `no_answer/retracted`. An earlier box the response corrected (`wait`, `no`,
  a draft inside `<think>`, a later "Final Answer") is superseded: the last committed box counts;
  a list joined by "or" inside one box (`3 \\text{ or } -3`) is a hedge, except against a gold
  that is the set of those values;
- with the problem text (`graft.verify.math.problem_text`): a box that only copies an expression of
  the question (`\\frac{12}{18}` for "Simplify $\\frac{12}{18}$"), or, when the question asks to
  evaluate or simplify, leaves work undone that the gold does not (`\\sqrt{25 \\cdot 2}`,
  `\\log_2 64`, an unreduced fraction: `graft.verify.math.unevaluated`), or leaves a big operator
  (`\\sum`, `\\prod`, `\\int`, a limit) that the gold does not, whatever the question's words, or
  ignores the form it asks for (`\\frac{1}{3}` for "as a repeating decimal", `0.5` for "as a
  common fraction") is `no_answer/other`; a unit
  other than the one the question asks for is `wrong/unit`; a choice whose value is not that
  option's value in the question (`\\text{(B) } 14` where (B) is 12) is wrong;
- a choice letter gold (`B`) accepts the choice with its value (`\\text{(B) } 12`,
  `12 \\text{ (B)}`, `B: 12`) and the bare value of that option; a tuple gold accepts named
  components in any order (`y=4, x=3`, `(x, y) = (3, 4)`); an equation whose left side is a
  function of symbols (`f(x) = 2x+1`) or the quantity the question asks for (`a + b = 7` for
  "Find $a + b$") is its right side;
- a decimal gold of three or more significant digits is taken as rounded: an exact answer, or
  a decimal one with more digits, that rounds to it is right (`\\frac{1}{360000}` for
  `2.7778e-6`: a relative difference up to half a unit in the gold's last digit,
  5 * 10^-digits); a decimal answer of three or more digits but fewer than the gold's is right
  when the gold rounds to it (`6.67 \\times 10^{-11}` for `6.674e-11`); a decimal gold of one or
  two digits is read with one digit more (`0.0199 \\mathrm{~m}` for `0.02`, not `0.024`);
- units are split off by `forms.split_unit` (only unit words, never a letter of the expression;
  math-verify's own unit stripping is off, as it reads `\\frac{1}{m} t` as `\\frac{1}{m}`); two
  different units are `wrong/unit`; against a gold that is a number, a one-letter unit written
  against its value (`0.02m`) is a unit too;
- structure counts: a set never equals a tuple or an interval, and an equation answer counts only
  when its left side is a variable or the asked quantity (`8 = 7` is `wrong/equation` for 7).

- the form the question asks for (`graft.verify.math.answer_form`: "to the nearest hundredth",
  "as a mixed number", "in scientific notation", "what percent"...), and a big operator the gold
  keeps (sigma notation, "do not evaluate"): a right value in another form is `no_answer/other`;
  a decimal answer to an exact question (`problem_text.exact_question`) owes no rounding; a
  computation the question spells in words (`three to the fifth power`) boxed in symbols copies
  it; a unit word the question counts in, listed or not, is checked against the box's;
- `verify_math_strict` is the training verdict (the `math` verifier): `verify_math`, and a right
  final box followed by any other value withholds the reward (`no_answer/tail_value`,
  `graft.verify.math.tail`); `verify_math` is the careful reading (`math_careful`), which
  evaluation reports beside it.

`verify_math_answer_line` (config `verify.extract: answer_line`) also reads responses without a
box, from an "answer is X" / "Answer: X" last line (`graft.verify.math.answer.answer_line`).
`verify_final_number` takes the last integer of the response (`final_number`).
Every verdict that is not `correct` names its reason (`Verdict.reason`, one of `MATH_REASONS`),
set where the verdict is made; the `verdict/<category>/<reason>` metrics count those names and
never read the detail text.
"""

from __future__ import annotations

import re
from typing import Any

from graft.types import Verdict, clip_detail
from graft.verify.math import forms
from graft.verify.math.answer import (
    after_last_box,
    answer_line,
    final_boxes,
    final_number,
    offers_alternatives,
)
from graft.verify.math.answer_form import broken_form
from graft.verify.math.choices import judge_choice, judge_or_list
from graft.verify.math.commitment import APPROXIMATELY, commitment
from graft.verify.math.problem_text import (
    asked_units,
    asks_for,
    asks_to_evaluate,
    exact_question,
    options,
    restates_problem,
)
from graft.verify.math.tail import other_value
from graft.verify.math.unevaluated import leftover_work
from graft.verify.math.values import (
    _is_number,
    _math,
    joint_answer,
    math_equal,
    parse_answer,
    rounds_to_gold,
    same_as,
    same_value,
    unit_of,
)

_INTEGER = re.compile(r"-?[0-9]+")


# ---------------------------------------------------------------------------- final_number


def verify_final_number(response: str, gold: str, problem: str = "") -> Verdict:
    """Exact integer match of `final_number(response)` against an integer gold."""
    if not _INTEGER.fullmatch(gold.strip()):
        return Verdict(
            "error", clip_detail(f"gold answer {gold!r} is not an integer"), "unparseable_gold"
        )
    answer = final_number(response)
    if answer is None:
        return Verdict("no_answer", "", "other")
    return Verdict.judged(int(answer) == int(gold), answer)


# ---------------------------------------------------------------------------- math


def _one_box_flaw(
    gold: Any, pred: Any, box: str, gold_unit: str, problem: str, unit: str = ""
) -> str:
    """Why one box is wrong whatever its value ("hedge", "equation", "unit"), or "". A box in a
    unit other than the gold's, or (gold without a unit) other than the one the problem asks
    for, is wrong."""
    s = _math().sympy
    containers = (s.Tuple, s.FiniteSet, s.Interval)
    several = isinstance(pred, s.FiniteSet | s.Tuple) and len(pred.args) > 1
    if several and not isinstance(gold, containers):
        return "hedge"  # `3, 4` or `\\pm 3` for one value
    m = _math()
    if isinstance(pred, s.Basic) and m.grader.is_equation(pred) and not m.grader.is_equation(gold):
        lhs = m.grader.take_last_relation(pred).lhs
        left = forms.split_top_level(box, "=")[0]  # not an `=` in a subscript (`\\sum_{k=1}`)
        if not _names_a_quantity(lhs) and not asks_for(left, problem):
            return "equation"  # `8 = 7` does not say the asked quantity is 7
    unit = unit or unit_of(box)
    wanted = [gold_unit] if gold_unit else asked_units(problem)
    if unit and wanted and not any(forms.same_unit(unit, w) for w in wanted):
        return "unit"
    return ""


def _names_a_quantity(lhs: Any) -> bool:
    """Is an equation's left side a name: a symbol, or a function of symbols (`f(x)`)?"""
    from sympy.core.function import AppliedUndef

    if lhs.is_Symbol:
        return True
    return isinstance(lhs, AppliedUndef) and all(a.is_Symbol for a in lhs.args)


def _judge_boxes(gold_expr: Any, boxes: tuple[str, ...], gold: str, problem: str) -> Verdict:
    """Verdict of the final answer given as one or several boxes (see the module docstring)."""
    if not all(boxes):
        return Verdict("no_answer", "empty", "empty_box")
    named_unit, written = "", boxes[0]
    if len(boxes) == 1:
        if _is_number(gold_expr):
            boxes = (forms.unit_letter(boxes[0]),)  # `0.02m` for 0.02: m is a unit
        special = _one_box_special(gold_expr, boxes[0], gold, problem)
        if special is not None:
            return special
        wanted = unit_of(gold) or next(iter(asked_units(problem)), "")
        duration = forms.compound_time(boxes[0], wanted)  # `2 h 30 min` for 2.5 hours
        if duration is not None:
            boxes = (duration,)
        if not unit_of(boxes[0]):  # `5 \\text{ apples}` for "how many apples"
            value, named_unit = forms.asked_unit(boxes[0], asked_units(problem))
            boxes = (value,)
    parsed = []
    for answer in boxes:
        try:
            parsed.append(parse_answer(answer))
        except Exception as exc:
            return Verdict(
                "no_answer",
                clip_detail(f"unparseable answer {answer!r}: {exc}"),
                "unparseable_answer",
            )
    if len(parsed) == 1:
        flaw = _one_box_flaw(gold_expr, parsed[0], boxes[0], unit_of(gold), problem, named_unit)
        if flaw:
            return Verdict("wrong", clip_detail(f"{flaw}: {written}"), flaw)
        answer = boxes[0]
        right = math_equal(gold_expr, parsed[0]) or (
            _may_round(parsed[0], problem) and rounds_to_gold(gold, gold_expr, parsed[0], answer)
        )
        undone = _left_undone(answer, gold, problem) if right else ""
        if undone:
            return Verdict(
                "no_answer", clip_detail(f"{_UNEVALUATED}({undone}): {written}"), "other"
            )
        return Verdict.judged(right, clip_detail(written))
    detail = clip_detail(_SEVERAL_BOXES + " | ".join(boxes))
    pair = joint_answer(gold_expr, parsed)
    if pair is None:
        return Verdict("wrong", detail, "several_boxes")
    return Verdict.judged(math_equal(*pair), detail, "several_boxes")


def _may_round(pred: Any, problem: str) -> bool:
    """May a right answer differ from the gold by rounding? Not a decimal answer to a question
    whose answer is exact (`problem_text.exact_question`): no rounding is owed there."""
    s = _math().sympy
    return not (isinstance(pred, s.Basic) and pred.has(s.Float) and exact_question(problem))


def _one_box_special(gold_expr: Any, box: str, gold: str, problem: str) -> Verdict | None:
    """A hedge inside the box, a copy of the problem, a choice letter, or named components;
    None when the box is none of these."""
    if offers_alternatives(box):  # in words, parseable or not
        listed = judge_or_list(gold_expr, box)
        return (
            listed
            if listed is not None
            else Verdict("wrong", clip_detail(f"hedge: {box}"), "hedge")
        )
    if restates_problem(box, problem, same_value) and not _an_option(box, problem):
        return Verdict("no_answer", clip_detail(f"{_RESTATED}{box}"), "other")
    choice = judge_choice(gold, box, problem)
    if choice is not None:
        return choice
    named = forms.named_components(box)
    s = _math().sympy
    if named is None or not isinstance(gold_expr, s.Tuple | s.Interval | s.FiniteSet):
        return None
    try:
        values = [parse_answer(v) for v in named]
    except Exception as exc:
        return Verdict(
            "no_answer", clip_detail(f"unparseable answer {box!r}: {exc}"), "unparseable_answer"
        )
    pair = joint_answer(gold_expr, values)
    if pair is None:
        return Verdict("wrong", clip_detail(box), "one_answer")
    return Verdict.judged(math_equal(*pair), clip_detail(box))


def _an_option(box: str, problem: str) -> bool:
    """Is the box one of the question's options as written there (`\\frac{\\sqrt{3}}{2}` from
    "(B) $\\frac{\\sqrt{3}}{2}$"): picking an option is an answer, not a copy."""
    return any(same_value(box, option) for option in options(problem).values())


_SEVERAL_BOXES = "several boxes: "
_RESTATED = "restates the problem: "
_NO_BOX = "no closed final \\boxed{}"


_UNEVALUATED = "unevaluated "


def _left_undone(box: str, gold: str, problem: str) -> str:
    """The work a right box leaves undone that its gold does not (`\\sqrt{25 \\cdot 2}` for
    "Simplify", `\\frac{10}{12}` for "in lowest terms"), when the question asks to evaluate or
    simplify; a big operator (`\\sum`, `\\int`, `\\lim`) whatever it asks (with the question's
    text: without it the operator is not told from a gold's own); a big operator the gold keeps
    and the box evaluates away (the setup is asked: sigma notation, "do not evaluate"); a form
    other than the one the question asks for (`answer_form`); "" otherwise."""
    box = forms.split_top_level(box, "=")[-1]  # `\\sum_{k=1}^{10} k = 55` is 55
    box_work, gold_work = leftover_work(forms.rewrite(box)), leftover_work(forms.rewrite(gold))
    undone = box_work - gold_work
    if not asks_to_evaluate(problem):
        undone &= {"operator"} if problem.strip() else set()
    if "operator" in gold_work - box_work:
        undone |= {"setup asked"}
    asked = broken_form(box, gold, problem)
    if asked:
        undone |= {f"{asked} asked"}
    return ", ".join(sorted(undone))


def _verify_math(response: str, gold: str, problem: str, *, extract: str) -> Verdict:
    try:
        try:
            gold_expr = parse_answer(gold)
        except Exception as exc:
            return Verdict(
                "error", clip_detail(f"unparseable gold answer {gold!r}: {exc}"), "unparseable_gold"
            )
        sympy = _math().sympy
        if isinstance(gold_expr, sympy.Basic) and gold_expr.has(sympy.zoo, sympy.nan):
            return Verdict(
                "error",
                clip_detail(f"gold answer {gold!r} is undefined ({gold_expr})"),
                "unparseable_gold",
            )
        boxes = final_boxes(response)
        if boxes is None and extract == "answer_line":
            line = answer_line(response)
            if line is None:
                return Verdict("no_answer", _NO_BOX + " and no answer line", "no_box")
            boxes = (line,)
        elif boxes is not None:
            taken_back = commitment(response, same_as(boxes, APPROXIMATELY))
            if taken_back.kind == "retracted":
                return Verdict(
                    "no_answer", clip_detail(f"retracted: {taken_back.why}"), "retracted"
                )
            if taken_back.kind == "hedge":
                return Verdict("wrong", clip_detail(f"hedge: {taken_back.why}"), "hedge")
        if boxes is None:
            return Verdict("no_answer", _NO_BOX, "no_box")
        return _judge_boxes(gold_expr, boxes, gold, problem)
    except Exception as exc:
        return Verdict.raised(exc)


def _strict(verdict: Verdict, response: str) -> Verdict:
    """The training verdict from the careful one: a right final box followed by any other value
    (`graft.verify.math.tail`) withholds the reward, as `no_answer/tail_value`."""
    if not verdict.correct:
        return verdict
    boxes = final_boxes(response)
    if boxes is None:
        return verdict  # an answer line ends the response: nothing follows it
    other = other_value(after_last_box(response), same_as(boxes, APPROXIMATELY))
    if not other:
        return verdict
    return Verdict("no_answer", clip_detail(f"{_TAIL_VALUE}{other}"), "tail_value")


_TAIL_VALUE = "another value after the box: "


def verify_math(response: str, gold: str, problem: str = "") -> Verdict:
    """Judge a free-form math response by its final `\\boxed{}` answer against a LaTeX gold;
    `problem` (the question's text) lets it refuse a box that only copies the question and a
    unit the question did not ask for."""
    return _verify_math(response, gold, problem, extract="boxed")


def verify_math_answer_line(response: str, gold: str, problem: str = "") -> Verdict:
    """`verify_math`, and for a response without a box, its "answer is X" last line."""
    return _verify_math(response, gold, problem, extract="answer_line")


def verify_math_strict(response: str, gold: str, problem: str = "") -> Verdict:
    """The training verdict: `verify_math`, and a right final box followed by any other value
    withholds the reward (`no_answer/tail_value`, `graft.verify.math.tail`)."""
    return _strict(verify_math(response, gold, problem), response)


def verify_math_answer_line_strict(response: str, gold: str, problem: str = "") -> Verdict:
    """`verify_math_strict`, and for a response without a box, its "answer is X" last line."""
    return _strict(verify_math_answer_line(response, gold, problem), response)


MATH_REASONS: dict[str, tuple[str, ...]] = {
    "wrong": ("one_answer", "several_boxes", "hedge", "equation", "unit"),
    "no_answer": ("no_box", "empty_box", "unparseable_answer", "retracted", "other"),
    "error": ("unparseable_gold", "other"),
}
"""The math verifiers' reasons, by category (what `Verdict.reason` names)."""

STRICT_MATH_REASONS: dict[str, tuple[str, ...]] = {
    **MATH_REASONS,
    "no_answer": (*MATH_REASONS["no_answer"][:-1], "tail_value", "other"),
}
"""The training verdict's reasons: the careful ones and `tail_value` (`verify_math_strict`)."""
