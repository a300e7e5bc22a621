"""Answer extraction, the strict math verifier (each math-verify 0.9.0 trap from
docs/user-expectations.md), and the process pool: order, hard timeouts, crashes, cleanup."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from graft.types import Verdict
from graft.verify.math.answer import final_number, last_boxed
from graft.verify.math.grader import verify_final_number, verify_math
from graft.verify.pool import VerifierPool
from graft.verify.registry import VERIFIERS, resolve_verifier, verifier_version

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:  # workers import plug-ins from the parent's sys.path
    sys.path.insert(0, TESTS_DIR)
PLUGIN = "hanging_verifier:check"
TIMEOUT_S = 4.0  # room for a fresh worker importing sympy on a loaded machine


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_gone(pids, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\fbox{7}", "7"),
        ("\\boxed {  8 }", "8"),
        ("the answer is \\boxed 5.", "5"),
        ("\\boxed{}", ""),
        ("no box, answer 42", None),
        ("\\boxed{5} and finally \\boxed{7", None),  # unclosed last box: no fallback to 5
        ("\\boxed{\\frac{1}{2}", None),
        ("\\boxed", None),
        ("\\boxedx{3}", None),  # a different command
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", "42"),
        (" 42\n", "42"),
        ("-7", "-7"),
        ("300*6+40*6=1800+240=2040", "2040"),
        ("2+2= 4", "4"),
        ("2+2=", None),
        ("4 2", None),
        ("42.", None),
        ("42abc", None),
        ("forty-two", None),
        ("+42", None),
        ("٤٢", None),  # non-ASCII digits
        ("", None),
    ],
)
def test_final_number(text, expected):
    assert final_number(text) == expected


def test_verify_final_number_categories():
    assert verify_final_number("12+30=42", "42") == Verdict("correct", "42")
    assert verify_final_number("41", "42") == Verdict("wrong", "41", "one_answer")
    assert verify_final_number("-042", "-42").category == "correct"
    assert verify_final_number("the answer is 42", "42").category == "no_answer"
    assert verify_final_number("42", "forty-two").category == "error"
    assert verify_final_number("42", "4=2").category == "error"


# ---------------------------------------------------------------------------- math traps


def raw_math_verify(response: str, gold: str) -> bool:
    """math-verify 0.9.0 used as is (timeouts off so it also runs here)."""
    import math_verify

    return math_verify.verify(
        math_verify.parse(gold, parsing_timeout=None),
        math_verify.parse(response, parsing_timeout=None),
        timeout_seconds=None,
    )


def test_trap_no_box_is_no_answer_not_last_number():
    response = "We compute 6 * 7 = 42 and then the answer is"
    assert raw_math_verify(response, "$42$")  # the trap is real
    assert verify_math(response, "42").category == "no_answer"


def test_trap_unclosed_final_box_does_not_fall_back():
    response = "First guess \\boxed{5}. Actually the answer is \\boxed{7"
    assert raw_math_verify(response, "$5$")
    assert verify_math(response, "5").category == "no_answer"
    assert verify_math(response, "7").category == "no_answer"


@pytest.mark.parametrize(
    ("answer", "gold", "raw_says_equal"),
    [
        ("10^{-21}", "10^{-20}", True),
        ("0.000000000000000000001", "0.00000000000000000001", True),
        ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}", True),
        ("18446744073709551617", "2^{64}", False),
        ("3.4641", "2\\sqrt{3}", False),
        ("0.333333", "\\frac{1}{3}", True),
    ],
)
def test_trap_numbers_not_rounded(answer, gold, raw_says_equal):
    assert raw_math_verify(f"\\boxed{{{answer}}}", f"${gold}$") == raw_says_equal
    assert verify_math(f"\\boxed{{{answer}}}", gold).category == "wrong"


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("10^{-20}", "10^{-20}"),
        ("\\frac{1}{2^{98}}", "2^{-98}"),
        ("18446744073709551616", "2^{64}"),
        ("2^{65536}", "2^{2^{2^{2^{2}}}}"),
        ("\\sqrt{12}", "2\\sqrt{3}"),
        ("3.4641016151377544", "2\\sqrt{3}"),  # decimals: relative error < 1e-9
        ("0.75", "\\frac{3}{4}"),
        ("\\dfrac{6}{8}", "\\frac{3}{4}"),
        ("-\\infty", "-\\infty"),
    ],
)
def test_numbers_that_are_equal(answer, gold):
    assert verify_math(f"\\boxed{{{answer}}}", gold).category == "correct"


def test_trap_bare_gold_is_parsed_whole():
    import math_verify

    assert math_verify.parse("2^{64}", parsing_timeout=None)[0] == 2
    assert math_verify.parse("\\pm 2021", parsing_timeout=None)[0] == 2021
    assert verify_math("\\boxed{2}", "2^{64}").category == "wrong"
    assert verify_math("\\boxed{2021}", "\\pm 2021").category == "wrong"
    assert verify_math("\\boxed{\\pm 2021}", "\\pm 2021").category == "correct"
    assert verify_math("\\boxed{2021, -2021}", "\\pm 2021").category == "correct"


def test_trap_partial_parse_of_a_fragment():
    import math_verify

    assert math_verify.parse("1 + \\frac{1}{e}", parsing_timeout=None)[0] == 1
    assert math_verify.parse("$1 + \\frac{1}{e} \\foo$", parsing_timeout=None)[0] == 1
    gold = "1 + \\frac{1}{e}"
    assert verify_math("\\boxed{1}", gold).category == "wrong"
    assert verify_math("\\boxed{1 - \\frac{1}{e}}", gold).category == "wrong"
    assert verify_math("\\boxed{\\frac{e + 1}{e}}", gold).category == "correct"
    # An answer that only parses in part is no answer, never its fragment "1".
    assert verify_math("\\boxed{1 + \\frac{1}{e} \\foo}", "1").category == "no_answer"
    assert verify_math("\\boxed{1 +}", "1").category == "no_answer"


@pytest.mark.parametrize("gold", ["\\frac{1}{2", "1 + \\foo", "", "   ", "\\frac{1}{0}"])
def test_unparseable_gold_is_error_never_reward(gold):
    verdict = verify_math("\\boxed{1}", gold)
    assert verdict.category == "error"
    assert verdict.reward == 0.0


def test_trap_sigalrm_verifier_works_in_threads():
    import math_verify

    outcome: dict[str, object] = {}

    def run() -> None:
        outcome["ours"] = verify_math("\\boxed{\\frac{3}{4}}", "0.75")
        try:
            math_verify.parse("$1$")  # default SIGALRM timeout
        except ValueError as exc:
            outcome["raw"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert outcome["ours"] == Verdict("correct", "\\frac{3}{4}")
    assert "thread" in str(outcome["raw"])


@pytest.mark.parametrize(
    ("answer", "gold", "category"),
    [
        ("(1, 2)", "(1,2)", "correct"),
        ("[1, 2)", "(1,2)", "wrong"),
        ("[4, \\infty)", "[4, \\infty)", "correct"),
        ("(3, 4)", "(4, 3)", "wrong"),
        ("\\{3, 1, 2\\}", "\\{1, 2, 3\\}", "correct"),
        ("x = 3", "3", "correct"),
        ("3", "x = 3", "correct"),
        ("x^2 + 1", "1 + x^2", "correct"),
        ("x^2 - 1", "1 + x^2", "wrong"),
        ("\\text{(A)}", "A", "correct"),
        ("3 + 4i", "3+4i", "correct"),
        (
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
            "correct",
        ),
        ("9\\pi", "9\\pi", "correct"),
        ("28.27", "9\\pi", "wrong"),
    ],
)
def test_verify_math_other_answers(answer, gold, category):
    assert verify_math(f"The answer is $\\boxed{{{answer}}}$.", gold).category == category


def test_verify_math_details():
    assert verify_math("\\boxed{5}", "5") == Verdict("correct", "5")
    assert verify_math("\\boxed{}", "5") == Verdict("no_answer", "empty", "empty_box")
    assert "no closed" in verify_math("5", "5").detail
    assert "unparseable gold" in verify_math("\\boxed{5}", "\\frac{1}{2").detail


# ---------------------------------------------------------------------------- registry


def test_registry_and_versions():
    from graft.verify.math.grader import (
        verify_math_answer_line,
        verify_math_answer_line_strict,
        verify_math_strict,
    )
    from graft.verify.registry import PlugInVerifier, VerifierKind

    assert {
        "math": verify_math_strict,
        "math_careful": verify_math,
        "final_number": verify_final_number,
        "math_answer_line": verify_math_answer_line_strict,
        "math_answer_line_careful": verify_math_answer_line,
    } == {k: v.check for k, v in VERIFIERS.items() if not v.kind.runs_code}
    assert {k for k, v in VERIFIERS.items() if v.kind.runs_code} == {"code", "code_unsafe_local"}
    assert VERIFIERS["code"].kind is VerifierKind.SANDBOXED
    # the name stores and configs held before the answer-line grader had a built-in one
    legacy = resolve_verifier("graft.tasks.verify:verify_math_answer_line")
    assert legacy is VERIFIERS["math_answer_line"]
    assert verifier_version("graft.tasks.verify:verify_math_answer_line").endswith("graft-strict-6")
    assert verifier_version("code") == "code;graft-sandbox-1"
    assert resolve_verifier("math") is VERIFIERS["math"]
    import hanging_verifier

    plug_in = resolve_verifier(PLUGIN)
    assert isinstance(plug_in, PlugInVerifier) and plug_in.fn is hanging_verifier.check
    assert plug_in("7", "7").correct and plug_in.time_budget("7") == 0.0  # two arguments
    assert verifier_version("math") == "math-verify==0.9.0;graft-strict-6"
    assert verifier_version("final_number") == "final_number;1"
    assert verifier_version(PLUGIN) == f"{PLUGIN};unversioned"
    for bad in ("nonsense", "module:", ":function", "a.b:not-an-identifier"):
        with pytest.raises(ValueError, match="unknown verifier"):
            verifier_version(bad)


def test_a_plug_in_object_brings_its_own_kind_reasons_and_budget():
    """An object that follows the Verifier protocol is used as it is: its reasons name the
    verdict counts, its version goes to the store and its time budget sets the pool's deadline
    only when it is built in (a plug-in's deadline is verify.timeout_s)."""
    from graft.verify.registry import Verifier, verdict_counts

    judge = resolve_verifier("hanging_verifier:SPELLING")
    assert isinstance(judge, Verifier) and judge.version == "spelling;2"
    verdicts = [judge(r, "colour") for r in ("colour", "color", "")]
    assert [v.reason for v in verdicts] == ["", "american", "empty"]
    counts = verdict_counts(verdicts, "hanging_verifier:SPELLING")
    assert counts["verdict/wrong/american"] == 1 and counts["verdict/no_answer/empty"] == 1
    assert "verdict/wrong/one_answer" not in counts  # the math vocabulary is not its own


def test_the_pool_gives_a_built_in_verifier_its_time_budget():
    from graft.verify.code.verifier import CodeTests, gold_time_budget_s
    from graft.verify.pool import VerifierPool

    gold = CodeTests("stdio", stdin=("",) * 5, stdout=("1",) * 5).to_gold()
    with VerifierPool(workers=1, timeout_s=1.0) as small:
        assert small._limit(("code", "r", gold, "")) == gold_time_budget_s(gold) > 5 * 4.0
        assert small._limit(("final_number", "r", gold, "")) == 1.0
        assert small._limit((PLUGIN, "r", gold, "")) == 1.0


# ---------------------------------------------------------------------------- pool


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=2, timeout_s=TIMEOUT_S) as p:
        yield p


