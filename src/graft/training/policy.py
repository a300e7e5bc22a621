"""A policy: one model with its tokenizer, prompt template, optimizer and sampler.

This is the unit of heavy work (generate, score, train, save, load). The trainer never touches a
model directly; it talks to policies through a backend (in this process, worker processes, Ray
actors) using only the plain records of `graft.types`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from graft.errors import DataError
from graft.models.load import plain_base_path
from graft.models.lora import (
    adapter_dropout,
    load_adapter,
    save_adapter,
)
from graft.models.modeling import score_sequences
from graft.rollout import Sample, SamplingParams, sample
from graft.seeds import row_seeds
from graft.training.build import PolicySpec, build_parts, set_warmup_lr
from graft.training.cost import Meter, parameter_count
from graft.training.optim_state import (
    OPTIMIZER_FILE,
    load_sharded_into_unsharded,
    saved_shards,
)
from graft.training.update import train_on_batch
from graft.types import Completion, Imported, PeerResponse, Problem, Rollout, TrainGroup


def sample_rows(
    model: torch.nn.Module,
    rows: Sequence[Sequence[int]],
    params: SamplingParams,
    row_seeds: Sequence[int],
    spec: PolicySpec,
    *,
    stop_ids: Sequence[int],
    pad_id: int,
) -> list[Sample]:
    """`graft.rollout.sample` with the policy's chunking and prompt sharing."""
    return sample(
        model,
        rows,
        params,
        stop_ids=stop_ids,
        pad_id=pad_id,
        row_seeds=row_seeds,
        batch_size=spec.rollout.batch_size,
        share_prompts=spec.algo.share_prompts,
    )


def score_rows(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    spec: PolicySpec,
    *,
    pad_id: int,
) -> list[tuple[float, ...]]:
    """`score_sequences` at the policy's rollout temperature, micro-batch size and sharing."""
    return score_sequences(
        model,
        prompts,
        responses,
        pad_id=pad_id,
        temperature=spec.rollout.temperature,
        batch_size=spec.algo.micro_batch_size,
        share_prompts=spec.algo.share_prompts,
        dedup_responses=spec.algo.dedup_responses,
    )


