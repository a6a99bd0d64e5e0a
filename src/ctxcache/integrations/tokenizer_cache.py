"""A model directory's tokenizer, loaded once per tokenizer version and kept ready for the next start.

``AutoTokenizer.from_pretrained`` on Gemma 3's 33 MB ``tokenizer.json`` costs ~4-5 s of CPU per
process: Python's json parses the file twice and the slow tokenizer class rebuilds a 262k-entry
vocabulary and 515k merges in Python before the Rust backend parses it again. Every ``ctxcache
serve``, every ``ctxcache route`` and every test that starts one paid it. The object that comes
out (after ``drop_python_vocab``) pickles to ~15 MB and unpickles in ~1 s (the Rust backend's own
state, no Python vocabulary rebuilt), so the first load writes that pickle next to the model and
later loads read it.

A pickle runs code when loaded, so one is read only when it is what this process would have
written: the file is named by a hash of the tokenizer files' names, sizes and mtimes and of the
transformers, tokenizers and Python versions (any change is a new name: a stale pickle is never
read; it stays, 15 MB, until the directory goes), it is owned by this user and writable by no one else (the same trust as the model's own
files, which this user wrote). Anything unexpected (unwritable directory, unreadable or damaged
pickle) falls back to the ordinary load: the cache only ever saves time. ``CTXCACHE_TOKENIZER_CACHE=0``
turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from .model_store import drop_python_vocab

log = logging.getLogger(__name__)

# Files a Hugging Face tokenizer may read from its directory.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
_PREFIX = ".ctxcache-tokenizer-"


def cache_path(path: Path) -> Path:
    """Where the pickled tokenizer of ``path`` lives for these files and library versions."""
    import tokenizers
    import transformers

    h = hashlib.sha256(f"{transformers.__version__}|{tokenizers.__version__}|{sys.version}".encode())
    for name in _TOKENIZER_FILES:
        f = path / name
        if f.is_file():
            st = f.stat()
            h.update(f"|{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return path / f"{_PREFIX}{h.hexdigest()[:24]}.pkl"


def _trusted(f: Path) -> bool:
    st = f.stat()
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(f: Path) -> Any | None:
    try:
        if not f.is_file() or not _trusted(f):
            return None
        with f.open("rb") as fh:
            return pickle.load(fh)
    except Exception as exc:  # a damaged or foreign file: the ordinary load, and a fresh pickle
        log.warning("tokenizer cache %s unreadable (%s); loading the tokenizer anew", f, exc)
        return None


def _write(f: Path, tok: Any) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=_PREFIX, suffix=".tmp", dir=f.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(tok, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.chmod(tmp, 0o644)
            os.replace(tmp, f)  # atomic: a concurrent reader sees the whole file or none
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except Exception as exc:  # a read-only model directory: no cache, nothing lost
        log.debug("tokenizer cache not written to %s: %s", f.parent, exc)


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The tokenizer of the model directory ``path``, without its Python vocabulary copies."""
    p = Path(path)
    use = os.environ.get("CTXCACHE_TOKENIZER_CACHE", "1") not in ("0", "false", "no", "off")
    f = cache_path(p) if use else None
    if f is not None and (tok := _read(f)) is not None:
        return tok
    from transformers import AutoTokenizer

    tok = drop_python_vocab(AutoTokenizer.from_pretrained(p))
    if f is not None:
        _write(f, tok)
    return tok
