"""The config sections: nested frozen dataclasses, one docstring per field (`graft config --docs`).
A `Config` validates itself once, when it is made (`graft.config.checks.validate`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from graft.config.checks import validate
from graft.config.lib import INTERNAL
from graft.config.task_schema import TaskConfig


@dataclass(frozen=True)
class RunConfig:
    out_dir: str = "runs/graft"
    """Run directory: config.yaml, metrics.jsonl, checkpoints/ are written here."""
    seed: int = 0
    """Seed for prompt order, sampling and initialisation of everything random in the run."""
    label: str = ""
    """A name for this run's method in `graft compare` (runs that differ only in seed share it);
    empty: the method is named by the config keys in which it differs from the other runs."""
    steps: int = 50
    """Number of rollout steps (one rollout batch and its update per step)."""
    save_every: int = 25
    """Checkpoint every this many steps (and always after the last step); 0: only at the end."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep (older ones are deleted)."""
    log_every: int = 10
    """Every this many steps, one plain line per policy: its all-fail and all-pass shares, the
    share of its all-fail prompts a peer rescued, and the admitted share of what peers sent;
    0: never (summary.json has the whole run's shares either way)."""
    no_signal_after: int = 5
    """Warn when a policy has had no learning signal (every group all-fail or all-pass and no peer
    response admitted) for this many steps in a row; 0: never."""
    threads: int = 0
    """Torch intra-op threads per policy; 0: all cores for policies that run one after the other
    (`inprocess`), the cores divided among the policies when they run in parallel."""
    report_to: tuple[Literal["tensorboard", "wandb", "mlflow", "trackio"], ...] = ()
    """Experiment trackers that also get every step's metrics, the resolved config as the run's
    parameters and the run's curves.png (each an optional extra: `pip install -e '.[wandb]'` in
    a clone of graft, or the package itself, as the hint graft prints names it). tensorboard:
    RUN_DIR/tensorboard; wandb: RUN_DIR/wandb (WANDB_MODE=offline needs no network); mlflow:
    MLFLOW_TRACKING_URI; trackio: its local store (TRACKIO_DIR). A resumed run continues the same
    tracker runs (RUN_DIR/trackers.json names them)."""
    project: str = "graft"
    """The W&B or trackio project, or the MLflow experiment, the run is logged under (the
    tracker run is named after the run directory)."""
    progress: bool = True
    """Show a progress bar on the console."""
    backend: Literal["auto", "inprocess", "processes", "ray"] = "auto"
    """Where policies run: `processes` (one worker process per policy, in parallel), `inprocess`
    (all in the driver, one after the other), `ray` (one Ray actor per policy; connects to
    RAY_ADDRESS when set); `auto`: inprocess for one policy, else processes."""
    ray_strategy: Literal["none", "pack", "spread"] = "none"
    """Ray backend: where the actors go. none: each sharded policy's ranks on one node
    (STRICT_PACK), the other actors wherever Ray puts them; pack: one placement group over every
    rank of every policy, on as few nodes as possible; spread: the same group spread across
    nodes (a sharded policy's ranks on several nodes)."""


@dataclass(frozen=True)
class VerifyConfig:
    verifier: str = ""
    """Verifier instead of the task's own: a built-in name (`math`, the training verdict: a right
    box followed by another value earns nothing; `math_careful`, the careful reading of what
    follows the box; `final_number`) or an import
    path `package.module:name` of a function taking (response, gold, problem) and returning a
    graft Verdict (one taking (response, gold) gets no problem text), or of an object that
    follows graft.verify.registry.Verifier."""
    workers: int = 2
    """Verifier worker processes (with run.backend ray: Ray actors of one CPU each)."""
    timeout_s: float = 5.0
    """Hard per-response time limit; a worker past it is killed, the response scored `timeout`.
    A built-in verifier with a time budget gets the larger of this and the problem's budget
    (the code verifiers: each test is its own sandboxed run, verify.code.verifier.time_budget_s)."""
    extract: Literal["boxed", "answer_line"] = "boxed"
    """How the math verifier finds a response's answer: `boxed`, its final `\\boxed{}` (several
    adjacent boxes count as one answer); `answer_line`, also an "answer is X" / "Answer: X" last
    line when there is no box. Opt-in: it rewards responses that never box their answer, and a
    response cut off after "the answer is 4" (of 45) is read as 4."""
    max_unparseable_golds: float = 0.05
    """Largest share of a problem set whose gold answers the verifier cannot parse (so no response
    could ever be rewarded on them). Above it graft refuses to start; below it the first few are
    reported, training leaves them out and evaluation scores them as `error`."""


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    """AdamW learning rate (constant after warm-up), at most 1: AdamW moves every weight by about
    lr per step, so larger rates only overflow the weights."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay; lr x weight_decay at most 1 (each step multiplies the weights
    by 1 - lr x weight_decay)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value per optimizer step; 0: off."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many optimizer steps."""


