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

bench: install
	$(BIN)/python benchmarks/bench_lookup.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
