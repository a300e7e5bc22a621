"""graft: RLVR for language models with GRPO and GRAFT (gated peer-trajectory exchange)."""

__version__ = "0.1.0"
