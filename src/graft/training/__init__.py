"""Training: the policy and its update, below the loop that drives them (`graft.trainer`).

`policy` holds one model with its tokenizer and optimizer and samples, scores, imports peer
responses and trains (built by `build`; sharded over ranks by `shards` and `sharded_policy`);
`update` is the minibatched clipped policy-gradient update, `loss` its pure objective and
aggregation; `contrast` settles the groups without reward contrast (keep, drop, resample) and
`cost` counts what a run costs; `recorder` writes every rollout of a run to its trajectory store,
`signal` says whether each policy is learning, `progress` draws the bar. The group math is
`graft.groups`, the log-probabilities and precision `graft.models`, so that packages below the
trainer never import it.
"""
