"""Every bad input ends the same way: exit code 2, ONE line `graft: error: ...` on stderr naming the
key, file, row or argument at fault, no traceback, and no file of the run directory or store
created or changed. One table; most cases fail before any model is loaded."""

from __future__ import annotations

import pytest

from bad_input_files import make_bad_files, snapshot
from graft.cli import main

SMALL = [
    "run.progress=false",
    "task.arithmetic.num_train=16",
    "task.arithmetic.num_test=8",
    "rollout.prompts_per_step=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "algo.minibatches=1",
    "algo.micro_batch_size=8",
    "eval.every=0",
    "verify.workers=1",
]


def sets(*assignments: str) -> list[str]:
    return [x for a in assignments for x in ("--set", a)]


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_paths):
    """A finished two-step run (checkpoints, metrics, store) and a folder of bad files."""
    root = tmp_path_factory.mktemp("bad_inputs")
    run = root / "run"
    model = f"models.0.path={tiny_paths['llama']}"
    args = ["train", "--out", str(run), *sets(*SMALL, model, "run.steps=2", "run.save_every=1")]
    assert main(args) == 0
    files = root / "files"
    make_bad_files(files, run)
    return {"run": run, "files": files, "store": run / "trajectories", "model": tiny_paths["llama"]}


R, F, S, M = "{run}", "{files}", "{store}", "{model}"
G = "{files}/good_store"  # a peer's store with correct responses
NEW = "{files}/new_run"  # a fresh run directory: must not be created by a failing command
TRAIN_NEW = ["train", "--out", NEW]
EXPORT = ["store", "export", S, "--out", f"{F}/export.jsonl"]
SFT_NEW = ["sft", "--out", NEW, *sets(*SMALL, f"models.0.path={M}"), "--store"]
NOUSER = "~graft-no-such-user"  # a `~user` path that does not resolve
MATH = "task.name=math"


