"""The exchange-regime diagnostics: per-skill counts, what-if admission, and the report."""

import math

import pytest

from exchange_helpers import groups_for
from graft.config import ExchangeConfig
from graft.evidence.regime import direction_report, direction_totals, regime_reports
from graft.exchange import Selection, graft_direction, transfer_requests
from graft.types import Imported


def _direction():
    # Source a is mixed on prompt 0 (skill s1); receiver b failed it and is mixed on prompt 1 (s2).
    skills = ("s1", "s2")
    a = groups_for("a", ["1100", "1000"], skills=skills)
    b = groups_for("b", ["0000", "1100"], logprobs=(-0.2, -0.2), skills=skills)
    sel = Selection("a", "b", candidates=(0,), selected=(0,))
    reqs = transfer_requests(sel, a)
    # Receiver log-probs: members 0, 1 correct; 2 wrong; 3 wrong and too long to import.
    imps = [
        Imported((1, 2), (20, 21), (-0.3, -0.3)),
        Imported((1, 2), (20, 21), (-0.4, -0.4)),
        Imported((1, 2), (20, 21), (-0.6, -0.6)),
        Imported((1, 2), (), (), drop="too_long"),
    ]
    return graft_direction(sel, b, a, reqs, imps, ExchangeConfig())


def test_counts_per_skill_and_what_each_score_would_admit():
    m = _direction().metrics
    # l_S = mean(-0.5, -0.1) = -0.3. paper: s = e^0, e^-0.1 (admitted), e^-0.3 = 0.74 (dropped).
    assert (m["sent_correct"], m["admitted_correct"], m["admitted_wrong"]) == (2, 2, 0)
    s1 = {k.split("/")[-1]: v for k, v in m.items() if k.startswith("by_skill/s1/")}
    assert s1 == {
        "prompts": 1,
        "all_fail": 1,
        "peer_mixed": 1,
        "sent_correct": 2,
        "sent_wrong": 2,
        "admitted_correct": 2,
        "admitted_wrong": 0,
    }
    assert m["by_skill/s2/all_fail"] == 0 and m["by_skill/s2/prompts"] == 1
    # receiver_relative: own mean -0.2; s = e^-0.1, e^-0.2 = 0.82 (> 0.8), e^-0.4 = 0.67.
    assert m["admit_if/paper/correct"] == 2 and m["admit_if/paper/wrong"] == 0
    assert m["admit_if/receiver_relative/correct"] == 2
    assert m["admit_if/receiver_relative/wrong"] == 0
    # per_byte over 4 bytes ("ans2"): (-1.2 + 0.6) / 4 = -0.15 -> s = 0.86 > 0.8: the wrong one too.
    assert math.exp(-0.15) > 0.8
    assert m["admit_if/per_byte/correct"] == 2 and m["admit_if/per_byte/wrong"] == 1


def test_direction_totals_sum_over_steps_and_keep_only_counts_into_the_receiver():
    records = [
        {"step": 1, "x/a->b/candidates": 2, "x/a->b/s_p50_correct": 0.7, "x/b->a/candidates": 5},
        {"step": 2, "x/a->b/candidates": 1, "x/a->b/by_skill/s1/all_fail": 3},
    ]
    per_step = direction_totals(records, receiver="b")
    assert per_step == {
        1: {"a->b/candidates": 2.0},
        2: {"a->b/candidates": 1.0, "a->b/by_skill/s1/all_fail": 3.0},
    }


def test_a_starved_direction_is_named_with_the_score_that_admits_more():
    totals = {
        "a->b/responses_sent": 100,
        "a->b/sent_correct": 40,
        "a->b/admitted_correct": 4,
        "a->b/admitted_wrong": 1,
        "a->b/admit_if/paper/correct": 4,
        "a->b/admit_if/paper/wrong": 1,
        "a->b/admit_if/receiver_relative/correct": 30,
        "a->b/admit_if/receiver_relative/wrong": 12,
        "a->b/admit_if/per_byte/correct": 10,
        "a->b/admit_if/per_byte/wrong": 2,
        "a->b/by_skill/s1/prompts": 50,
        "a->b/by_skill/s1/all_fail": 40,
        "a->b/by_skill/s1/peer_mixed": 10,
    }
    rep = direction_report(totals, "a->b", weight="paper", delta=0.8)
    assert rep["admitted_correct_share"] == pytest.approx(0.1)
    assert rep["admitted_wrong_share"] == pytest.approx(1 / 60)
    assert rep["skills"]["s1"]["all_fail_share"] == pytest.approx(0.8)
    assert rep["skills"]["s1"]["peer_mixed_share"] == pytest.approx(0.25)
    assert rep["starved"]
    assert (
        "starves" in rep["message"]
        and "receiver_relative would have admitted 75%" in rep["message"]
    )
    # The same counts with receiver_relative configured and admitting 75%: not starved.
    fed = dict(totals, **{"a->b/admitted_correct": 30})
    assert not direction_report(fed, "a->b", weight="receiver_relative", delta=0.8)["starved"]


def test_regime_reports_over_seeds_add_counts_before_dividing():
    seed0 = {
        1: {"a->b/responses_sent": 10.0, "a->b/sent_correct": 10.0, "a->b/admitted_correct": 0.0}
    }
    seed1 = {
        1: {"a->b/responses_sent": 10.0, "a->b/sent_correct": 30.0, "a->b/admitted_correct": 15.0}
    }
    rep = regime_reports([seed0, seed1], weight="paper", delta=0.8)["a->b"]
    assert rep["admitted_correct_share"] == pytest.approx(15 / 40)
