"""Generation with vLLM (optional GPU extra; imported only when `rollout.engine=vllm`).

Same contract as `graft.rollout.generate.sample`: one `Sample` per prompt row with token ids,
the log-prob of every sampled token under the sampling distribution, and the finish reason.
vLLM is asked for the log-probs AFTER temperature scaling (`logprobs_mode="processed_logprobs"`),
which is what graft's own sampler records and what a training forward pass computes; top-p must
stay 1 for training rollouts for the same reason. After every optimizer update the policy pushes
its weights into the engine (`sync_weights`); the engine then samples from the current policy.

Written against vLLM's documented offline API (`LLM`, `SamplingParams`, token prompts); it cannot
run on a machine without a CUDA GPU, and its test is marked `gpu`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from graft.rollout.generate import Sample, SamplingParams


class VLLMEngine:
    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        max_model_len: int = 8192,
        seed: int = 0,
    ) -> None:
        # The in-process engine lets `sync_weights` reach the model directly.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError:
            raise ImportError(
                "rollout.engine=vllm needs vLLM on a CUDA machine: pip install vllm"
            ) from None
        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            trust_remote_code=False,
            logprobs_mode="processed_logprobs",
        )

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        stop_ids: Sequence[int],
        seed: int,
    ) -> list[Sample]:
        from vllm import SamplingParams as VLLMSamplingParams

        # One request per row, each with its own seed (rows repeat a prompt n times).
        sampling = [
            VLLMSamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,
                max_tokens=params.max_new_tokens,
                stop_token_ids=list(stop_ids),
                logprobs=0,  # the sampled token's own log-prob
                seed=(seed + i) % (2**63),
                skip_special_tokens=True,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        samples = []
        for out in outputs:
            completion = out.outputs[0]
            ids = tuple(completion.token_ids)
            logprobs = tuple(
                float(step[token].logprob) for step, token in zip(completion.logprobs, ids)
            )
            stopped = completion.finish_reason == "stop"
            samples.append(Sample(ids, logprobs, "stop" if stopped else "length"))
        return samples

    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load the trainer's current weights into the engine's model."""
        runner = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner
        runner.model.load_weights(weights=list(named_tensors))
