"""Question: what do `graft store import` and `graft store export --format hf` cost?

Three measurements, each a ratio or a rate within one invocation:
1. import speed in rows/s: a plain log of the tiny task's prompts with numbers for responses,
   imported without a model (re-verification and writing) and with the tiny llama as its model
   (plus tokenizing and scoring every response);
2. re-scoring speed in tokens/s, against the same model's training forward (with autograd, then
   with the backward as well) over the same sequences, taken in alternation;
3. the export/import round trip on a generated store of 100k rows (token ids and float32
   log-probs of 64 tokens each): export speed, and whether the exported folder's rows equal the
   store's bit for bit.

    .venv/bin/python benchmarks/store_import.py [--rows 100000] [--log-rows 4096]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from common import emit

from graft.config import Config, load_config
from graft.peerlog.log_import import ImportSettings, import_logs
from graft.store import Provenance, StoreWriter, TrajectoryStore
from graft.store.dataset import export_dataset
from graft.store.schema import COLUMNS
from graft.training.policy import PolicySpec
from graft.verify.pool import VerifierPool

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"


def plain_log(cfg: Config, path: Path, rows: int) -> None:
    """`rows` responses (numbers near the answer) to the task's training prompts, 8 a prompt."""
    from graft.tasks import build_task

    problems = build_task(cfg.task).train_problems()
    rng = random.Random(0)
    with path.open("w") as f:
        for i in range(rows):
            p = problems[(i // 8) % len(problems)]
            answer = str(int(p.gold) + rng.choice((0, 0, 1, -1, 10)))
            f.write(json.dumps({"prompt": p.prompt, "response": answer, "step": i // 1024}) + "\n")


def timed_import(cfg: Config, log: Path, out: Path, spec: PolicySpec | None) -> float:
    start = time.perf_counter()
    with VerifierPool(workers=2) as pool:
        import_logs([str(log)], cfg, out, ImportSettings(name="llama"), pool=pool, spec=spec,
                    progress=False)  # fmt: skip
    return time.perf_counter() - start


def forward_rates(spec: PolicySpec, store: Path, reps: int = 3) -> dict[str, float]:
    """Tokens/s of the import's scoring (Policy.score) and of a training forward over the same
    (prompt, response) sequences, with and without the backward, in alternation."""
    from graft.training.policy import Policy

    policy = Policy(spec)
    rows = TrajectoryStore(str(store)).scan(columns=["prompt", "token_ids"]).to_pylist()[:2048]
    prompts = [policy.prompt_ids(r["prompt"]) for r in rows]
    responses = [r["token_ids"] for r in rows]
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    width = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((len(rows), width), policy.pad_id, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.tensor([*p, *r])
    mask = ids != policy.pad_id

    def train_forward(backward: bool) -> None:
        for chunk in range(0, len(rows), spec.algo.micro_batch_size):
            part = slice(chunk, chunk + spec.algo.micro_batch_size)
            logits = policy.model(input_ids=ids[part], attention_mask=mask[part]).logits
            logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[part].unsqueeze(-1))
            if backward:
                (logp.squeeze(-1) * mask[part]).sum().backward()
        policy.model.zero_grad(set_to_none=True)

    seconds = {"score": [], "forward": [], "forward_backward": []}
    policy.model.train()
    for _ in range(reps):
        for name, run in (("score", lambda: policy.score(prompts, responses)),
                          ("forward", lambda: train_forward(False)),
                          ("forward_backward", lambda: train_forward(True))):  # fmt: skip
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    return {k: tokens / min(v) for k, v in seconds.items()}


def generated_store(path: Path, rows: int, length: int = 64) -> None:
    """A store of `rows` rows in shards of 4096, random token ids and log-probs."""
    rng = random.Random(0)
    prov = Provenance("gen", "gen", "rev", "tok", "final_number", "final_number;1", 1.0, 1.0, 0,
                      length)  # fmt: skip
    writer = StoreWriter(str(path), run_id="gen", run_meta={}, background=False)
    for step, start in enumerate(range(0, rows, 4096)):
        n = min(4096, rows - start)
        cols = {c: [] for c in COLUMNS}
        for i in range(n):
            row = {
                "schema_version": 3, "run_id": prov.run_id, "model": prov.model,
                "model_revision": prov.model_revision, "tokenizer": prov.tokenizer, "step": step,
                "prompt_id": f"{(start + i) // 8:016x}", "prompt": "12+30=", "gold": "42",
                "skill": "", "member": i % 8, "response": "42",
                "token_ids": [rng.randrange(32000) for _ in range(length)],
                "logprobs": [-rng.random() * 5 for _ in range(length)], "finish_reason": "stop",
                "reward": float(i % 2), "verdict": "correct", "verdict_detail": "",
                "verifier": prov.verifier, "verifier_version": prov.verifier_version,
                "group_size": 8, "group_successes": 4, "group_mean": 0.5, "group_std": 0.53,
                "advantage": 0.94 * (1 if i % 2 else -1), "replaced": False, "temperature": 1.0,
                "top_p": 1.0, "top_k": 0, "max_new_tokens": length, "round": 0,
                "log_reward": None,
            }  # fmt: skip
            for k, v in row.items():
                cols[k].append(v)
        writer.write("gen", step, cols)
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--log-rows", type=int, default=4096)
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = load_config(Config, CONFIG, ["run.threads=1"])
    model = cfg.models[0]
    spec = PolicySpec(model=model, rollout=cfg.rollout, algo=cfg.algo, seed=0, threads=1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain_log(cfg, root / "log.jsonl", args.log_rows)
        plain_log(cfg, root / "warm.jsonl", 64)  # imports and caches warmed before timing
        timed_import(cfg, root / "warm.jsonl", root / "warm", spec)
        bare = timed_import(cfg, root / "log.jsonl", root / "bare", None)
        scored = timed_import(cfg, root / "log.jsonl", root / "scored", spec)
        rates = forward_rates(spec, root / "scored")
        generated_store(root / "big", args.rows)
        start = time.perf_counter()
        export_dataset(TrajectoryStore(str(root / "big")), root / "export")
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        back = TrajectoryStore(str(root / "export")).scan()
        read_s = time.perf_counter() - start
        same = back.equals(TrajectoryStore(str(root / "big")).scan())
    result = {
        "log_rows": args.log_rows, "import_rows_per_s": args.log_rows / bare,
        "import_scored_rows_per_s": args.log_rows / scored,
        "score_tokens_per_s": rates["score"], "train_forward_tokens_per_s": rates["forward"],
        "train_forward_backward_tokens_per_s": rates["forward_backward"],
        "score_vs_forward": rates["score"] / rates["forward"],
        "score_vs_forward_backward": rates["score"] / rates["forward_backward"],
        "rows": args.rows, "export_rows_per_s": args.rows / export_s,
        "read_back_rows_per_s": args.rows / read_s, "round_trip_bit_exact": same,
    }  # fmt: skip
    emit("store_import", [(k, f"{v:.4g}" if isinstance(v, float) else str(v))
                          for k, v in result.items()], result)  # fmt: skip


if __name__ == "__main__":
    main()