@dataclass(frozen=True)
class LoRAConfig:
    r: int = 0
    """Rank of the low-rank adapters (LoRA, Hu et al. 2021, through `peft`); 0: off, the whole
    model is trained. With r > 0 only the adapters train and hold optimizer state; the base
    weights stay as loaded, and checkpoints hold the adapter alone."""
    alpha: float = 0.0
    """Scale numerator: an adapter's output is multiplied by alpha / r; 0: alpha = 2 r."""
    dropout: float = 0.0
    """Dropout on the adapters' input in the update's forward passes (seeded per step); sampling
    and scoring run without it."""
    target_modules: str | tuple[str, ...] = ()
    """The layers that get adapters, as in peft: a list of names (`[q_proj, v_proj]`; a module
    matches when its full name is the entry or ends in `.` + the entry, so
    `model.layers.0.self_attn.q_proj` is that one layer), `all-linear` (every linear layer except
    the output head), or another string, a regular expression the full module name must match
    (`.*layers\\.[01]\\..*(q|v)_proj`); empty: every linear layer except the output head."""


@dataclass(frozen=True)
class ZeroContrastConfig:
    mode: Literal["keep", "drop", "resample"] = "keep"
    """What happens to a group whose rewards are all equal (all-pass, or all-fail and not replaced
    by a peer's group), decided after the exchange. `keep`: it stays with advantage 0 and its
    tokens count in the token-mean denominator (GRPO, the paper); `drop`: it leaves the loss and
    the denominator; `resample` (DAPO's dynamic sampling): dropped, and this policy samples
    further prompts alone, each round as many as its batch still misses, keeping the groups with
    contrast until the step holds `rollout.prompts_per_step` of them or the budget is spent (then
    it trains on what it has and reports the fill fraction)."""
    max_rounds: int = 4
    """`resample`: extra sampling rounds per step at most (at least 1)."""
    max_responses: int | None = None
    """`resample`: extra responses per step at most (at least rollout.group_size; the last round
    is cut to the prompts that fit); null: only `max_rounds` bounds them."""


