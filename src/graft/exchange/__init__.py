"""GRAFT's exchange: from every policy's verified groups to each receiver's training batch.

The one entry is `exchange(groups, source, backend, cfg, seed=...)`, for co-training peers
(`OnlinePeers`) and a stored peer (`StoredPeer`) alike. The paper's path is pure functions, one
module a stage, in the order of docs/method.md:

    gate.py        1-2  the gate C(A->B), balancing, one source per prompt (more than two
                        policies), one direction without balancing (stored peer)
    replace.py     3    the responses sent; the peer groups that replace the failed ones
    algorithm.py   4    Algorithm 1, the step itself; the import (re-tokenize + score) goes
                        through the backend
    sources.py          where the peer groups come from: the co-training policies, or a stored
                        peer; which one a config asks for
    weight.py      5    the compatibility score s and the weight w
    stored.py      8    the stored peer: groups from a trajectory store, re-verified
    ablations.py        controls and baselines, each selected by one config value
    diagnostics.py      the per-direction metrics and the admission warning
    records.py          the records between the stages

(The objective, 6, is `graft.training.loss`; the peer-last minibatches, 7, `graft.training.update`.)
"""

from graft.exchange.algorithm import (
    exchange,
    graft_direction,
    no_exchange,
    own_batches,
    transfer_requests,
)
from graft.exchange.diagnostics import AdmissionMonitor
from graft.exchange.gate import balance, gate, top_m_with_ties
from graft.exchange.records import DirectionResult, ExchangeOutcome, Offer, Selection, StepInfo
from graft.exchange.replace import receiver_batch
from graft.exchange.sources import OnlinePeers, Source, make_source, select_transfers
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
    "StepInfo",
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