class Policy:
    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec
        self.name = spec.model.name
        self._base_path: str | None = None  # a LoRA policy's base, as PEFT names it (on save)
        parts = build_parts(spec)
        self.device, self.model, self.tokenizer = parts.device, parts.model, parts.tokenizer
        self.adapter, self.fingerprint = parts.adapter, parts.fingerprint
        self.precision, self.ref_model = parts.precision, parts.ref_model
        self.optimizer, self.engine = parts.optimizer, parts.engine
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.stop_ids = self._stop_ids()
        self.num_updates = 0
        self._prompt_cache: dict[str, tuple[int, ...]] = {}
        self.meter = Meter(self.device, parameter_count(self.model))

    # ----------------------------------------------------------------- prompts and tokens
    def _stop_ids(self) -> tuple[int, ...]:
        ids = {int(self.tokenizer.eos_token_id)}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            ids.add(gen_eos)
        elif isinstance(gen_eos, list | tuple):
            ids.update(int(i) for i in gen_eos)
        return tuple(sorted(ids))

    def prompt_text(self, task_prompt: str) -> str:
        """The task prompt in this policy's own template (and chat template when configured)."""
        text = self.spec.model.prompt_template.replace("{prompt}", task_prompt)
        if self.spec.model.chat_template:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
            )
        return text

    def encode_prompt(self, task_prompt: str) -> tuple[int, ...]:
        """Token ids of the task prompt in this policy's template (no length limit)."""
        text = self.prompt_text(task_prompt)
        # A chat template already holds the special tokens the model expects.
        return tuple(
            self.tokenizer.encode(text, add_special_tokens=not self.spec.model.chat_template)
        )

    def prompt_length(self, task_prompt: str) -> int:
        """Tokens of the task prompt as this policy sees it (evaluation skips the longest)."""
        return len(self.encode_prompt(task_prompt))

    def prompt_ids(self, task_prompt: str) -> tuple[int, ...]:
        cached = self._prompt_cache.get(task_prompt)
        if cached is not None:
            return cached
        ids = self.encode_prompt(task_prompt)
        limit = self.spec.rollout.max_prompt_tokens
        if len(ids) > limit:
            raise DataError(
                f"policy {self.name}: prompt is {len(ids)} tokens, over rollout.max_prompt_tokens="
                f"{limit}: {task_prompt[:80]!r}"
            )
        if not ids:
            raise DataError(f"policy {self.name}: prompt {task_prompt[:80]!r} encodes to no tokens")
        if len(self._prompt_cache) > 100_000:
            self._prompt_cache.clear()
        self._prompt_cache[task_prompt] = ids
        return ids

    def describe(self) -> dict[str, str]:
        """Provenance of this policy for the trajectory store."""
        return {
            "model_revision": self.fingerprint,
            "tokenizer": self.spec.model.tokenizer or self.spec.model.path,
            "device": str(self.device),
            "pid": str(os.getpid()),
        }

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    # ----------------------------------------------------------------- heavy work
    def generate(
        self, problems: Sequence[Problem], *, n: int, params: SamplingParams, seed: int
    ) -> list[Rollout]:
        """n samples for each problem, each drawn from its own stream, seeded from `seed`, the
        problem's id and the sample's index (`graft.seeds.row_seeds`)."""
        prompt_ids_P = [self.prompt_ids(p.prompt) for p in problems]
        rows = [ids for ids in prompt_ids_P for _ in range(n)]
        with self.meter.phase("generate"):
            seeds = row_seeds(seed, [p.id for p in problems], n)
            samples = self._sample(rows, params, row_seeds=seeds)
        self.meter.add(
            responses=len(samples),
            gen_tokens=sum(len(s.token_ids) for s in samples),
            prompt_tokens=sum(len(ids) for ids in rows),
        )
        rollouts = []
        for i, (problem, ids) in enumerate(zip(problems, prompt_ids_P)):
            completions = tuple(
                Completion(
                    text=self.decode(s.token_ids),
                    token_ids=s.token_ids,
                    logprobs=s.logprobs,
                    finish_reason=s.finish_reason,
                )
                for s in samples[i * n : (i + 1) * n]
            )
            rollouts.append(Rollout(problem, self.name, ids, completions))
        return rollouts

    def _sample(
        self,
        rows: list[tuple[int, ...]],
        params: SamplingParams,
        *,
        row_seeds: list[int],
    ) -> list:
        if self.engine is not None:
            return self.engine.sample(rows, params, stop_ids=self.stop_ids, row_seeds=row_seeds)
        return self._sample_rows(rows, params, row_seeds)

    def _sample_rows(
        self, rows: list[tuple[int, ...]], params: SamplingParams, row_seeds: list[int]
    ) -> list[Sample]:
        """graft's own sampler, each row from its own stream."""
        with self.precision.forward():
            return sample_rows(
                self.model,
                rows,
                params,
                row_seeds,
                self.spec,
                stop_ids=self.stop_ids,
                pad_id=self.pad_id,
            )

    def score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        """Behavior log-probs (current weights, rollout temperature, compute dtype) of given token
        sequences."""
        self.meter.add(forward_tokens=sum(len(p) + len(r) for p, r in zip(prompts, responses)))
        with self.meter.phase("score"), self.precision.forward():
            return self._score(prompts, responses)

    def _score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        return score_rows(self.model, prompts, responses, self.spec, pad_id=self.pad_id)

    def import_responses(
        self, requests: Sequence[PeerResponse], *, too_long: str = "drop"
    ) -> list[Imported]:
        """Peer response strings in this policy's own tokenization, with its behavior log-probs.

        The prompt is built with this policy's template; the text is encoded without special
        tokens; this policy's EOS is appended when the peer stopped on EOS, none when it was cut at
        the length limit. Longer than rollout.max_new_tokens: dropped (or truncated).
        """
        with self.meter.phase("score"):
            return self._import(requests, too_long=too_long)

    def _import(self, requests: Sequence[PeerResponse], *, too_long: str) -> list[Imported]:
        encoded = self.encode_responses(requests, too_long=too_long)
        usable = [i for i, imp in enumerate(encoded) if not imp.drop]
        prompts = [encoded[i].prompt_ids for i in usable]
        scores = self.score(prompts, [encoded[i].response_ids for i in usable]) if usable else []
        for i, logprobs in zip(usable, scores, strict=True):
            encoded[i] = dataclasses.replace(encoded[i], logprobs=logprobs)
        return encoded

    def encode_responses(
        self, requests: Sequence[PeerResponse], *, too_long: str = "drop"
    ) -> list[Imported]:
        """Response strings in this policy's own tokenization, by the rules of `import_responses`,
        without log-probs (`graft sft` trains on them as they are)."""
        limit = self.spec.rollout.max_new_tokens
        eos = int(self.tokenizer.eos_token_id)
        out: list[Imported] = []
        for req in requests:
            given = req.prompt_ids  # the source's own context (an import), else the task prompt
            prompt_ids = given if given is not None else self.prompt_ids(req.task_prompt)
            ids = list(self.tokenizer.encode(req.text, add_special_tokens=False))
            roundtrip = self.decode(ids) == req.text
            if req.stopped:
                ids.append(eos)
            truncated = False
            if len(ids) > limit and too_long == "truncate":
                ids, truncated = ids[:limit], True
            drop = "empty" if not ids else "too_long" if len(ids) > limit else ""
            kept = () if drop else tuple(ids)
            out.append(Imported(prompt_ids, kept, (), drop, truncated, roundtrip_ok=roundtrip))
        return out

    def _set_lr(self) -> float:
        self.num_updates += 1
        return set_warmup_lr(self.optimizer, self.spec.model.optim, self.num_updates)

    def train(self, groups: Sequence[TrainGroup], *, seed: int = 0) -> dict[str, float]:
        """One update on a rollout batch; its statistics (the tokens it ran go to the meter)."""
        if self.spec.algo.recompute_old_logprobs:
            groups = self._recompute_old(groups)
        with self.meter.phase("train"):
            stats = self._update(groups, seed=seed)
        self.meter.add(
            train_tokens=stats.pop("cost/train_tokens", 0.0),
            forward_tokens=stats.pop("cost/ref_tokens", 0.0),
        )
        return stats

    def usage(self) -> dict[str, float]:
        """What this policy has cost since it was built (graft.training.cost)."""
        return self.meter.read()

    def _update(self, groups: Sequence[TrainGroup], *, seed: int) -> dict[str, float]:
        # the adapter's own dropout: models.N.lora's, or that of the adapter models.N.adapter names
        dropout = self.adapter is not None and self.adapter.peft_config["default"].lora_dropout > 0
        with adapter_dropout(self.model, seed) if dropout else contextlib.nullcontext():
            stats = train_on_batch(
                self.model,
                self.optimizer,
                groups,
                self.spec.update_settings(),
                pad_id=self.pad_id,
                ref_model=self.ref_model,
                set_lr=self._set_lr,
                seed=seed,
                precision=self.precision,
            )
        if self.engine is not None:
            self.engine.sync_weights(self.model.named_parameters())
        return stats

    def _recompute_old(self, groups: Sequence[TrainGroup]) -> list[TrainGroup]:
        seqs = [q for g in groups for q in g.sequences]
        old = self.score([q.prompt_ids for q in seqs], [q.response_ids for q in seqs])
        it = iter(old)
        return [
            dataclasses.replace(
                g,
                sequences=tuple(dataclasses.replace(q, old_logprobs=next(it)) for q in g.sequences),
            )
            for g in groups
        ]

    def close(self) -> None:
        """Release what outlives this object: the vLLM engine's GPU memory and its place (one
        sleep-mode engine per process)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    # ----------------------------------------------------------------- checkpoints
    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        if self.adapter is not None:  # the adapter alone: the base is read from models.N.path
            if self._base_path is None:
                cache = Path(self.spec.cache_dir) if self.spec.cache_dir else None
                self._base_path = plain_base_path(self.spec.model, cache_dir=cache)
            base_hash = self.fingerprint.split("+lora:")[0]
            save_adapter(
                self.adapter,
                directory,
                base=self.spec.model,
                base_path=self._base_path,
                base_fingerprint=base_hash,
            )
        else:
            self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        state = {"num_updates": self.num_updates, "precision": self.precision.state_dict()}
        (directory / "policy_state.json").write_text(json.dumps(state))

    def load(self, directory: str | Path) -> None:
        directory = Path(directory)
        if self.adapter is not None:
            load_adapter(self.adapter, directory)
        else:
            self._load_weights(directory)
        if saved_shards(directory) > 1:  # a sharded run's AdamW state, gathered
            load_sharded_into_unsharded(directory, self.model, self.optimizer)
        else:
            optim_state = torch.load(directory / OPTIMIZER_FILE, weights_only=True)
            self.optimizer.load_state_dict(optim_state)
        state = json.loads((directory / "policy_state.json").read_text())
        self.num_updates = state["num_updates"]
        self.precision.load_state_dict(state.get("precision", {}))
        if self.engine is not None:
            self.engine.sync_weights(self.model.named_parameters())

    def _load_weights(self, directory: Path) -> None:
        state = load_file(str(directory / "model.safetensors"))
        result = self.model.load_state_dict(state, strict=False)
        # save_pretrained leaves out an output head tied to the input embedding.
        tied = bool(getattr(self.model.config, "tie_word_embeddings", False))
        missing = [k for k in result.missing_keys if not (tied and k.startswith("lm_head."))]
        if missing or result.unexpected_keys:
            raise RuntimeError(
                f"checkpoint {directory} does not match policy {self.name}: missing {missing[:5]}, "
                f"unexpected {result.unexpected_keys[:5]}"
            )
        self.model.tie_weights()
