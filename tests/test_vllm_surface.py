"""The vLLM stand-in offers nothing vLLM 0.30's offline interface lacks, so code written against it
cannot pass every CPU test and then fail on the real engine. The real interface is recorded from
vLLM's source in tests/vllm_interface.json (tests/record_vllm_interface.py). What only the
stand-in has is for the tests' eyes (`STANDIN_ONLY`), and graft's own code never reads it."""

import dataclasses
import inspect
import json
import re
from pathlib import Path

import vllm_standin

ROOT = Path(__file__).resolve().parents[1]
REAL = json.loads((ROOT / "tests" / "vllm_interface.json").read_text())
STANDIN_ONLY = {"calls", "kv_cache_memory_bytes", "hf"}
STANDIN_ONLY |= {"triton_f32_default"}
"""Inspection hooks of the stand-in, read by tests only (each is named in its module docstring
or set from a constructor argument of vLLM's)."""


def _public_methods(cls) -> dict[str, list[str]]:
    out = {}
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            out[name] = ["<property>"]
        elif callable(member) or isinstance(member, classmethod | staticmethod):
            params = inspect.signature(getattr(cls, name)).parameters
            out[name] = [p for p in params if p not in ("self", "cls")]
    return out


def test_the_recorded_interface_is_vllm_0_30():
    assert REAL["vllm"] == vllm_standin.__version__ == "0.30.0"
    assert {"generate", "sleep", "wake_up", "apply_model"} <= set(REAL["LLM"]["methods"])


def test_the_standins_methods_and_their_arguments_are_vllms():
    real = REAL["LLM"]["methods"]
    ours = _public_methods(vllm_standin.LLM)
    assert set(ours) <= set(real), f"not in vLLM 0.30's LLM: {sorted(set(ours) - set(real))}"
    accepted_by_init = set(real["__init__"]) | set(REAL["EngineArgs"])
    for name, params in ours.items():
        allowed = accepted_by_init if name == "__init__" else set(real[name])
        extra = set(params) - allowed - {"kwargs"}
        assert not extra, f"LLM.{name} takes {sorted(extra)}, which vLLM 0.30's does not"


def test_the_standins_attributes_are_vllms_or_test_hooks(tiny_paths):
    llm = vllm_standin.LLM(model=tiny_paths["llama"])
    public = {a for a in vars(llm) if not a.startswith("_")}
    extra = public - set(REAL["LLM"]["attributes"]) - STANDIN_ONLY
    assert not extra, f"attributes vLLM 0.30's LLM does not have: {sorted(extra)}"


def test_the_standins_sampling_parameters_are_vllms():
    ours = {f.name for f in dataclasses.fields(vllm_standin.SamplingParams)}
    assert ours <= set(REAL["SamplingParams"]), sorted(ours - set(REAL["SamplingParams"]))


def test_graft_never_reads_a_standin_only_attribute():
    """The hooks exist for tests; graft's engine code reading one would pass here and fail on
    vLLM."""
    hooks = re.compile(r"\.(" + "|".join(sorted(STANDIN_ONLY)) + r")\b")
    for path in (ROOT / "src" / "graft").rglob("*.py"):
        text = path.read_text()
        if "vllm" not in text.lower():
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if "llm" in line and hooks.search(line):
                raise AssertionError(f"{path.relative_to(ROOT)}:{lineno} reads {line.strip()!r}")
