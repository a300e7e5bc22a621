"""Record the public interface of vLLM's offline `LLM` and `SamplingParams` from its source, for
tests/test_vllm_surface.py: the stand-in may offer nothing the real one lacks.

Reads the source without importing it (vLLM does not import without its CUDA libraries):

    pip download vllm==0.30.0 --no-deps -d /tmp/vllm && cd /tmp/vllm && unzip -q vllm-*.whl
    python tests/record_vllm_interface.py /tmp/vllm > tests/vllm_interface.json
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(cls: ast.ClassDef) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in cls.body:
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and (
            not f.name.startswith("_") or f.name == "__init__"
        ):
            args = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
            names = [a.arg for a in args if a.arg not in ("self", "cls")]
            out[f.name] = sorted(set(out.get(f.name, [])) | set(names))
    return out


def _instance_attributes(cls: ast.ClassDef) -> list[str]:
    found = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            is_self = isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            if is_self and t.value.id == "self" and not t.attr.startswith("_"):
                found.add(t.attr)
    return sorted(found)


def _fields(cls: ast.ClassDef) -> list[str]:
    return sorted(
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    )


def main(root: str) -> None:
    base = Path(root) / "vllm"
    version = "unknown"
    for line in (base / "_version.py").read_text().splitlines():
        if line.startswith("__version__ =") or line.startswith("__version__: str ="):
            version = ast.literal_eval(line.rsplit("=", 1)[1].strip())
    llm = _class(base / "entrypoints" / "llm.py", "LLM")
    out = {
        "vllm": version,
        "LLM": {"methods": _methods(llm), "attributes": _instance_attributes(llm)},
        "SamplingParams": _fields(_class(base / "sampling_params.py", "SamplingParams")),
        "EngineArgs": _fields(_class(base / "engine" / "arg_utils.py", "EngineArgs")),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
