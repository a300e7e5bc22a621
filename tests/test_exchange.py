"""Table-driven tests of the GRAFT gate, balancing and multi-peer selection (pure)."""

import pytest

from exchange_helpers import groups_for
from graft.config import AblationConfig, ExchangeConfig
from graft.exchange import OnlinePeers, balance, exchange, gate, select_transfers, top_m_with_ties
from graft.types import Imported


@pytest.mark.parametrize(
    ("receiver", "source", "expected"),
    [
        ("0000", "1100", True),  # receiver all-fail, source mixed: candidate
        ("0000", "1000", True),  # one success is enough
        ("0000", "1111", False),  # all-correct source groups are never sent
        ("0000", "0000", False),  # nothing to learn from
        ("0100", "1100", False),  # receiver not all-fail
        ("1111", "1100", False),  # all-correct receiver groups are never touched
    ],
)
def test_gate_table(receiver, source, expected):
    r = groups_for("b", [receiver])
    s = groups_for("a", [source])
    assert (gate(r, s) == (0,)) is expected


def test_gate_decides_on_raw_correctness_per_prompt():
    r = groups_for("b", ["0000", "0000", "1000", "0000"])
    s = groups_for("a", ["1100", "1111", "1100", "0000"])
    assert gate(r, s) == (0,)


def test_one_empty_direction_means_nothing_moves_either_way():
    sel_ab, sel_ba = balance((0, 1, 2), (), [1, 2, 3], [0, 0, 0])
    assert sel_ab == () and sel_ba == ()
    a = groups_for("a", ["1100", "1000", "0000"])
    b = groups_for("b", ["0000", "0000", "0000"])  # A->B has 2 candidates, B->A none
    by_pair = {(s.source, s.receiver): s for s in select_transfers({"a": a, "b": b})}
    assert by_pair["a", "b"].candidates == (0, 1)
    assert by_pair["a", "b"].selected == () and by_pair["b", "a"].selected == ()


def test_ties_at_the_boundary_are_kept():
    # ranked by source successes: 0 (3), 1 (2), 2 (2), 3 (1); m = 2 -> cut at count 2, keep ties
    assert top_m_with_ties([0, 1, 2, 3], [3, 2, 2, 1], 2) == (0, 1, 2)
    assert top_m_with_ties([0, 1, 2, 3], [3, 2, 2, 1], 1) == (0,)
    assert top_m_with_ties([0, 1, 2, 3], [1, 1, 1, 1], 1) == (0, 1, 2, 3)
    assert top_m_with_ties([3, 1], [0, 2, 0, 5], 5) == (1, 3)


def test_balancing_ranks_by_source_success_count():
    # A->B candidates: prompts 0..3 (A successes 1, 3, 2, 1); B->A candidates: prompts 4, 5
    a = groups_for("a", ["1000", "1110", "1100", "1000", "0000", "0000"])
    b = groups_for("b", ["0000", "0000", "0000", "0000", "1000", "1100"])
    by_pair = {(s.source, s.receiver): s for s in select_transfers({"a": a, "b": b})}
    assert by_pair["a", "b"].candidates == (0, 1, 2, 3)
    assert by_pair["a", "b"].selected == (1, 2)  # m = 2: A's two most successful groups
    assert by_pair["b", "a"].selected == (4, 5)
    unbalanced = {
        (s.source, s.receiver): s for s in select_transfers({"a": a, "b": b}, balancing=False)
    }
    assert unbalanced["a", "b"].selected == (0, 1, 2, 3)


def test_three_policies_take_each_prompt_from_the_best_peer():
    a = groups_for("a", ["1000", "1100", "0000"])
    b = groups_for("b", ["0000", "0000", "1000"])
    c = groups_for("c", ["1100", "1100", "0000"])
    sels = select_transfers({"a": a, "b": b, "c": c}, balancing=False)
    by_pair = {(s.source, s.receiver): s.selected for s in sels}
    # prompt 0: a has 1 success, c has 2 -> b takes it from c
    # prompt 1: a and c both have 2 -> the tie goes to a, listed first
    assert by_pair["c", "b"] == (0,)
    assert by_pair["a", "b"] == (1,)
    # prompt 2: b is the only mixed group; both a and c take it from b
    assert by_pair["b", "a"] == (2,) and by_pair["b", "c"] == (2,)
    assert by_pair["a", "c"] == () and by_pair["c", "a"] == ()


def test_random_selection_is_count_matched():
    a = groups_for("a", ["1100", "1000", "0000", "1111", "0000", "0000"])
    b = groups_for("b", ["0000", "0000", "1100", "0000", "0000", "1000"])
    gated = {(s.source, s.receiver): s for s in select_transfers({"a": a, "b": b})}
    rand = {
        (s.source, s.receiver): s
        for s in select_transfers({"a": a, "b": b}, selection="random", seed=5)
    }
    for pair in gated:
        assert len(rand[pair].selected) == len(gated[pair].selected)
    assert (
        select_transfers({"a": a, "b": b}, selection="random", seed=5)[0].selected
        == rand["a", "b"].selected
    )


class _EchoImports:
    """The backend's import step only: each peer response comes back tagged with where it was
    from (prompt index and member in its response ids), so the test can see where it lands."""

    def __init__(self):
        self.calls = []

    def import_responses(self, requests, *, too_long):
        self.calls.append({name: len(reqs) for name, reqs in requests.items()})
        return {
            name: [
                Imported((1,), (100 + r.prompt_index, 200 + r.member), (-0.1, -0.1)) for r in reqs
            ]
            for name, reqs in requests.items()
        }


def test_a_receiver_with_two_sources_imports_once_and_gets_each_response_back_in_its_direction():
    # b failed prompts 0 and 1; a is mixed on prompt 1 only, c on prompt 0 only.
    a = groups_for("a", ["1111", "1000", "1111"])
    b = groups_for("b", ["0000", "0000", "1100"])
    c = groups_for("c", ["1100", "1111", "1111"])
    backend = _EchoImports()
    cfg = ExchangeConfig(balancing=False, ablation=AblationConfig(weight="none"))
    outcome = exchange({"a": a, "b": b, "c": c}, OnlinePeers(), backend, cfg, seed=0)
    assert backend.calls == [{"b": 8}]  # one import call, both sources' responses for b in it
    from_a, from_c = outcome.directions["a", "b"], outcome.directions["c", "b"]
    assert set(from_a.groups) == {1} and set(from_c.groups) == {0}
    for prompt, result in ((1, from_a), (0, from_c)):
        seqs = result.groups[prompt].sequences
        assert [q.response_ids for q in seqs] == [(100 + prompt, 200 + j) for j in range(4)]
        assert result.sent == result.admitted == 4
    assert outcome.replaced["b"] == frozenset({0, 1})
    peer_prompts = [g.problem_id for g in outcome.batches["b"] if g.is_peer]
    assert peer_prompts == [b[0].problem.id, b[1].problem.id]