@dataclass(frozen=True)
class ModelConfig:
    name: str = "policy"
    """Short name; metrics of this policy are logged under `m/<name>/...` when several train."""
    path: str = "tiny:llama-char-add"
    """Hugging Face hub name, local directory, local .gguf file, or `tiny:<preset>` (built here)."""
    tokenizer: str = ""
    """Tokenizer name or path when it differs from `path`."""
    revision: str = ""
    """Hub revision (branch, tag or commit) to load; empty: the default branch."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Compute dtype: the forward and backward passes of sampling, scoring and the update run
    under autocast to it; log-probs and the loss stay float32. The weights and AdamW state are
    stored in `param_dtype` (float32 master weights by default, as verl and TRL do). float16 adds
    a dynamic loss scaler (a step whose gradients overflow is skipped and counted)."""
    param_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the stored weights and AdamW state: float32 (master weights), or the same 16-bit
    dtype as `dtype` for pure low-precision training, an opt-in that warns: at RLVR learning
    rates most AdamW steps round to nothing in bfloat16."""
    device: str = "auto"
    """Torch device of this policy: `auto` (CUDA when visible, else CPU), `cpu`, `cuda`, ..."""
    num_gpus: float = 0.0
    """Ray backend: GPUs reserved for this policy's actor (for each of its ranks when sharded)."""
    num_cpus: float = 0.0
    """Ray backend: CPUs reserved for this policy's actor (for each of its ranks when sharded);
    0: its share of run.threads."""
    prompt_template: str = "{prompt}"
    """How this policy sees a task prompt; `{prompt}` is replaced by the task text."""
    chat_template: bool = False
    """Wrap the templated prompt as a user turn with the tokenizer's chat template."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """This policy's optimizer."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """Train low-rank adapters instead of the whole model (off by default)."""
    adapter: str = ""
    """A LoRA adapter to train on: a PEFT adapter folder (adapter_config.json and
    adapter_model.safetensors: a graft LoRA checkpoint, or one saved by peft or TRL) for the base
    model `path`. Its own settings (r, alpha, dropout, target modules) apply, so `lora` stays
    unset; the run starts from its weights with a fresh optimizer. Empty: none."""
    zero_contrast: ZeroContrastConfig = field(default_factory=ZeroContrastConfig)
    """What happens to this policy's groups without reward contrast: keep, drop or resample."""
    activation_checkpointing: bool = False
    """Keep only each decoder layer's input for the backward pass and run the layer again there
    (torch.utils.checkpoint): the update holds far fewer activations per micro-batch, at the cost
    of one more forward of every layer. The gradients are those without it."""
    shards: int = 1
    """Ranks this policy's update runs on (PyTorch FSDP2: parameters, gradients and AdamW state
    split K ways; gloo on CPU, NCCL on GPU), in the worker-process backend (child processes; on
    GPUs rank r uses device index + r) or the Ray backend (one actor per rank, placed by
    run.ray_strategy). Sampling, scoring and the update run on every rank, each on its share of the
    rows; no rank keeps a full copy. The update and the rollouts equal one rank's. 1: one process,
    not sharded."""


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int = 16
    """Prompts in each rollout batch; every policy sees the same prompts."""
    group_size: int = 8
    """Responses sampled per prompt (n); at least 2."""
    max_new_tokens: int = 64
    """Response length limit; a response cut here has finish_reason `length`."""
    max_prompt_tokens: int = 512
    """Prompts longer than this (after the template) are an error."""
    temperature: float = 1.0
    """Sampling temperature; log-probs for training use the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling; keep 1.0 for training (truncation biases importance ratios)."""
    top_k: int = 0
    """Top-k sampling; 0: off."""
    batch_size: int = 0
    """Sequences generated at once; 0: the whole rollout batch."""
    engine: Literal["hf", "vllm"] = "hf"
    """Sampler: graft's own KV-cache loop over the Hugging Face model, or vLLM (the `vllm` extra
    on a GPU, vLLM's CPU build without one; the policy's weights are pushed into the engine after
    every update)."""
    vllm_gpu_memory: float = 0.4
    """vLLM engine: fraction of the GPU memory it may take (the trainer needs the rest; on vLLM's
    CPU backend, of the machine's memory). Its KV cache is sized to what the rollouts need (the
    sequences sampled at once x their length, a quarter more) and capped at this share less the
    engine's weights; on a GPU vLLM also needs this share free at start-up."""
    vllm_enforce_eager: bool = False
    """vLLM engine: run the model eagerly, without compiling it (torch.compile) or capturing CUDA
    graphs: a faster start-up and less memory, slower sampling (vLLM's `enforce_eager`)."""


@dataclass(frozen=True)
class AlgoConfig:
    advantage: Literal["grpo", "drgrpo"] = "grpo"
    """`grpo`: (r - mean) / (std + eps), unbiased std; `drgrpo`: r - mean (Dr. GRPO, no std)."""
    adv_eps: float = 1e-6
    """Epsilon added to the group std."""
    clip_low: float = 0.2
    """Lower ratio clip: rho >= 1 - clip_low."""
    clip_high: float = 0.28
    """Upper ratio clip: rho <= 1 + clip_high (DAPO clip-higher)."""
    dual_clip: float = 0.0
    """Dual-clip constant for negative advantages (verl uses 3.0); 0: off, as in the paper."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "constant"] = "token-mean"
    """Loss reduction: mean over all tokens of the minibatch (DAPO), mean of per-sequence means,
    or token sum divided by sequences x `loss_constant` (Dr. GRPO)."""
    loss_constant: int = 0
    """Per-sequence normaliser of the `constant` reduction; 0: rollout.max_new_tokens."""
    minibatches: int = 4
    """Optimizer steps per rollout batch; the batch is split by prompts, groups kept whole."""
    micro_batch_size: int = 32
    """Sequences per forward/backward pass; gradients accumulate over a minibatch."""
    epochs: int = 1
    """Passes over the rollout batch."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL penalty to the initial policy; 0: off (the paper uses none)."""
    recompute_old_logprobs: bool = False
    """Recompute behavior log-probs with a forward pass instead of reusing generation log-probs."""
    ratio: Literal["token", "sequence"] = "token"
    """Importance ratio per token (PPO, GRAFT) or one per response (GSPO-style; an ablation)."""
    skip_zero_advantage: bool = field(default=True, metadata=INTERNAL)
    """Skip the forward/backward of responses whose gradient is exactly zero (advantage 0, no
    KL); their tokens still count in the loss denominator. Changes no result."""
    sort_by_length: bool = field(default=True, metadata=INTERNAL)
    """Form micro-batches from length-sorted responses to cut padding. Changes no result."""
    share_prompts: bool = field(default=True, metadata=INTERNAL)
    """Run each distinct prompt once per batch, in generation and in every log-prob forward pass,
    and attach its KV cache to each of its n responses instead of repeating the prompt n times.
    Changes no result beyond float rounding."""
    dedup_responses: bool = field(default=True, metadata=INTERNAL)
    """Run each distinct (prompt, response) pair once per batch in every log-prob forward pass
    (training and scoring peer responses); each copy keeps its own loss term, and its gradient
    flows into the one computed copy. Identical responses are common when a policy answers a
    prompt the same way several times. Changes no result beyond float rounding."""
    nonfinite: Literal["stop", "skip"] = "stop"
    """A minibatch whose loss or gradient norm is NaN or infinite never reaches the optimizer.
    `stop`: the run stops there with an error naming the policy and step (no checkpoint of the
    damaged step is written); `skip`: that optimizer step is skipped and counted in
    `optim/nonfinite_steps`. (float16 compute leaves overflowing steps to its loss scaler.)"""