def test_pool_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"verify\.workers"):
        VerifierPool(workers=0)
    with pytest.raises(ValueError, match=r"verify\.timeout_s"):
        VerifierPool(timeout_s=0)


def test_pool_returns_verdicts_in_order(pool):
    items = []
    for i in range(300):
        gold = str(i)
        response = f"{i // 2}+{i - i // 2}={i if i % 3 else i + 1}" if i % 7 else "no idea"
        items.append(("final_number", response, gold))
    items[10:10] = [
        ("math", "\\boxed{\\frac{3}{4}}", "0.75"),
        ("math", "\\boxed{2}", "2^{64}"),
        ("math", "about 5", "5"),
        ("math", "\\boxed{5}", "\\frac{1}{2"),
    ]
    items.append((PLUGIN, "same", "same"))
    expected = [resolve_verifier(name)(response, gold) for name, response, gold in items]
    assert pool.verify(items) == expected
    categories = {v.category for v in expected}
    assert categories == {"correct", "wrong", "no_answer", "error"}
    assert pool.verify([]) == []


def test_pool_reuses_workers_and_is_cheap(pool):
    items = [("final_number", f"1+{i}={i + 1}", str(i + 1 + i % 2)) for i in range(1024)]
    pool.verify(items)
    pids = pool.pids
    start = time.perf_counter()
    verdicts = pool.verify(items)
    elapsed = time.perf_counter() - start
    assert pool.pids == pids
    assert [v.category for v in verdicts] == [
        "correct" if i % 2 == 0 else "wrong" for i in range(1024)
    ]
    print(f"1024 final_number items: {elapsed * 1000:.1f} ms")  # speed: BENCHMARKS.md


