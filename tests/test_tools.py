"""The repository's own tools start as the Makefile calls them (`make mutate` with no GROUPS)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def test_mutate_with_no_group_means_every_group_and_a_bad_group_is_refused():
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "tools/mutate.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )

    ok = run("--report")  # what `make mutate` passes when GROUPS is empty, minus the run itself
    assert ok.returncode == 0, ok.stderr
    bad = run("nosuchgroup", "--report")
    assert bad.returncode == 2 and "invalid choice: 'nosuchgroup'" in bad.stderr


def _load_mutate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutate_tool", ROOT / "tools" / "mutate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_module_sample_does_not_move_when_another_module_changes() -> None:
    mutate = _load_mutate()
    a = [f"ctxcache.a.x_f__mutmut_{i}" for i in range(50)]
    b = [f"ctxcache.b.x_g__mutmut_{i}" for i in range(50)]
    before = [n for n in mutate.sample(a + b, 20, 17) if ".b." in n]
    # module a gains mutants (a new function); module b's draw must stay the same
    extra = [f"ctxcache.a.x_e__mutmut_{i}" for i in range(3)]  # b keeps its 10 draws
    after = [n for n in mutate.sample([*extra, *a, *b], 20, 17) if ".b." in n]
    assert before == after


def test_every_known_mutant_still_applies_to_the_code() -> None:
    """`make mutate-known` is not part of `make test`: without this, a refactor that moves the code
    a known mutant edits breaks that target silently (it did once, when the LRU was sharded)."""
    spec = importlib.util.spec_from_file_location("known_mutants_tool", ROOT / "tools" / "known_mutants.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve the module by name
    spec.loader.exec_module(mod)
    for m in mod.MUTANTS:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, f"{m.name}: {m.old!r} must occur once in {m.file}"
        assert all((ROOT / t).exists() for t in m.tests), m.name
