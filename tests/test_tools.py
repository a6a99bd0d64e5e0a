"""The repository's own tools start as the Makefile calls them (`make mutate` with no GROUPS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
