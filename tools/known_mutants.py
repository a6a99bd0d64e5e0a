"""The five mutants issue 17 was filed about (and the bug it found): each must fail a test.

Each mutant is one textual change. It is applied to a scratch copy of the checkout
(build/known-mutants/<name>, so an interrupted run never leaves the real tree mutated), its test
files are run there, and the result is printed: KILLED (a test failed, as it must) or SURVIVED.

    python tools/known_mutants.py [NAME ...]

Exit status 1 if any mutant survived. The last run is recorded in docs/testing.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "known-mutants"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


PINS = "tests/test_pins_tiers.py"
MUTANTS = [
    Mutant(
        "lru-on_hits-pass",
        "src/ctxcache/policies/lru.py",
        "shards, tick = self._shards, self._tick\n",
        "return  # mutant: on_hits does nothing\n",
        ("tests/policies/test_batch_contract.py", "tests/policies/test_in_cache.py"),
    ),
    Mutant(
        "disk-decode-without-key",
        "src/ctxcache/tiers/disk.py",
        "return self._codec.decode(buf, kb), buf",
        "return self._codec.decode(buf), buf",
        ("tests/tiers/test_disk_misfiled.py",),
    ),
    Mutant(
        "disk-rebuild-without-name-check",
        "src/ctxcache/tiers/disk.py",
        'if h.total_len != st.st_size or h.key.hex() + ".blk" != f.name:',
        "if h.total_len != st.st_size:",
        ("tests/tiers/test_disk_misfiled.py",),
    ),
    Mutant(
        "is_unpinned-always-true",
        "src/ctxcache/index.py",
        "return node is not None and node.pins == 0",
        "return True",
        (PINS,),
    ),
    # _can_evict has two branches: all-RAM tiers (the index decides alone) and the general one
    # (copies, orphans and moves in flight); "ignoring pins above the last tier" in each.
    Mutant(
        "can_evict-no-pins-above-last(all-RAM)",
        "src/ctxcache/engine/placement.py",
        "return self.index.is_evictable if t == self.last else self.index.is_unpinned",
        "return self.index.is_evictable if t == self.last else (lambda key: True)",
        (PINS,),
    ),
    Mutant(
        "can_evict-no-pins-above-last(general)",
        "src/ctxcache/engine/placement.py",
        "return idx.is_evictable(key) if last else node.pins == 0",
        "return idx.is_evictable(key) if last else True",
        (PINS,),
    ),
    # Not in the issue: the Redis twin of the disk key check, found by `make mutate` (docs/testing.md).
    Mutant(
        "redis-load_many-decode-without-key",
        "src/ctxcache/tiers/redis.py",
        "block = self._codec.decode(blob, kb)",
        "block = self._codec.decode(blob)",
        ("tests/tiers/test_redis_misfiled.py",),
    ),
    Mutant(
        "redis-get_blob-decode-without-key",
        "src/ctxcache/tiers/redis.py",
        "self._codec.decode(got[0], kb)",
        "self._codec.decode(got[0])",
        ("tests/tiers/test_redis_misfiled.py",),
    ),
    # Not in the issue: the bug its strict xfail recorded (a Match pinned only its deepest block,
    # so the ancestors of a held prefix could be demoted), fixed in engine/lookup.py.
    Mutant(
        "match-pins-only-deepest",
        "src/ctxcache/engine/lookup.py",
        "pinned = nodes if len(e.slots) > 1 else nodes[-1:]",
        "pinned = nodes[-1:]",
        (PINS,),
    ),
]


def scratch(m: Mutant) -> Path:
    work = OUT / m.name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "src", work / "src", ignore=skip)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    target = work / m.file
    text = target.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"{m.name}: expected one occurrence of {m.old!r} in {m.file}; the code moved")
    target.write_text(text.replace(m.old, m.new))
    return work


def run(m: Mutant) -> tuple[bool, float, str]:
    """(killed, seconds, last line of pytest's summary)."""
    work = scratch(m)
    env = {**os.environ, "PYTHONPATH": str(work / "src")}
    env.setdefault("CTXCACHE_TRACES", str(ROOT.parent / "shared" / "traces"))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    totals = [ln for ln in lines if " passed" in ln or " failed" in ln or " error" in ln]
    summary = totals[-1].strip() if totals else proc.stderr.strip()[-200:]
    failed = [ln.split(" - ")[0] for ln in lines if ln.startswith("FAILED")]
    shutil.rmtree(work)
    return proc.returncode == 1, time.monotonic() - t0, (failed[0] + "  " if failed else "") + summary


def main() -> int:
    names = set(sys.argv[1:])
    survived = 0
    for m in MUTANTS:
        if names and m.name not in names:
            continue
        killed, secs, summary = run(m)
        survived += not killed
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {m.name:40} {secs:5.0f} s  {summary}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
