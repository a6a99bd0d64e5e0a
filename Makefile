# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install run test lint bench bench-ttft clean redis-server chromium

# torch first and pinned: 2.13.0 is the CPU wheel on this machine's disk; anything unpinned
# that depends on torch would pull a multi-GB CUDA build instead.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,sim,model,server,redis,crypto]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The main job: prepare the default model (once) and serve it with the embedded default tiers.
run: install
	$(BIN)/ctxcache serve --host 127.0.0.1 --port 8000

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# Tier tests start throwaway redis-server processes: install Debian's when missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; }

# The dashboard test drives Debian's chromium headless (playwright cannot download its own here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

test: lint redis-server chromium
	$(BIN)/pytest

# Benchmarks print one JSON line each and write benchmarks/results/. libcachesim (GPL) is a
# benchmark-only reference: installed here, never imported by src/.
bench: install redis-server
	$(BIN)/pip install -q libcachesim
	$(BIN)/python benchmarks/bench_lookup.py
	$(BIN)/python benchmarks/bench_tiers.py
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_libcachesim_check.py
	$(BIN)/python benchmarks/bench_policies.py
	$(BIN)/python benchmarks/seed_claims.py
	$(BIN)/python benchmarks/bench_observability.py

# The serving benchmark: 10 sessions x 6 turns against the live server, cache on/off and a
# block-size sweep (~15 min on 2 cores).
bench-ttft: install
	$(BIN)/python benchmarks/bench_ttft.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