def test_hanging_verifier_is_killed_and_the_rest_still_verified(pool):
    pool.verify([(PLUGIN, "warm", "warm")] * 64)  # fast items now travel in chunks
    items = [(PLUGIN, f"r{i}", f"r{i}" if i % 2 else "x") for i in range(60)]
    items.insert(25, (PLUGIN, "HANG", "HANG"))
    before = set(pool.pids)
    start = time.monotonic()
    verdicts = pool.verify(items)
    elapsed = time.monotonic() - start
    assert verdicts[25].category == "timeout"
    others = verdicts[:25] + verdicts[26:]
    assert [v.category for v in others] == ["wrong" if i % 2 == 0 else "correct" for i in range(60)]
    assert elapsed >= TIMEOUT_S  # it waited the deadline out; the kill is counted below
    killed = before - set(pool.pids)
    assert len(killed) >= 1 and len(pool.pids) == 2
    assert wait_gone(killed)
    assert pool.verify([(PLUGIN, "after", "after")]) == [Verdict("correct", "after")]


def test_pathological_math_input_times_out(pool):
    # Evaluating 9^(9^(9^9)) runs for minutes in sympy; the worker is killed at the limit.
    items = [
        ("math", "\\boxed{9^{9^{9^{9}}}}", "1"),
        ("math", "\\boxed{3}", "3"),
        ("final_number", "7", "7"),
    ]
    start = time.monotonic()
    verdicts = pool.verify(items)
    assert [v.category for v in verdicts] == ["timeout", "correct", "correct"]
    assert time.monotonic() - start >= TIMEOUT_S  # ended by the kill at the deadline


