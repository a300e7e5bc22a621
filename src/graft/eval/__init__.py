"""Evaluation: how good a policy is on held-out problems, as numbers and as the pictures of them
(the stores `graft sample` and `graft store import` write are `graft.peerlog`'s).

`suites` turns benchmarks, local files and a task's own held-out split into suites of problems
with their verifier; `evaluate` samples k responses per problem and reports avg@k (pass@1 as the
mean over k samples) and unbiased pass@k, per suite, per skill and averaged, with the verdict
counts behind them; `report` writes what people look at: the paper-style Markdown table and the
training-curve plots. The trainer evaluates through `evaluate` during a run, `graft eval` after it.
"""