def value_case(name: str, *assignments: str, culprit: str = "") -> tuple[str, list[str], str]:
    """A config value the consumers do not accept: refused before any model loads, naming the
    key (by default the key of the last assignment)."""
    key = culprit or assignments[-1].split("=", 1)[0]
    return (name, [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", *assignments)], key)


# One validation pass over every config value, before anything is created (graft.config.checks).
VALUES = [
    value_case("optim-eps-zero", "models.0.optim.eps=0"),
    value_case(
        "code-stdout-bytes",
        "task.name=code",
        "task.code.train={files}/code_good.jsonl",
        "task.code.stdout_bytes=10",
    ),
    value_case("optim-eps-inf", "models.0.optim.eps=inf"),
    value_case("optim-beta-one", "models.0.optim.betas=[1.0, 0.999]"),
    value_case("optim-beta-negative", "models.0.optim.betas=[-0.5, 0.999]"),
    value_case("weight-decay-negative", "models.0.optim.weight_decay=-0.01"),
    value_case("weight-decay-inf", "models.0.optim.weight_decay=inf"),
    value_case(
        "weight-decay-flips-weights", "models.0.optim.lr=0.5", "models.0.optim.weight_decay=5"
    ),
    value_case("lr-inf", "models.0.optim.lr=inf"),
    value_case("lr-nan", "models.0.optim.lr=nan"),
    value_case("lr-overflows-weights", "models.0.optim.lr=1e30"),
    value_case("grad-clip-inf", "models.0.optim.grad_clip=inf"),
    value_case("warmup-negative", "models.0.optim.warmup_steps=-1"),
    value_case("rollout-temperature-inf", "rollout.temperature=inf"),
    value_case("eval-temperature-inf", "eval.temperature=inf"),
    value_case("threads-negative", "run.threads=-1"),
    value_case("num-cpus-negative", "models.0.num_cpus=-1"),
    value_case("num-gpus-negative", "models.0.num_gpus=-1"),
    value_case("num-gpus-inf", "models.0.num_gpus=inf"),
    value_case("device-unknown", "models.0.device=tpu"),
    value_case("eval-top-p-zero", "eval.top_p=0"),
    value_case("eval-top-p-above-one", "eval.top_p=1.5"),
    value_case("max-prompt-tokens-negative", "rollout.max_prompt_tokens=-1"),
    value_case("max-new-tokens-huge", f"rollout.max_new_tokens={2**40}"),
    value_case("num-test-negative", "task.arithmetic.num_test=-1"),
    value_case("num-val-negative", "task.arithmetic.num_val=-1"),
    value_case("num-train-huge", f"task.arithmetic.num_train={10**12}"),
    value_case("prompts-per-step-huge", f"rollout.prompts_per_step={10**14}"),
    value_case("top-k-past-int64", f"rollout.top_k={2**70}"),
    value_case("group-size-past-int16", "rollout.group_size=100000"),
    value_case("steps-past-int32", f"run.steps={2**40}"),
    value_case("epochs-huge", f"algo.epochs={10**9}"),
    value_case("verify-workers-huge", "verify.workers=100000"),
    value_case("verify-timeout-inf", "verify.timeout_s=inf"),
    value_case("kl-coef-inf", "algo.kl_coef=inf"),
    value_case("adv-eps-zero-is-nan", "algo.adv_eps=0"),
    value_case("clip-high-inf", "algo.clip_high=inf"),
    value_case("dual-clip-inf", "algo.dual_clip=inf"),
    value_case("sgt-coef-inf", "exchange.sgt_coef=inf"),
    value_case("luffy-gamma-inf", "exchange.luffy_gamma=inf"),
    value_case("lora-alpha-inf", "models.0.lora.r=4", "models.0.lora.alpha=inf"),
    value_case("lora-rank-huge", f"models.0.lora.r={2**40}"),
    value_case("vllm-memory-zero", "rollout.vllm_gpu_memory=0"),
    value_case("vllm-memory-above-one", "rollout.vllm_gpu_memory=1.5"),
    value_case("eval-problems-negative", "eval.num_problems=-1"),
    value_case("eval-max-new-tokens-negative", "eval.max_new_tokens=-1"),
    value_case("eval-samples-huge", f"eval.samples={2**40}"),
    value_case("eval-without-suites", "eval.every=1", "eval.suites=[]"),
    value_case("zero-contrast-unknown-mode", "models.0.zero_contrast.mode=dynamic"),
    value_case("resample-zero-rounds", "models.0.zero_contrast.max_rounds=0"),
    value_case("resample-negative-rounds", "models.0.zero_contrast.max_rounds=-2"),
    value_case("resample-zero-responses", "models.0.zero_contrast.max_responses=0"),
    value_case("resample-negative-responses", "models.0.zero_contrast.max_responses=-8"),
    value_case("resample-responses-below-a-group", "models.0.zero_contrast.max_responses=1"),
    value_case(
        "math-limit-negative", MATH, f"task.math.train={F}/nocolumn.jsonl", "task.math.limit=-1"
    ),
    value_case(
        "math-empty-column",
        MATH,
        f"task.math.train={F}/nocolumn.jsonl",
        "task.math.answer_column=''",
    ),
]

# (id, argv, text the one line must contain)
CASES = [
    # ---------------------------------------------------------------- config
    ("unknown-key", [*TRAIN_NEW[:1], f"{F}/bad.yaml", "--out", NEW], "rollout.gruop_size"),
    ("not-an-int", [*TRAIN_NEW, *sets("rollout.group_size=abc")], "rollout.group_size"),
    ("group-of-one", [*TRAIN_NEW, *sets("rollout.group_size=1")], "rollout.group_size"),
    (
        "not-divisible",
        [*TRAIN_NEW, *sets("rollout.prompts_per_step=10", "algo.minibatches=4")],
        "algo.minibatches",
    ),
    ("missing-config", ["train", f"{F}/missing.yaml", "--out", NEW], "missing.yaml"),
    ("broken-yaml", ["train", f"{F}/broken.yaml", "--out", NEW], "broken.yaml"),
    ("yaml-not-mapping", ["train", f"{F}/list.yaml", "--out", NEW], "list.yaml"),
    ("set-without-value", [*TRAIN_NEW, "--set", "rollout.group_size"], "rollout.group_size"),
    ("no-such-model-entry", [*TRAIN_NEW, *sets("models.5.path=x")], "models.5"),
    ("bad-literal", [*TRAIN_NEW, *sets("run.backend=gpu")], "run.backend"),
    ("section-as-value", [*TRAIN_NEW, *sets("run=3")], "run"),
    (
        "weights-in-another-16-bit-dtype",
        [*TRAIN_NEW, *sets("models.0.dtype=bfloat16", "models.0.param_dtype=float16")],
        "models.0.param_dtype",
    ),
    ("unknown-compute-dtype", [*TRAIN_NEW, *sets("models.0.dtype=fp8")], "models.0.dtype"),
    (
        "unknown-verifier",
        [*TRAIN_NEW, *sets(*SMALL, "verify.verifier=nosuch:f")],
        "verify.verifier",
    ),
    ("stored-without-store", [*TRAIN_NEW, *sets("exchange.source=stored")], "exchange.store"),
    (
        "ray-asks-too-many-cpus",
        [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", "run.backend=ray", "run.threads=4096")],
        "run.threads",
    ),
    ("config-cmd-bad-key", ["config", "--set", "algo.nope=1"], "algo.nope"),
    *VALUES,
    ("set-without-key", [*TRAIN_NEW, "--set", "=5"], "'=5'"),
    ("set-empty-key-part", [*TRAIN_NEW, "--set", "rollout..group_size=3"], "rollout..group_size"),
    ("config-not-utf8", ["train", f"{F}/binary.yaml", "--out", NEW], "binary.yaml is not UTF-8"),
    ("config-is-a-directory", ["train", f"{F}/notamodel", "--out", NEW], "is a directory"),
    ("config-tilde-user", ["train", f"{NOUSER}/c.yaml", "--out", NEW], NOUSER),
    # ---------------------------------------------------------------- graft sft
    ("sft-no-store", ["sft", "--out", NEW, *sets(*SMALL, f"models.0.path={M}")], "sft.store"),
    ("sft-store-missing", [*SFT_NEW, f"{F}/nostore"], "nostore"),
    ("sft-no-correct-response", [*SFT_NEW, f"{F}/wrong_store"], "wrong_store"),
    ("sft-another-tasks-store", [*SFT_NEW, f"{F}/math_store"], "math_store"),
    ("sft-unknown-peer", [*SFT_NEW, G, *sets("sft.peer_model=nobody")], "sft.peer_model"),
    (
        "sft-model-does-not-load",
        ["sft", "--out", NEW, "--store", G, *sets(*SMALL, f"models.0.path={F}/notamodel")],
        "notamodel",
    ),
    (
        "sft-two-models",
        [*SFT_NEW, G, *sets("models=[{{path: a}}, {{name: b, path: c}}]")],
        "models",
    ),
    ("sft-val-fraction", [*SFT_NEW, G, *sets("sft.val_fraction=0.95")], "sft.val_fraction"),
    ("sft-batch-zero", [*SFT_NEW, G, *sets("sft.batch_size=0")], "sft.batch_size"),
    ("sft-resume-with-store", ["sft", "--resume", R, "--store", G], "--store"),
    ("sft-all-held-out", [*SFT_NEW, G, *sets("sft.val_fraction=0.9", "run.seed=3")], "held-out"),
    # ---------------------------------------------------------------- data files
    (
        "data-file-missing",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/none.jsonl")],
        "none.jsonl",
    ),
    *[
        (
            f"code-{what}",
            [*TRAIN_NEW, *sets("task.name=code", f"task.code.train={F}/code_{what}.jsonl")],
            f"row 2 of {F}/code_{what}.jsonl",
        )
        for what in ("malformed", "nofunction", "unsupported")
    ],
    ("code-no-train", [*TRAIN_NEW, *sets("task.name=code")], "task.code.train"),
    (
        "code-hub-unpinned",
        [*TRAIN_NEW, *sets("task.name=code", "task.code.train=openai/openai_humaneval")],
        "task.code.revision: 'openai/openai_humaneval' is read as a Hugging Face dataset",
    ),
    (
        "code-hub-offline",
        [
            *TRAIN_NEW,
            *sets(
                "task.name=code",
                "task.code.train=openai/openai_humaneval",
                f"task.code.revision={'ab' * 20}",
            ),
        ],
        "cannot load Hugging Face dataset 'openai/openai_humaneval' split 'train' at revision",
    ),
    (
        "data-not-utf8",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/latin1.jsonl")],
        "line 2 of",
    ),
    (
        "data-bad-json-line",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/badjson.jsonl")],
        "line 2 of",
    ),
    (
        "data-row-not-object",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/array.jsonl")],
        "line 1 of",
    ),
    (
        "data-missing-column",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/nocolumn.jsonl")],
        "'problem'",
    ),
    (
        "data-garbage-parquet",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/garbage.parquet")],
        "garbage.parquet",
    ),
    (
        "data-is-a-directory",
        [*TRAIN_NEW, *sets(MATH, f"task.math.train={F}/notamodel")],
        "is a directory",
    ),
    (
        "data-directory-named-jsonl",
        [*TRAIN_NEW, *sets(MATH, f"task.math.train={F}/dir.jsonl")],
        "is a directory",
    ),
    (
        "data-damaged-compressed-parquet",
        [*TRAIN_NEW, *sets(MATH, f"task.math.train={F}/damaged.parquet")],
        "damaged.parquet",
    ),
    (
        "data-tilde-user",
        [*TRAIN_NEW, *sets(MATH, f"task.math.train={NOUSER}/train.jsonl")],
        "task.math.train",
    ),
    (
        "eval-suite-is-a-directory",
        [
            *TRAIN_NEW,
            *sets(*SMALL, f"models.0.path={M}", "eval.every=1", f"eval.suites=[{F}/dir.jsonl]"),
        ],
        "is a directory",
    ),
    (
        "data-unsupported-suffix",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/afile.csv")],
        "afile.csv",
    ),
    # ---------------------------------------------------------------- model paths
    ("model-path-missing", [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={F}/nope")], "models.0.path"),
    (
        "model-path-not-a-model",
        [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={F}/notamodel")],
        "models.0.path",
    ),
    ("model-tilde-user", [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={NOUSER}/m")], "models.0.path"),
    ("model-unknown-tiny", [*TRAIN_NEW, *sets(*SMALL, "models.0.path=tiny:nosuch")], "nosuch"),
    ("tiny-build-unknown", ["tiny", "build", "nosuch"], "nosuch"),
    # ---------------------------------------------------------------- run directories
    ("reuse-run-dir", ["train", "--out", R, *sets(*SMALL, f"models.0.path={M}")], R),
    ("out-is-a-file", ["train", "--out", f"{F}/afile", *sets(*SMALL)], "afile"),
    (  # --overwrite moves the old run aside only once every check passed
        "overwrite-with-bad-data",
        [
            "train",
            "--overwrite",
            "--out",
            R,
            *sets(*SMALL, MATH, f"task.math.train={F}/none.jsonl"),
        ],
        "none.jsonl",
    ),
    ("out-under-a-file", ["train", "--out", f"{F}/afile/run", *sets(*SMALL)], "afile"),
    ("out-empty", ["train", "--out", "", *sets(*SMALL)], "--out"),
    ("out-dir-empty-in-config", ["train", *sets(*SMALL, "run.out_dir=''")], "run.out_dir"),
    ("out-tilde-user", ["train", "--out", f"{NOUSER}/run", *sets(*SMALL)], NOUSER),
    (
        "out-read-only",
        ["train", "--out", "/sys/graft-new-run", *sets(*SMALL, f"models.0.path={M}")],
        "/sys/graft-new-run",
    ),
    ("resume-missing", ["train", "--resume", f"{F}/norun"], "norun"),
    ("resume-with-config", ["train", f"{F}/bad.yaml", "--resume", R], "config file"),
    ("resume-with-out", ["train", "--resume", R, "--out", NEW], "--out"),
    ("resume-and-overwrite", ["train", "--resume", R, "--overwrite"], "--overwrite"),
    (
        "resume-other-model",
        ["train", "--resume", R, *sets("models.0.path=tiny:qwen2-bpe-add")],
        "models.0.path",
    ),
    (
        "resume-renamed-model",
        ["train", "--resume", R, *sets("models.0.name=other")],
        "models.0.name",
    ),
    ("resume-broken-config", ["train", "--resume", f"{F}/yaml_broken_run"], "config.yaml"),
    ("resume-bad-override", ["train", "--resume", R, *sets("run.steps=x")], "run.steps"),
    ("resume-all-damaged", ["train", "--resume", f"{F}/resumable"], "model.safetensors"),
    ("resume-turns-lora-on", ["train", "--resume", R, *sets("models.0.lora.r=4")], "models.0.lora"),
    ("resume-below-reached-step", ["train", "--resume", R, *sets("run.steps=1")], "run.steps"),
    (
        "resume-garbage-run-json",
        ["train", "--resume", f"{F}/garbage_run_run", *sets("run.steps=3")],
        "run.json",
    ),
    (
        "resume-garbage-metrics-line",
        ["train", "--resume", f"{F}/garbage_metrics_run", *sets("run.steps=3")],
        "metrics.jsonl",
    ),
    ("resume-empty", ["train", "--resume", ""], "--resume"),
    # ---------------------------------------------------------------- stores
    ("store-info-not-a-store", ["store", "info", f"{F}/notamodel"], "notamodel"),
    ("store-export-damaged", ["store", "export", f"{F}/damaged_store"], ".parquet"),
    (
        "store-export-damaged-to-file",
        ["store", "export", f"{F}/damaged_store", "--out", f"{F}/export.jsonl"],
        ".parquet",
    ),
    (
        "store-export-onto-manifest",
        ["store", "export", S, "--out", f"{S}/store.json"],
        "store.json",
    ),
    (
        "store-export-into-store",
        ["store", "export", S, "--out", f"{S}/rows.jsonl"],
        "inside the store",
    ),
    (
        "store-export-to-directory",
        ["store", "export", S, "--out", f"{F}/notamodel"],
        "is a directory",
    ),
    (
        "store-export-under-a-file",
        ["store", "export", S, "--out", f"{F}/afile/rows.jsonl"],
        "afile",
    ),
    ("store-info-tilde-user", ["store", "info", f"{NOUSER}/store"], NOUSER),
    (
        "store-path-unknown-filesystem",
        [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", "store.path=nosuchfs://bucket/store")],
        "store.path",
    ),
    ("store-path-tilde-user", [*TRAIN_NEW, *sets(*SMALL, f"store.path={NOUSER}/s")], "store.path"),
    (
        "peer-store-unknown-filesystem",
        [
            *TRAIN_NEW,
            *sets(
                *SMALL,
                f"models.0.path={M}",
                "exchange.source=stored",
                "exchange.store=nosuchfs://b/s",
            ),
        ],
        "exchange.store",
    ),
    (
        "peer-store-tilde-user",
        [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored", f"exchange.store={NOUSER}/s")],
        "exchange.store",
    ),
    (
        "store-path-other-format",
        [*TRAIN_NEW, *sets(*SMALL, f"store.path={F}/other_store")],
        "store.path",
    ),
    ("store-path-is-a-file", [*TRAIN_NEW, *sets(*SMALL, f"store.path={F}/afile")], "store.path"),
    (
        "peer-store-missing",
        [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored", f"exchange.store={F}/none")],
        "exchange.store",
    ),
    (
        "peer-model-absent",
        [
            *TRAIN_NEW,
            *sets(*SMALL, "exchange.source=stored", f"exchange.store={S}", "exchange.peer_model=x"),
        ],
        "exchange.peer_model",
    ),
    (
        "peer-store-all-damaged",
        [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored", f"exchange.store={F}/damaged_store")],
        ".parquet",
    ),
    # ---------------------------------------------------------------- CLI arguments
    ("unknown-flag", ["train", "--bogus"], "--bogus"),
    ("unknown-command", ["trian"], "trian"),
    ("eval-k-zero", ["eval", "--model", M, "--k", "0"], "--k"),
    ("eval-runs-zero", ["eval", "--model", M, "--runs", "0"], "--runs"),
    ("eval-k-not-int", ["eval", "--model", M, "--k", "x"], "--k"),
    ("eval-nothing", ["eval"], "--model"),
    ("eval-same-model-twice", ["eval", "--model", M, "--model", M], "--model"),
    ("eval-run-missing", ["eval", "--run", f"{F}/norun"], "norun"),
    (
        "eval-baseline-absent",
        ["eval", "--run", R, "--baseline", "nope", "--out", NEW],
        "--baseline",
    ),
    (
        "eval-mixed-suites",
        ["eval", "--run", R, "--run", f"{F}/other_suites_run", "--out", NEW],
        "suites",
    ),
    ("plot-missing-run", ["plot", f"{F}/norun", "--out", f"{F}/plot.png"], "norun"),
    ("plot-out-is-a-runs-metrics", ["plot", R, "--out", f"{R}/metrics.jsonl"], "--out"),
    (
        "eval-cli-negative-temperature",
        ["eval", "--model", M, "--temperature", "-1"],
        "--temperature",
    ),
    ("eval-cli-top-p-above-one", ["eval", "--model", M, "--top-p", "1.5"], "--top-p"),
    ("store-export-unknown-model", [*EXPORT, "--model", "nobody"], "nobody"),
    ("store-info-unknown-protocol", ["store", "info", "nosuchfs://bucket/store"], "nosuchfs"),
    ("store-info-under-a-file", ["store", "info", f"{F}/afile/store"], "afile"),
    (
        "stored-peer-empty-store",
        [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored", f"exchange.store={F}/empty_store")],
        "empty store",
    ),
    (
        "kl-coef-huge",
        [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", "algo.kl_coef=1e38")],
        "algo.kl_coef",
    ),
    (
        "data-one-problem-two-answers",
        [*TRAIN_NEW, *sets("task.name=math", f"task.math.train={F}/conflict.jsonl")],
        "rows 1 and 3",
    ),
]


def _fill(value: str, world: dict) -> str:
    return value.format(**{k: str(v) for k, v in world.items()})


@pytest.mark.parametrize("argv,culprit", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_changes_nothing(world, argv, culprit, capsys):
    argv = [_fill(a, world) for a in argv]
    before = snapshot(world["run"], world["files"])
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("graft: error: "), err
    assert _fill(culprit, world) in err, err
    assert snapshot(world["run"], world["files"]) == before


def test_the_table_is_large_and_covers_every_kind_of_input():
    assert len(CASES) >= 130
    assert len({c[0] for c in CASES}) == len(CASES)