def test_crashing_and_broken_verifiers_give_errors(pool):
    items = [
        (PLUGIN, "CRASH", "x"),
        (PLUGIN, "ok", "ok"),
        (PLUGIN, "RAISE", "x"),
        ("hanging_verifier:not_a_verdict", "a", "a"),
        ("no_such_module_xyz:check", "a", "a"),
        ("hanging_verifier:missing", "a", "a"),
    ]
    verdicts = pool.verify(items)
    assert [v.category for v in verdicts] == [
        "error",
        "correct",
        "error",
        "error",
        "error",
        "error",
    ]
    assert "exit code 3" in verdicts[0].detail
    assert "ZeroDivisionError: verifier bug" in verdicts[2].detail
    assert "not a Verdict" in verdicts[3].detail
    assert "No module named 'no_such_module_xyz'" in verdicts[4].detail
    assert "no function 'missing'" in verdicts[5].detail
    with pytest.raises(ValueError, match="unknown verifier 'nonsense'"):
        pool.verify([("nonsense", "a", "a")])
    assert pool.verify([("final_number", "1", "1")])[0].correct  # still usable


def test_math_verify_is_imported_lazily():
    probe = ("hanging_verifier:loaded_modules", "", "")
    with VerifierPool(workers=1, timeout_s=5.0) as p:
        before = p.verify([("final_number", "1", "1"), probe])[1]
        after = p.verify([("math", "\\boxed{1}", "1"), probe])[1]
    assert before.detail == ""
    assert "math_verify" in after.detail
    code = "import sys, graft.verify.registry; print('math_verify' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_close_leaves_no_processes():
    p = VerifierPool(workers=2, timeout_s=TIMEOUT_S)
    pids = p.pids
    assert not any(gone(pid) for pid in pids)
    p.close()
    assert wait_gone(pids)
    p.close()  # twice is fine
    with pytest.raises(RuntimeError, match="after close"):
        p.verify([("final_number", "1", "1")])
    with VerifierPool(workers=1) as q:
        pids = q.pids
    assert wait_gone(pids)


def test_garbage_collection_and_owner_death_leave_no_processes():
    p = VerifierPool(workers=1)
    pids = p.pids
    del p
    assert wait_gone(pids)
    # The owner is SIGKILLed while a worker hangs: the workers must not outlive it.
    code = (
        "import os, signal, sys, threading\n"
        f"sys.path.insert(0, {TESTS_DIR!r})\n"
        "from graft.verify.pool import VerifierPool\n"
        "p = VerifierPool(workers=2, timeout_s=60)\n"
        "print(*p.pids, flush=True)\n"
        "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()\n"
        f"p.verify([({PLUGIN!r}, 'HANG', 'x'), ({PLUGIN!r}, 'HANG', 'x')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pids = [int(x) for x in out.stdout.split()]
    assert len(pids) == 2
    assert wait_gone(pids, within_s=10.0)
