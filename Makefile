# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,sim]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

run: install
	$(BIN)/ctxcache demo

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# Benchmarks print one JSON line each and write benchmarks/results/. libcachesim (GPL) is a
# benchmark-only reference: installed here, never imported by src/.
bench: install
	$(BIN)/pip install -q libcachesim
	$(BIN)/python benchmarks/bench_lookup.py
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_libcachesim_check.py
	$(BIN)/python benchmarks/bench_policies.py
	$(BIN)/python benchmarks/seed_claims.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
