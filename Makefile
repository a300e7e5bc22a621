# Entry points, each creating or reusing its virtual environment and installing the dependencies
# at the exact versions of a constraints file (torch is pinned there, always: an unpinned torch
# would pull a multi-GB CUDA build):
#   make demo       - set up .venv with what graft itself needs (constraints.txt: the tested newest
#                     versions) and run the main job on the CPU
#   make test       - set up .venv with the dev extras too and run the test suite on both cores
#                     (pytest-xdist; slow tests excluded, see `make test-slow`), then
#                     `make test-trackers`, then `make test-min-smoke`
#   make test-trackers - add the experiment trackers (the `trackers` extra: TensorBoard, W&B,
#                     MLflow, trackio) to .venv and run the tests that log to each of them
#   make test-min   - set up .venv-min with the lowest versions pyproject.toml allows
#                     (constraints-min.txt; torch stays 2.13.0) and run the same fast suite there
#   make test-min-smoke - the version-sensitive tests alone in .venv-min (model building and
#                     tokenizers, adapters, GGUF, the store): a few minutes

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STAMP_BASE := $(VENV)/.installed-base
STAMP_TRACKERS := $(VENV)/.installed-trackers
VENV_MIN ?= .venv-min
PY_MIN := $(VENV_MIN)/bin/python
STAMP_MIN := $(VENV_MIN)/.installed
# The packages whose installed versions `make test-min` prints before it runs the suite.
KEY_PACKAGES := torch|transformers|tokenizers|safetensors|huggingface.hub|math.verify|pyarrow|numpy|tqdm|matplotlib|pyyaml|pytest|pytest.timeout|ruff|gguf|ray|datasets|peft

.PHONY: demo test test-trackers test-slow test-all test-min test-min-smoke lint format clean setup

# Both cores: tests/conftest.py puts the tests that start processes of their own in one group.
XDIST := -n 2 --dist loadgroup
# The tests whose outcome depends most on the versions of torch, transformers, tokenizers, peft,
# gguf and pyarrow: run at the lowest ones by `make test` (the whole suite there: `make test-min`).
MIN_SMOKE := tests/test_models.py tests/test_lora.py tests/test_gguf.py tests/test_store.py

setup: $(STAMP)

# graft and its own dependencies: all `make demo` needs.
$(STAMP_BASE): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24" "setuptools>=77" wheel
	$(PY) -m pip install --quiet -c constraints.txt -e .
	touch $(STAMP_BASE)

# The dev extras on top (pytest, ruff, and the optional integrations the tests exercise).
$(STAMP): $(STAMP_BASE)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# The experiment trackers on top: their install is the heaviest, so they have their own target.
$(STAMP_TRACKERS): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,trackers]"
	touch $(STAMP_TRACKERS)

$(STAMP_MIN): pyproject.toml constraints-min.txt
	test -x $(PY_MIN) || $(PYTHON) -m venv $(VENV_MIN)
	$(PY_MIN) -m pip install --quiet --upgrade "pip>=24" "setuptools>=77" wheel
	$(PY_MIN) -m pip install --quiet -c constraints-min.txt -e ".[dev]"
	touch $(STAMP_MIN)

demo: $(STAMP_BASE)
	$(VENV)/bin/graft demo

test: $(STAMP)
	$(PY) -m pytest -m "not slow and not gpu and not trackers" $(XDIST) -q
	$(MAKE) --no-print-directory test-trackers
	$(MAKE) --no-print-directory test-min-smoke

test-trackers: $(STAMP_TRACKERS)
	$(PY) -m pytest -m "trackers and not slow and not gpu" -q

test-slow: $(STAMP)
	$(PY) -m pytest -m "slow and not gpu" -q

test-all: $(STAMP_TRACKERS)
	$(PY) -m pytest -m "not gpu" -q

test-min: $(STAMP_MIN)
	@echo "lowest supported versions (constraints-min.txt):"
	@$(PY_MIN) -m pip list --format=freeze 2>/dev/null | grep -iE '^($(KEY_PACKAGES))==' | sed 's/^/  /'
	$(PY_MIN) -m pytest -m "not slow and not gpu and not trackers" $(XDIST) -q

test-min-smoke: $(STAMP_MIN)
	$(PY_MIN) -m pytest -m "not slow and not gpu and not trackers" $(XDIST) -q $(MIN_SMOKE)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/ruff format --check src tests benchmarks scripts

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks scripts
	$(VENV)/bin/ruff check --fix src tests benchmarks scripts

clean:
	rm -rf $(VENV) $(VENV_MIN) .cache .pytest_cache runs
