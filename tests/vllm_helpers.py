"""What the vLLM engine tests share: a policy on the engine, its sampling settings, and the gap
between the engine's log-probs and the policy's own scoring (the `standin` fixture is in
conftest)."""

from pathlib import Path

from graft.config import AlgoConfig, ModelConfig, OptimConfig, RolloutConfig
from graft.rollout import SamplingParams
from graft.training.policy import Policy, PolicySpec
from graft.types import Problem, TrainGroup, TrainSequence

PREFIX = "Add the two numbers below and answer with the digits of the sum only.\n"
PROBLEMS = [Problem("12+34=", "46"), Problem("50+7=", "57"), Problem("99+99=", "198")]
ROOT = Path(__file__).resolve().parents[1]


def _policy(
    path: str, engine: str = "vllm", dtype: str = "float32", shards: int = 1, **rollout
) -> Policy:
    """A policy on the engine; with `shards` > 1, rank 0 of a sharded one (this process)."""
    from graft.training.sharded_policy import ShardedPolicy

    spec = PolicySpec(
        model=ModelConfig(
            name="p",
            path=path,
            dtype=dtype,
            prompt_template=PREFIX + "{prompt}",
            optim=OptimConfig(lr=1e-3),  # a large step, so stale weights would show
            shards=shards,
        ),
        rollout=RolloutConfig(engine=engine, **{"max_new_tokens": 8, **rollout}),
        algo=AlgoConfig(micro_batch_size=64 // shards, minibatches=1),  # every rank trains
        seed=0,
    )
    return ShardedPolicy(spec) if shards > 1 else Policy(spec)


def _params(policy: Policy) -> SamplingParams:
    r = policy.spec.rollout
    return SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k)


def _worst_gap(policy: Policy, seed: int) -> tuple[float, list]:
    """Largest |engine log-prob - the policy's own scoring| over a rollout batch."""
    rollouts = policy.generate(PROBLEMS, n=6, params=_params(policy), seed=seed)
    completions = [c for r in rollouts for c in r.completions_G]
    prompts = [r.prompt_ids for r in rollouts for _ in r.completions_G]
    scored = policy.score(prompts, [c.token_ids for c in completions])
    worst = max(abs(a - b) for c, s in zip(completions, scored) for a, b in zip(c.logprobs, s))
    return worst, rollouts


def _train_step(policy: Policy, rollouts) -> dict[str, float]:
    """One update on the rollouts (advantage +1 / -1 by row parity); the policy then syncs."""
    groups = [
        TrainGroup(
            problem_id=r.problem.id,
            sequences=tuple(
                TrainSequence(r.prompt_ids, c.token_ids, c.logprobs, 1.0 if i % 2 else -1.0)
                for i, c in enumerate(r.completions_G)
            ),
        )
        for r in rollouts
    ]
    return policy.train(groups, seed=1)


def engine_tiny_paths() -> dict[str, str]:
    """Small models the CPU backend's attention takes (head size 32; the `tiny_paths` models'
    16 is refused there), built in seconds and cached: {"llama": dir, "qwen2": dir}."""
    from conftest import small_tiny_spec
    from graft.models.tiny import build_tiny

    heads = {"heads": 2, "kv_heads": 1}
    return {
        "llama": str(build_tiny(small_tiny_spec("llama", "char", **heads))),
        "qwen2": str(build_tiny(small_tiny_spec("qwen2", "bpe", bpe_vocab_size=300, **heads))),
    }
