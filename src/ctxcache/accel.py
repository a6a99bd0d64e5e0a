"""Which key walk, LRU/FIFO order and simulator loops run: compiled (``ctxcache._native``) or Python.

Chosen once, at import: the compiled module when it was built (``make install`` builds it:
tools/build_native.py) and ``CTXCACHE_NO_NATIVE`` is unset, else the pure-Python walk (keys.py) and
order (policies/base.py's OrderedPolicy), which stay the references (tests/test_native.py and
tests/policies/test_native_order.py check one against the other). ``use_native(False)`` (the CLI's
``--no-native``) switches later hashers and policies to the fallback; each keeps what it was made with.
The simulator's compiled replay loops (policies/replay.py's ``native_replay``) are looked up per replay.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

ENV = "CTXCACHE_NO_NATIVE"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV, "") not in ("", "0"):
        return None, f"disabled by {ENV}={os.environ[ENV]}"
    try:  # by name: the import checks (tests/test_imports.py) read a missing module as the package
        return importlib.import_module(f"{__package__}._native"), "built"
    except ImportError as exc:  # not built (no compiler at install), or built for another Python
        return None, f"not built: {exc}"


native, reason = _load()
_built = native


def use_native(on: bool) -> None:
    """Hashers and LRU/FIFO policies made after this call use the compiled code (when built) or the fallback."""
    global native, reason
    if on and _built is not None:
        native, reason = _built, "built"
    elif not on:
        native, reason = None, "disabled (--no-native)"


def describe() -> dict[str, Any]:
    """For ``ctxcache version`` and ``serve --print-config``: which walk runs, and why."""
    out: dict[str, Any] = {"key_walk": "native" if native is not None else "python", "reason": reason}
    out["lru_fifo_order"] = "native" if getattr(native, "Order", None) is not None else "python"
    # The simulator's per-policy loops (policies/replay.py's native_replay; the Python loops otherwise).
    out["sim_replay"] = "native" if getattr(native, "replay_arc", None) is not None else "python"
    if native is not None:
        out["module"] = native.__file__
        out["xxhash"], out["blake3"] = native.XXH_VERSION, native.BLAKE3_VERSION
    return out