@dataclass(frozen=True)
class AblationConfig:
    """Departures from the paper's exchange, for ablations and baselines; the defaults are the
    paper's."""

    weight: Literal["paper", "none", "per_byte", "receiver_relative"] = "paper"
    """Compatibility score s: `paper` exp(mean logp_R - mean logp_S); `none` w = 1 for all;
    `per_byte` exp((sum logp_R - sum logp_S) / UTF-8 bytes); `receiver_relative`
    exp(mean logp_R(peer) - mean over the receiver's own responses of mean logp_R)."""
    eos_in_score: bool = True
    """Count the EOS token in the mean log-likelihoods of s (on both sides alike)."""
    replacement: Literal["whole", "success_only", "pooled"] = "whole"
    """`whole`: the peer's whole group with its own advantages (paper); `success_only`: only its
    correct responses; `pooled`: receiver + peer responses, advantages over the pooled rewards."""
    peer_position: Literal["last", "first", "uniform"] = "last"
    """Where minibatches holding peer groups go in the update (paper: last)."""
    selection: Literal["gate", "random"] = "gate"
    """`random`: a control that grafts as many prompts as the gate would, chosen at random."""
    admission: Literal["weight", "random"] = "weight"
    """`random`: a control that admits as many responses as the weight rule would, at random
    (admitted ones get w = 1)."""
    peer_update: Literal["graft", "sgt", "luffy", "unclipped"] = "graft"
    """`sgt`: keep GRPO and add sgt_coef x NLL of one random correct peer response per selected
    prompt; `luffy`: peer tokens use pi / (pi + luffy_gamma), behavior prob 1, no clip;
    `unclipped`: the paper's update with the peer tokens' ratio left unclipped (a control of the
    token ratio clip; the receiver's own tokens are clipped as always)."""
    sgt_coef: float = 0.1
    """Coefficient of the SGT supervised term."""
    luffy_gamma: float = 0.1
    """gamma of the LUFFY-style shaping f(pi) = pi / (pi + gamma)."""


@dataclass(frozen=True)
class StoredPeerConfig:
    """Where a stored peer's groups come from (`exchange.source: stored`)."""

    path: str = ""
    """The peer's trajectory store (a run's `trajectories/` folder, a `graft sample` log; path
    or URI)."""
    model: str = ""
    """The peer's model name in the store; empty: the only model there."""
    run: str = ""
    """The peer's run id in the store; empty: the only run of that model."""
    records: Literal["latest", "same_step", "step"] = "latest"
    """Which group per prompt: the most recent record, the one written at the same step number
    as the receiver's current step, or the one at `exchange.stored.step`."""
    step: int = 0
    """With records=step: the step whose records are used."""
    rewards: Literal["verified", "shuffled"] = "verified"
    """The peer's rewards as the receiver's verifier gives them, or `shuffled` within each group
    (a negative control: the peer's programs with a random signal; seeded by the step and the
    prompt)."""
    skip_damaged_shards: bool = False
    """Skip a damaged shard of the peer's store (a warning for each, counted in
    `stored/damaged_shards`) instead of stopping with an error that names it."""


