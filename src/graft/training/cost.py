"""What a run costs, counted where the work is done.

Each policy keeps a `Meter` in the process that holds it (the driver, a worker process, a Ray
actor). Its counts only grow; the trainer reads them before and after a step (`Backend.usage`), so
a step's cost is the difference, and evaluation, which runs between steps, is left out.

Counted per policy (docs/method.md, "What a run costs"):
- `responses`, `gen_tokens`: responses sampled and their tokens;
- `prompt_tokens`: the prompt tokens sampling ran over, each response's prompt counted in full;
- `forward_tokens`: tokens (prompt and response) of forward passes without a backward: scoring
  peer responses on import, recomputed old log-probs, the KL term's reference model;
- `train_tokens`: tokens (prompt and response) of the update's forward and backward passes, once
  per epoch; responses whose gradient is exactly zero are skipped (algo.skip_zero_advantage), so
  they are not counted;
- `<phase>_cpu_s`: process CPU seconds of each phase (generate, score, train), all the process's
  threads; `<phase>_gpu_s` on a CUDA device: the time between CUDA events at the phase's start
  and end on the device's stream.
- `verify_cpu_s` (added by the trainer, not the meter): CPU seconds the verifier pool's workers
  spent on the policy's responses in the step (`VerifierPool.cpu_s`: each worker's own, its
  children's and its sandboxed programs').

FLOPs (Kaplan et al., 2020, with N the model's parameters, shared ones once):
    2 N (prompt_tokens + gen_tokens + forward_tokens) + 6 N train_tokens
an estimate: it leaves out attention's sequence-length term, counts every sequence in full where
graft runs a shared prompt once or an identical response once (`algo.share_prompts`,
`algo.dedup_responses`), and overstates a LoRA update (frozen weights get no weight gradient).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch

COUNTS = ("responses", "gen_tokens", "prompt_tokens", "forward_tokens", "train_tokens")
PHASES = ("generate", "score", "train")


def flop_estimate(params: float, *, forward_tokens: float, train_tokens: float) -> float:
    """2 N per token of a forward pass, 6 N per token of a forward and backward pass."""
    return 2.0 * params * forward_tokens + 6.0 * params * train_tokens


def parameter_count(model: torch.nn.Module) -> int:
    """N: the model's parameters, a tied or shared tensor once."""
    return sum(p.numel() for p in model.parameters())


class Meter:
    """One policy's counts and phase times since it was built (they only grow)."""

    def __init__(self, device: torch.device | str, params: int) -> None:
        self.device, self.params = torch.device(device), params
        self.totals: dict[str, float] = dict.fromkeys(COUNTS, 0.0)
        for phase in PHASES:
            self.totals[f"{phase}_cpu_s"] = 0.0
            if self.device.type == "cuda":
                self.totals[f"{phase}_gpu_s"] = 0.0
        self._open: str | None = None

    def add(self, **counts: float) -> None:
        for key, value in counts.items():
            if key not in COUNTS:
                raise KeyError(f"unknown count {key!r}; known: {', '.join(COUNTS)}")
            self.totals[key] += float(value)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase in CPU seconds (and device seconds on CUDA); a phase inside another is
        part of the outer one."""
        if self._open is not None:
            yield
            return
        self._open = name
        cuda = self.device.type == "cuda"
        if cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
        cpu = time.process_time()
        try:
            yield
        finally:
            self.totals[f"{name}_cpu_s"] += time.process_time() - cpu
            if cuda:
                end.record()
                end.synchronize()
                self.totals[f"{name}_gpu_s"] += start.elapsed_time(end) / 1000.0
            self._open = None

    def read(self) -> dict[str, float]:
        return {**self.totals, "params": float(self.params)}


def step_cost(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """One policy's cost over a step (two `Meter.read`s), with its FLOP estimate."""
    out = {k: after[k] - before.get(k, 0.0) for k in after if k != "params"}
    forward = out["prompt_tokens"] + out["gen_tokens"] + out["forward_tokens"]
    out["flops"] = flop_estimate(
        after["params"], forward_tokens=forward, train_tokens=out["train_tokens"]
    )
    return out


