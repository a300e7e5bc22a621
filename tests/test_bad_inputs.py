"""Every bad input ends the same way: exit code 2, ONE line `graft: error: ...` on stderr naming the
key, file, row or argument at fault, no traceback, and no file of the run directory or store
created or changed. One table; most cases fail before any model is loaded."""

from __future__ import annotations

import pytest

from bad_input_files import make_bad_files, snapshot
from bad_input_values import MATH, NEW, SMALL, TRAIN_NEW, VALUES, F, M, R, S, sets
from graft.cli import main


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


G = "{files}/good_store"  # a peer's store with correct responses
EXPORT = ["store", "export", S, "--out", f"{F}/export.jsonl"]
SFT_NEW = ["sft", "--out", NEW, *sets(*SMALL, f"models.0.path={M}"), "--store"]
NOUSER = "~graft-no-such-user"  # a `~user` path that does not resolve
STORED = [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored")]  # stored-peer training: a store
NOT_STORE = "not a graft trajectory store"  # what every command that reads a store says of a path
EMPTY = "an empty store (no rollouts written yet)"  # ... and of a store with no rollout in it


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
    ("stored-without-store", [*TRAIN_NEW, *sets("exchange.source=stored")], "exchange.stored.path"),
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
    (
        "sft-store-missing",
        [*SFT_NEW, f"{F}/nostore"],
        f"sft.store {F}/nostore: {NOT_STORE} (no such directory)",
    ),
    (
        "sft-store-a-file",
        [*SFT_NEW, f"{F}/afile"],
        f"sft.store {F}/afile: {NOT_STORE} (a file, not a directory)",
    ),
    (
        "sft-store-not-a-store",
        [*SFT_NEW, f"{F}/notamodel"],
        f"sft.store {F}/notamodel: {NOT_STORE} (a directory without store.json)",
    ),
    (
        "sft-store-unknown-filesystem",
        [*SFT_NEW, "nosuchfs://b/s"],
        "sft.store nosuchfs://b/s: cannot open it: no filesystem for nosuchfs://",
    ),
    ("sft-empty-store", [*SFT_NEW, f"{F}/empty_store"], f"sft.store {F}/empty_store: {EMPTY}"),
    *[  # an empty store is the store's fault, whether a peer was named or not (`=`: not named)
        (
            f"sft-empty-store-peer-{who}",
            [*SFT_NEW, f"{F}/empty_store", *sets(f"sft.peer_model={name}")],
            f"sft.store {F}/empty_store: {EMPTY}",
        )
        for who, name in (("named", "nobody"), ("left-empty", ""))
    ],
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
    ("store-info-not-a-store", ["store", "info", f"{F}/notamodel"], f"{F}/notamodel: {NOT_STORE}"),
    (
        "store-info-missing",
        ["store", "info", f"{F}/nostore"],
        f"{F}/nostore: {NOT_STORE} (no such directory)",
    ),
    (
        "store-validate-a-file",
        ["store", "validate", f"{F}/afile"],
        f"{F}/afile: {NOT_STORE} (a file, not a directory)",
    ),
    (
        "store-export-missing",
        ["store", "export", f"{F}/nostore"],
        f"{F}/nostore: {NOT_STORE} (no such directory)",
    ),
    (
        "store-export-empty-store-model",
        ["store", "export", f"{F}/empty_store", "--model", "x"],
        f"{F}/empty_store: {EMPTY}",
    ),
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
                "exchange.stored.path=nosuchfs://b/s",
            ),
        ],
        "exchange.stored.path",
    ),
    (
        "peer-store-tilde-user",
        [*TRAIN_NEW, *sets(*SMALL, "exchange.source=stored", f"exchange.stored.path={NOUSER}/s")],
        "exchange.stored.path",
    ),
    (
        "store-path-other-format",
        [*TRAIN_NEW, *sets(*SMALL, f"store.path={F}/other_store")],
        "store.path",
    ),
    ("store-path-is-a-file", [*TRAIN_NEW, *sets(*SMALL, f"store.path={F}/afile")], "store.path"),
    (  # pyarrow would fail creating it, after the run directory was written
        "store-path-under-a-file",
        [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", f"store.path={F}/afile/store")],
        f"store.path {F}/afile/store: {F}/afile is a file, not a directory",
    ),
    (
        "peer-store-missing",
        [*STORED, *sets(f"exchange.stored.path={F}/none")],
        f"exchange.stored.path {F}/none: {NOT_STORE} (no such directory)",
    ),
    (
        "peer-store-not-a-store",
        [*STORED, *sets(f"exchange.stored.path={F}/notamodel")],
        f"exchange.stored.path {F}/notamodel: {NOT_STORE} (a directory without store.json)",
    ),
    (
        "peer-model-absent",
        [
            *TRAIN_NEW,
            *sets(
                *SMALL,
                "exchange.source=stored",
                f"exchange.stored.path={S}",
                "exchange.stored.model=x",
            ),
        ],
        "exchange.stored.model",
    ),
    (
        "peer-store-all-damaged",
        [
            *TRAIN_NEW,
            *sets(*SMALL, "exchange.source=stored", f"exchange.stored.path={F}/damaged_store"),
        ],
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
    (
        "store-info-under-a-file",
        ["store", "info", f"{F}/afile/store"],
        f"{F}/afile/store: {NOT_STORE} ({F}/afile is a file, not a directory)",
    ),
    *[
        (
            f"stored-peer-empty-store{tail}",
            [*STORED, *sets(f"exchange.stored.path={F}/empty_store", *peer)],
            f"exchange.stored.path {F}/empty_store: {EMPTY}",
        )
        for tail, peer in (("", ()), ("-peer-named", ("exchange.stored.model=x",)))
    ],
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