@dataclass(frozen=True)
class ExchangeConfig:
    enabled: bool = True
    """Exchange groups between policies (GRAFT); false trains each policy with plain GRPO."""
    balancing: bool = True
    """Transfer the same number m of prompts each way (paper section 2); two policies only
    rank-and-cut, see docs/method.md for more than two."""
    delta: float = 0.8
    """Admission floor: a peer response with compatibility s <= delta is dropped."""
    source: Literal["online", "stored"] = "online"
    """`online`: co-training policies exchange groups; `stored`: ONE policy takes groups from a
    peer's recorded trajectories (`exchange.stored`), re-verified, one direction, no balancing."""
    too_long: Literal["drop", "truncate"] = "drop"
    """A re-tokenized peer response longer than rollout.max_new_tokens: drop it, or cut it."""
    warn_after: int = 10
    """Warn when a direction has had candidates but admitted nothing for this many steps."""
    ablation: AblationConfig = field(default_factory=AblationConfig)
    """Departures from the paper's exchange (ablations, baselines, controls)."""
    stored: StoredPeerConfig = field(default_factory=StoredPeerConfig)
    """The stored peer (`exchange.source: stored`)."""


@dataclass(frozen=True)
class StoreConfig:
    enabled: bool = True
    """Write every rollout (used, replaced and failed alike) to the run's trajectory store."""
    path: str = ""
    """Where: a local path or a filesystem URI; empty: RUN_DIR/trajectories."""
    background: bool = True
    """Write shards on a background thread so that a step does not wait for the disk."""


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0
    """Evaluate on held-out problems every this many steps (and at step 0 and the end); 0: never."""
    suites: tuple[str, ...] = ("test",)
    """Suites evaluated during training: `test` / `val` (the task's held-out / validation split),
    a benchmark name (math500, aime2024, aime2025, amc23, minerva; needs a network), `fixture`,
    or a .jsonl/.parquet file with problem/answer columns."""
    validation: str = ""
    """Suite whose avg@k picks the best checkpoint (saved as checkpoints/best); keep it apart from
    the test suites. Empty: no best-checkpoint selection, only the final one."""
    num_problems: int = 200
    """Problems per suite and evaluation (the first ones); 0: all."""
    samples: int = 1
    """Samples per problem (k of avg@k)."""
    temperature: float = 0.0
    """Evaluation sampling temperature; 0: greedy."""
    top_p: float = 1.0
    """Evaluation nucleus sampling."""
    max_new_tokens: int = 0
    """Response limit for evaluation; 0: rollout.max_new_tokens."""
    primary: tuple[str, ...] = ()
    """The primary endpoints of a comparison, named before it runs: `graft compare` tests them as
    one family with Holm's correction and marks every other cell exploratory. Each is a metric as
    metrics.jsonl names it (`eval/test/avg@4`; `m/llama/eval/test/avg@4` for one policy),
    optionally followed by ` final` or ` curve` (default: both). Changes no training result."""


@dataclass(frozen=True)
class SftConfig:
    store: str = ""
    """`graft sft`: the trajectory store whose verified-correct responses the policy learns from
    (a run's `trajectories/` folder, path or URI), such as a peer's run."""
    peer_model: str = ""
    """The model in the store whose responses are used; empty: the only model there."""
    peer_run: str = ""
    """The run in the store; empty: the only run of that model."""
    val_fraction: float = 0.1
    """Share of the store's prompts held out (chosen by a hash of the prompt id and run.seed):
    their responses give the validation loss, the prompts the held-out accuracy that picks the
    best checkpoint."""
    batch_size: int = 32
    """Responses per optimizer step (their tokens averaged together: token-mean NLL); the
    forward and backward run in algo.micro_batch_size pieces with the same gradient."""
    max_per_prompt: int = 0
    """At most this many distinct correct responses per prompt (the first ones the store holds);
    0: all."""


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    """Where and how long to run."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """What to train on."""
    models: tuple[ModelConfig, ...] = field(default_factory=lambda: (ModelConfig(),))
    """Policies to train; one for plain GRPO."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Sampling of the rollout batch."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Policy-gradient objective and update schedule."""
    exchange: ExchangeConfig = field(default_factory=ExchangeConfig)
    """GRAFT peer-group exchange (two or more models online, or one model and a stored peer)."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """The trajectory store this run writes."""
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    """The verifier pool."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out evaluation during training."""
    sft: SftConfig = field(default_factory=SftConfig)
    """`graft sft`: supervised fine-tuning on a store's verified-correct responses (not used by
    `graft train`)."""

    def __post_init__(self) -> None:
        validate(self)  # once, when the config is made: from YAML, in code or by replace()
