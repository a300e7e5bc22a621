"""Recording and comparing golden runs (tests/test_golden.py).

A record holds, per run: every metric (timings aside), every training batch, and the final weights.
It is compared in one of two modes, chosen BEFORE any training by `float_fingerprint`:

- exact: this machine computes the recording machine's floats (same CPU kind, torch and a probe of
  the kernels training uses gives the same bits): everything must match to the bit.
- tolerant: the floats differ in their last bits. What must not depend on them is compared exactly:
  the batch composition (which problems, which responses token for token, own or peer, objective),
  the group counts, and every metric that counts something, up to the last digit; everything else
  (losses, norms, advantages, weights w, behavior log-probs, the final weights' statistics) to
  `REL_TOL` / `ABS_TOL`.
"""

from __future__ import annotations

import hashlib
import math
import platform
from pathlib import Path

import torch
from safetensors.torch import load_file

REL_TOL = 1e-3
ABS_TOL = 1e-5
"""The tolerant mode's float tolerance. Another float path, emulated here (torch without vector
kernels, MKL in its compatible mode: ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE), moved the
`small` record's floats by at most 9e-6 relative (gradient norms by 5e-5 of ~15; a policy loss
near zero by 3e-8 absolute): about a hundredth of the tolerance. A decision that moves one
response or one count changes a field compared exactly, or a float by far more."""


def digest(obj: object) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:24]


def machine() -> dict[str, str]:
    return {
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "arch": platform.machine(),
    }


def float_fingerprint(model_dirs: list[Path]) -> str:
    """Bits of what training computes, on each shipped model: a forward pass, its log-softmax, the
    gradient of a loss, one AdamW step and a multinomial draw. Under a second."""
    from transformers import AutoModelForCausalLM

    h = hashlib.sha256()
    for path in model_dirs:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        ids = torch.randint(0, model.config.vocab_size, (4, 24))
        logp = torch.log_softmax(model(ids).logits.float(), -1)
        (-logp.mean()).backward()
        torch.optim.AdamW(model.parameters(), lr=1e-3).step()
        gen = torch.Generator().manual_seed(0)
        draw = torch.multinomial(logp[:, -1].exp(), 8, replacement=True, generator=gen)
        for t in (logp, draw, *(p.detach() for p in model.parameters())):
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def batch_record(batches) -> dict:
    """Per receiver: the batch's exact digest, its float-free layout, and its floats."""
    out = {}
    for name, groups in sorted(batches.items()):
        seqs = [(g.problem_id, g.is_peer, q) for g in groups for q in g.sequences]
        layout = [(pid, peer, q.prompt_ids, q.response_ids, q.objective) for pid, peer, q in seqs]
        floats = [[q.advantage, q.weight, math.fsum(q.old_logprobs)] for _, _, q in seqs]
        peer = [
            [pid, digest(q.response_ids), q.weight, q.advantage, q.objective]
            for pid, _, q in seqs
            if q.is_peer
        ]
        out[name] = {
            "digest": digest(seqs),
            "layout": digest(layout),
            "groups": len(groups),
            "peer": peer,
            "floats": floats,
        }
    return out


def scores_record(s_values, weights) -> dict:
    """One direction's call: every peer response's score s (None where it could not be imported)
    and its admission weight w, admitted or not, so that a change in the score or the floor
    shows even where no admission flips."""
    return {
        "s": [None if math.isnan(x) else x for x in s_values],
        "w": list(weights),
    }


