"""Generation backends. Every completion carries token ids AND behavior log-probs."""

from graft.rollout.generate import Sample, SamplingParams, sample

__all__ = ["Sample", "SamplingParams", "sample"]
