# Two entry points, each creating or reusing .venv and installing the pinned dependencies:
#   make demo   - set up and run the main job on the CPU
#   make test   - set up and run the test suite (slow tests excluded; see `make test-slow`)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all lint format clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24" "setuptools>=77" wheel
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/graft demo

test: $(STAMP)
	$(PY) -m pytest -m "not slow and not gpu" -q

test-slow: $(STAMP)
	$(PY) -m pytest -m "slow and not gpu" -q

test-all: $(STAMP)
	$(PY) -m pytest -m "not gpu" -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

clean:
	rm -rf $(VENV) .cache .pytest_cache runs
