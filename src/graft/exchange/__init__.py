"""GRAFT's exchange: from every policy's verified groups to each receiver's training batch.

The one entry is `exchange(groups, source, backend, cfg, seed=...)`, for co-training peers
(`OnlinePeers`) and a stored peer (`StoredPeer`) alike. The paper's path is pure functions, one
module a stage, in the order of docs/method.md:

    gate.py        1-2  gate C(A->B), balancing, one source per prompt (more than two policies)
    replace.py     3, 6 the responses sent; the peer groups that replace the failed ones
    weight.py      5    compatibility s and weight w
    step.py             the step itself, through the backend (import = re-tokenize + score)
    ablations.py        controls and baselines, each selected by one config value
    diagnostics.py      the per-direction metrics and the admission warning
    stored.py           the stored peer: groups from a trajectory store, re-verified
"""

from graft.exchange.diagnostics import AdmissionMonitor
from graft.exchange.gate import balance, gate, top_m_with_ties
from graft.exchange.records import DirectionResult, ExchangeOutcome, Offer, Selection
from graft.exchange.replace import receiver_batch
from graft.exchange.step import (
    OnlinePeers,
    Source,
    exchange,
    graft_direction,
    make_source,
    no_exchange,
    own_batches,
    select_transfers,
    transfer_requests,
)
from graft.exchange.stored import StoredPeer
from graft.exchange.weight import admission_weight, compatibility, mean_logprob

__all__ = [
    "AdmissionMonitor",
    "DirectionResult",
    "ExchangeOutcome",
    "Offer",
    "OnlinePeers",
    "Selection",
    "Source",
    "StoredPeer",
    "admission_weight",
    "balance",
    "compatibility",
    "exchange",
    "gate",
    "graft_direction",
    "make_source",
    "mean_logprob",
    "no_exchange",
    "own_batches",
    "receiver_batch",
    "select_transfers",
    "top_m_with_ties",
    "transfer_requests",
]