def weights_record(run_dir: Path, step: int, names) -> dict[str, dict]:
    """Per model: the sha256 of the checkpoint's tensors, and per tensor its sum of absolute
    values and of squares (float64), for the tolerant mode."""
    out = {}
    for name in names:
        checkpoint = run_dir / f"checkpoints/step_{step:06d}" / name
        state = load_file(str(checkpoint / "model.safetensors"))
        h = hashlib.sha256()
        stats = []
        for key in sorted(state):
            t = state[key].contiguous()
            h.update(key.encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
            t64 = t.double()
            stats.append([t64.abs().sum().item(), t64.square().sum().item()])
        out[name] = {"sha256": h.hexdigest(), "stats": stats}
    return out


# ------------------------------------------------------------------------------- comparing


COUNT_WORDS = (
    "verdict/",
    "candidates",
    "selected",
    "responses_sent",
    "admitted",
    "sent_correct",
    "dropped_",
    "truncated",
    "roundtrip_mismatch",
    "prompts_grafted",
    "by_skill/",
    "admit_if/",
    "/tokens",
    "optim/steps",
    "reward/mean",
    "groups/",
    "_frac",
    "pass@",
    "avg@",
    "mean_tokens",
    "step",
)
"""Metric names that count (or average counts of) discrete outcomes: compared exactly in both
modes. A float that merely looks like a count (a ratio of log-probs) is not among them."""
FLOAT_FRACS = ("clip_frac", "peer_token_frac")
"""Fractions of tokens past a float threshold: they can move by one token with the last bits."""


def is_count(key: str) -> bool:
    if any(word in key for word in FLOAT_FRACS):
        return False
    return any(word in key for word in COUNT_WORDS)


def close(a: float, b: float) -> bool:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _floats_close(got: list, want: list) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(g, list):
            if not isinstance(w, list) or not _floats_close(g, w):
                return False
        elif isinstance(g, float) or isinstance(w, float):
            if not close(g, w):
                return False
        elif g != w:
            return False
    return True


def differences(got: dict, want: dict, *, exact: bool) -> list[str]:
    """Every way `got` departs from the record `want` in the given mode (empty: it matches)."""
    out: list[str] = []
    if len(got["metrics"]) != len(want["metrics"]):
        return [f"{len(got['metrics'])} metric records, recorded {len(want['metrics'])}"]
    for step, (g, w) in enumerate(zip(got["metrics"], want["metrics"])):
        if g.keys() != w.keys():
            out.append(f"metrics {step}: keys differ: {sorted(set(g) ^ set(w))}")
            continue
        for k in w:
            same = g[k] == w[k] if exact or is_count(k) else close(g[k], w[k])
            if not same:
                out.append(f"metrics {step}: {k} = {g[k]!r}, recorded {w[k]!r}")
    if len(got["batches"]) != len(want["batches"]):
        out.append(f"{len(got['batches'])} training batches, recorded {len(want['batches'])}")
    for step, (g, w) in enumerate(zip(got["batches"], want["batches"])):
        for name in sorted(set(g) | set(w)):
            gb, wb = g.get(name), w.get(name)
            if gb is None or wb is None:
                out.append(f"batch {step} {name}: present in only one")
                continue
            for field in ("layout", "groups", *(("digest",) if exact else ())):
                if gb[field] != wb[field]:
                    out.append(f"batch {step} {name}: {field} differs")
            for field in ("peer", "floats"):
                same = gb[field] == wb[field] if exact else _floats_close(gb[field], wb[field])
                if not same:
                    out.append(f"batch {step} {name}: {field} differ")
    out += _score_differences(got.get("scores", []), want.get("scores", []), exact=exact)
    for name, w in want["weights"].items():
        g = got["weights"].get(name)
        if g is None:
            out.append(f"final weights of {name}: missing")
        elif exact and g["sha256"] != w["sha256"]:
            out.append(f"final weights of {name}: sha256 differs")
        elif not _floats_close(g["stats"], w["stats"]):
            out.append(f"final weights of {name}: statistics differ")
    return out


def _score_differences(got: list, want: list, *, exact: bool) -> list[str]:
    """Scores: bit for bit in the exact mode; else which responses are admitted exactly, and s
    and w to the tolerance."""
    if len(got) != len(want):
        return [f"{len(got)} scored directions, recorded {len(want)}"]
    out = []
    for i, (g, w) in enumerate(zip(got, want)):
        if exact:
            same = g == w
        else:
            admitted = [x > 0 for x in g["w"]] == [x > 0 for x in w["w"]]
            same = admitted and _floats_close(g["s"], w["s"]) and _floats_close(g["w"], w["w"])
        if not same:
            out.append(f"scored direction {i}: peer scores or admissions differ")
    return out
