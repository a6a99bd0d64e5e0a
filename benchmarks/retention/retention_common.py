"""Shared by the retention benchmarks: the model, real texts every Debian machine ships, progress."""

from __future__ import annotations

import inspect
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

RESULTS = Path(__file__).resolve().parents[1] / "results"
LICENSES = Path("/usr/share/common-licenses")


def load_model(attn: str = "eager") -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ctxcache.integrations.model_store import resolve_model

    path = resolve_model(None)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn).eval()
    return model, AutoTokenizer.from_pretrained(path)


def texts() -> dict[str, str]:
    """Long texts from the machine itself: licence texts and Python standard library sources."""
    import argparse
    import difflib
    import textwrap

    out = {}
    # Alternating licence / Python source, so that any ``--texts N`` >= 2 covers both kinds.
    for name, mod in zip(("GPL-3", "Apache-2.0", "MPL-2.0"), (argparse, difflib, textwrap)):
        p = LICENSES / name
        if p.is_file():
            out[f"license:{name}"] = p.read_text(errors="replace")
        src = inspect.getsourcefile(mod)
        if src:
            out[f"python:{Path(src).name}"] = Path(src).read_text()
    if len(out) < 3:
        raise SystemExit("need /usr/share/common-licenses and the Python stdlib sources")
    return out


def progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def write(name: str, result: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    result["when_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
