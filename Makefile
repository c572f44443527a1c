# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench
STAMP_DOCS := $(VENV)/.installed-docs

.PHONY: demo test lint typecheck pytest bench chaos docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

$(STAMP_DOCS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@

$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $@

demo: $(STAMP_BASE)
	$(BIN)/python examples/demo.py

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

pytest: $(STAMP_DEV)
	bash scripts/ensure_postgres.sh
	bash scripts/ensure_graphviz.sh
	bash scripts/ensure_chromium.sh
	bash scripts/ensure_llama_server.sh
	$(BIN)/python -m pytest -q --cov --cov-report=term:skip-covered -p no:cacheprovider

test: lint typecheck pytest

bench: $(STAMP_BENCH)
	$(BIN)/python -m benchmarks

chaos: $(STAMP_DEV)
	STARGRAPH_CHAOS_TRIALS=500 $(BIN)/python -m pytest -q tests/test_crash.py -p no:cacheprovider
	STARGRAPH_PG_WORKER_TRIALS=100 STARGRAPH_PG_CHAOS_TRIALS=50 $(BIN)/python -m pytest -q tests/postgres -p no:cacheprovider

docs: $(STAMP_DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .stargraph .pytest_cache .mypy_cache .ruff_cache site
