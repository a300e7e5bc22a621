"""Training: the step of the method, and the policy it updates.

`trainer` runs the loop, one step as the method reads (rollout -> verify -> group -> exchange ->
update -> store -> log); `groups` computes group-relative advantages; `policy` holds one model
with its tokenizer and optimizer and samples, scores, imports peer responses and trains;
`update` is the minibatched clipped policy-gradient update, `loss` its pure objective and
aggregation, `modeling` the response log-probabilities both scoring and training use, and
`precision` what is stored versus computed (autocast, fp32 master weights, loss scaling).
`recorder` writes every rollout of a run to its trajectory store. What is not the step lives
elsewhere: run directories and checkpoints in `graft.rundir`, model loading in `graft.models`,
the exchange in `graft.exchange`.
"""
