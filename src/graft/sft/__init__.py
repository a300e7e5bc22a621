"""`graft sft`: supervised fine-tuning of one policy on a trajectory store's verified-correct
responses, such as a peer's run: the "SFT on the peer's answers, then RL" baseline.

    data.py   the store's responses re-verified with this run's verifier, deduplicated, split
              into training and held-out prompts (pure, given the verdicts)
    loop.py   the run: the responses in the policy's own tokens, token-mean NLL steps with
              gradient accumulation, validation loss and held-out accuracy, the best checkpoint,
              cost, progress, trackers and resume as in `graft train`

It is its own command over the store, not a branch of the trainer; its checkpoints are what
`graft train` takes as `models.N.path`.
"""
