"""Run some tests against one mutant of the last ``make mutate`` run (how a survivor's triage is checked).

    python tools/mutant_check.py GROUP MUTANT_NAME TEST_PATH [TEST_PATH ...]

The tests are taken from this checkout; the sources from mutmut's mutated copy in
build/mutation/GROUP/mutants/src, with only MUTANT_NAME active (mutmut's trampolines read
``MUTANT_UNDER_TEST``). Prints KILLED (a test failed: exit 0) or SURVIVED (every test passed:
exit 1); anything else (no such group, a collection error) exits 2 with pytest's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    group, name, tests = argv[0], argv[1], argv[2:]
    src = ROOT / "build" / "mutation" / group / "mutants" / "src"
    if not src.is_dir():
        print(f"no {src}: run `make mutate GROUPS={group}` first", file=sys.stderr)
        return 2
    env = {**os.environ, "MUTANT_UNDER_TEST": name, "PYTHONPATH": str(src)}
    env.setdefault("CTXCACHE_TRACES", str(ROOT.parent / "shared" / "traces"))
    # pythonpath= drops the project's own `pythonpath = ["src"]`, which would shadow the mutants.
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-o", "pythonpath=", "-q", "-x", "-p", "no:cacheprovider"]
    proc = subprocess.run([*cmd, *tests], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        print(f"SURVIVED {name}")
        return 1
    if proc.returncode == 1:
        print(f"KILLED {name}")
        return 0
    print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