class StepCost:
    """One training step's cost, attributed to each policy: what its worker used since the step
    began (`step_cost`) and the CPU seconds the verifier pool spent on it. Verifying a policy's
    rollouts is timed as it runs (`verified`); what the pool spent besides (a stored peer's
    responses, re-verified for the one policy stored-peer GRAFT trains) is shared evenly.
    `usage` and `pool_cpu` read the workers' meters and the pool's CPU seconds."""

    def __init__(
        self,
        names: Sequence[str],
        usage: Callable[[], Mapping[str, Mapping[str, float]]],
        pool_cpu: Callable[[], float],
    ) -> None:
        self.names = tuple(names)
        self.usage, self.pool_cpu = usage, pool_cpu
        self.spans: list[tuple[float, float]] = []  # (start, end) of each policy's verification
        self.verify_cpu: dict[str, float] = {}
        self._before: Mapping[str, Mapping[str, float]] = {}
        self._pool_before = 0.0

    def start(self) -> None:
        """The step begins: the meters' readings now."""
        self.verify_cpu = dict.fromkeys(self.names, 0.0)
        self._before, self._pool_before = self.usage(), self.pool_cpu()

    def new_rollout(self) -> None:
        self.spans = []

    def verified(self, name: str, start: float, cpu_before: float) -> None:
        """`name`'s rollouts were verified from `start` (perf_counter) on, the pool's CPU seconds
        having been `cpu_before`."""
        self.spans.append((start, time.perf_counter()))
        self.verify_cpu[name] = self.verify_cpu.get(name, 0.0) + self.pool_cpu() - cpu_before

    @property
    def busy_s(self) -> float:
        """Seconds the driver spent verifying this step (the policies' spans summed)."""
        return sum(b - a for a, b in self.spans)

    def since_start(self) -> dict[str, dict[str, float]]:
        """Each policy's cost since `start`: FLOPs, tokens, seconds and verification CPU."""
        after, spent = self.usage(), self.pool_cpu() - self._pool_before
        rest = max(0.0, spent - sum(self.verify_cpu.values())) / len(self.names)
        return {
            name: {**step_cost(self._before[name], after[name]),
                   "verify_cpu_s": self.verify_cpu.get(name, 0.0) + rest}
            for name in self.names
        }  # fmt: skip


class CostLog:
    """Per step and cumulative cost metrics: `cost/<key>` and `cost/cum/<key>` under each
    policy's prefix, and the run's totals unprefixed when several policies train. A resumed run
    continues the cumulative sums from the last logged step."""

    def __init__(self, prefix: Mapping[str, str], previous: Mapping[str, float] | None = None):
        self.prefix = dict(prefix)
        self.cum: dict[str, float] = {
            k: float(v) for k, v in (previous or {}).items() if "cost/cum/" in k
        }

    def metrics(self, steps: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """The metrics of one step from each policy's `step_cost`."""
        out: dict[str, float] = {}
        run: dict[str, float] = {}
        for name, cost in steps.items():
            for key, value in cost.items():
                out[f"{self.prefix[name]}cost/{key}"] = value
                run[key] = run.get(key, 0.0) + value
        if len(self.prefix) > 1:
            out.update({f"cost/{key}": value for key, value in run.items()})
        for key in list(out):
            cum = key.replace("cost/", "cost/cum/", 1)
            self.cum[cum] = self.cum.get(cum, 0.0) + out[key]
        out.update(self.cum)
        return out


def last_cumulative(records: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The newest cumulative cost metrics of a metrics log (a resumed run goes on from them)."""
    out: dict[str, float] = {}
    for record in records:
        out.update({k: v for k, v in record.items() if "cost/cum/" in k})
    return out
