# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv itself.
# While editing, `make check` (lint, types, the tests that need nothing but the venv) is the
# fast loop; `make test` runs everything, provisioning PostgreSQL, Graphviz and Chromium.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench
STAMP_DOCS := $(VENV)/.installed-docs
# The dev extras embed with a real MiniLM through sentence-transformers, which needs torch: a
# CPU build, installed first, or pip would take a CUDA build of several GB. Override TORCH
# where the CPU build comes from elsewhere (for example a local wheel path).
TORCH ?= torch==2.13.0

.PHONY: demo test check lint typecheck pytest pytest-fast coverage llama-background bench budgets chaos docs clean mcp-conformance

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q '$(TORCH)'
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

$(STAMP_DOCS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@

$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q '$(TORCH)'
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $@

demo: $(STAMP_BASE)
	$(BIN)/python examples/demo.py

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

PROVISION := bash scripts/ensure_postgres.sh && bash scripts/ensure_graphviz.sh && \
	bash scripts/ensure_chromium.sh && bash scripts/ensure_bwrap.sh && \
	bash scripts/ensure_mcp_servers.sh && bash scripts/ensure_mcp_conformance.sh

# No coverage here: branch tracing made the in-process tests about a quarter slower (CPU time
# on a 2-core machine that also builds llama.cpp), and no gate reads the figure. `make
# coverage` runs the same suite with the report.
pytest: $(STAMP_DEV)
	$(PROVISION)
	$(BIN)/python -m pytest -q -p no:cacheprovider

coverage: $(STAMP_DEV)
	$(PROVISION)
	$(BIN)/python -m pytest -q --cov --cov-report=term:skip-covered -p no:cacheprovider

# The llama.cpp server for tests/real_model takes minutes to build the first time: it builds
# in the background, at the lowest CPU priority, while lint, mypy and the other tests run. The
# real_model tests run last and wait for the build (scripts/ensure_llama_server.sh).
llama-background:
	bash scripts/ensure_llama_server.sh --background

# The CPU-time budget gate (benchmarks/budgets.py), quick form: about 15 s, after the tests so
# it does not share the cores with them; it fails naming the hot path that got slower.
budgets: $(STAMP_DEV)
	$(BIN)/python -m benchmarks --budgets --quick

test: llama-background lint typecheck pytest
	$(MAKE) --no-print-directory budgets

# Tests that need a server or a program outside the venv, and the long ones, carry a marker
# (pyproject.toml); the fast loop leaves them out. It provisions only bubblewrap, the sandbox
# choir.exec cannot run without (a no-op once installed), and otherwise needs no network.
FAST_TESTS := not postgres and not ray and not browser and not graphviz and not real_model and not mcp and not slow

# Two pytest workers: lint and mypy (with a warm cache) take seconds, so the tests are what
# make check waits for, and they share no state across processes (each has its own tmp_path).
pytest-fast: $(STAMP_DEV)
	bash scripts/ensure_bwrap.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m "$(FAST_TESTS)"

# Lint, types and tests at once (mypy with a warm cache takes seconds; the tests use both cores).
check: $(STAMP_DEV)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck pytest-fast

bench: $(STAMP_BENCH)
	$(BIN)/python -m benchmarks

chaos: $(STAMP_DEV)
	STARGRAPH_CHAOS_TRIALS=500 $(BIN)/python -m pytest -q tests/test_crash.py -p no:cacheprovider
	STARGRAPH_PG_WORKER_TRIALS=100 STARGRAPH_PG_CHAOS_TRIALS=50 $(BIN)/python -m pytest -q tests/postgres -p no:cacheprovider

# The whole MCP conformance suite, the client's OAuth scenarios included, one scenario at a
# time (about two minutes); `make test` runs the server side and the client's core scenarios
# (tests/mcp_conformance). Both hold stargraph to tests/mcp_conformance/baseline.yml.
mcp-conformance: $(STAMP_DEV)
	bash scripts/ensure_mcp_conformance.sh
	$(BIN)/python -m tests.mcp_conformance.run

docs: $(STAMP_DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .stargraph .pytest_cache .mypy_cache .ruff_cache site
