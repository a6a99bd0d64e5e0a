"""Mutation testing of the modules whose bugs cost correctness (``make mutate``; not part of ``make test``).

Each group below is a set of source files and the test files that own them. A group runs in its
own scratch copy of the repository (build/mutation/<group>), where a ``[tool.mutmut]`` section
limits mutmut to that group's sources and tests; mutmut then runs each mutant only against the
tests of that selection that reach the mutated function. Results: build/mutation/results.json
(per group and per module: killed, survived, timeouts, no tests, and every surviving mutant's name),
printed as a table. ``docs/testing.md`` records the last run and the triage of the survivors.

    python tools/mutate.py [GROUP ...] [--max-children N] [--only GLOB ...]

``--only`` narrows a group to some of its files (a representative subset when time is short).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "mutation"

# group -> (source globs, test paths). Globs that match nothing are skipped (the engine package
# exists only after the engine refactor; tiers/hierarchy.py only before it).
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "keys": (
        ["src/ctxcache/keys.py"],
        ["tests/test_keys.py", "tests/test_cache.py", "tests/engine/test_request_path.py"],
    ),
    "index": (
        ["src/ctxcache/index.py"],
        ["tests/test_index.py", "tests/test_properties.py", "tests/test_cache.py", "tests/test_pins_tiers.py"],
    ),
    "codec": (
        ["src/ctxcache/codec.py"],
        ["tests/test_codec.py", "tests/tiers/test_disk.py", "tests/tiers/test_disk_misfiled.py"],
    ),
    "policies": (["src/ctxcache/policies/*.py"], ["tests/policies"]),
    "tiers": (["src/ctxcache/tiers/*.py"], ["tests/tiers", "tests/test_hierarchy.py", "tests/test_pins_tiers.py"]),
    "engine": (
        ["src/ctxcache/engine/*.py", "src/ctxcache/cache.py"],
        [
            "tests/engine",
            "tests/test_cache.py",
            "tests/test_hierarchy.py",
            "tests/test_pins_tiers.py",
            "tests/test_properties.py",
            "tests/policies/test_in_cache.py",
        ],
    ),
}


# Tests whose verdict depends on wall-clock timeouts (a 50 ms Redis timeout): on a loaded machine
# they fail without any mutant, and mutmut then refuses to start ("failed to run clean test").
DESELECT = ["--deselect", "tests/test_hierarchy.py::test_every_tier_kind_from_toml"]

# Not mutated: test doubles (fake tiers exist for the engine's tests) and package re-exports.
SKIP = {"__init__.py", "fake.py"}


def sources(globs: list[str]) -> list[str]:
    out: list[str] = []
    for g in globs:
        out += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(g) if p.name not in SKIP)
    return out


def config(srcs: list[str], tests: list[str], max_children: int) -> str:
    def arr(xs: list[str]) -> str:
        return "[" + ", ".join(json.dumps(x) for x in xs) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {arr(srcs)}\n"
        f"pytest_add_cli_args_test_selection = {arr(tests)}\n"
        f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', '-q', '-x', *DESELECT])}\n"
        "use_git_change_detection = false\n"
    )


def prepare(group: str, srcs: list[str], tests: list[str], max_children: int) -> Path:
    work = OUT / group
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + config(srcs, tests, max_children))
    (work / "README.md").write_text("scratch copy for mutation testing\n")
    return work


def results(work: Path) -> dict[str, str]:
    """mutant name -> status, from ``mutmut results --all true``."""
    env = {**os.environ, "PYTHONPATH": ""}
    mutmut = Path(sys.executable).with_name("mutmut")
    proc = subprocess.run(
        [str(mutmut), "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True, check=False
    )
    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            out[name] = status.strip()
    return out


def module_of(mutant: str) -> str:
    # ctxcache.policies.lru.xǁLRUǁon_hits__mutmut_1 -> ctxcache.policies.lru
    head = mutant.split("__mutmut_")[0]
    parts = head.split(".")
    keep = [p for p in parts if not p.startswith("x_") and not p.startswith("xǁ")]
    return ".".join(keep)


def run_group(group: str, only: list[str], max_children: int) -> dict[str, object]:
    globs, tests = GROUPS[group]
    srcs = sources(globs)
    if only:
        srcs = [s for s in srcs if any(Path(s).match(o) or o in s for o in only)]
    tests = [t for t in tests if (ROOT / t).exists()]
    if not srcs or not tests:
        print(f"[{group}] skipped: no sources ({globs}) or no tests ({tests}) in this checkout", flush=True)
        return {"skipped": True}
    work = prepare(group, srcs, tests, max_children)
    env = {**os.environ, "PYTHONPATH": "", "CTXCACHE_TRACES": str(ROOT.parent / "shared" / "traces")}
    mutmut = Path(sys.executable).with_name("mutmut")
    print(f"[{group}] {len(srcs)} files, tests {tests}", flush=True)
    t0 = time.monotonic()
    with open(work / "mutmut.log", "w") as log:
        proc = subprocess.run(
            [str(mutmut), "run", "--max-children", str(max_children)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    summary = collect(work)
    elapsed = time.monotonic() - t0
    print(f"[{group}] mutmut exit {proc.returncode} after {elapsed:.0f} s; log: {work / 'mutmut.log'}", flush=True)
    return {"exit": proc.returncode, "seconds": round(elapsed), **summary}


def collect(work: Path) -> dict[str, object]:
    """Per-module counts and survivors of a group's scratch copy (also of an interrupted run:
    mutants it did not reach are "not checked")."""
    status = results(work)
    per_module: dict[str, Counter[str]] = {}
    survivors: dict[str, list[str]] = {}
    for name, st in status.items():
        mod = module_of(name)
        per_module.setdefault(mod, Counter())[st] += 1
        if st == "survived":
            survivors.setdefault(mod, []).append(name)
    return {
        "modules": {m: dict(c) for m, c in sorted(per_module.items())},
        "survivors": survivors,
    }


def score(c: dict[str, int]) -> str:
    killed = c.get("killed", 0) + c.get("timeout", 0) + c.get("segfault", 0)
    judged = killed + c.get("survived", 0)
    return f"{100 * killed / judged:.1f}%" if judged else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("groups", nargs="*", default=list(GROUPS), choices=[*GROUPS, []])
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", nargs="*", default=[], help="narrow to source files matching these patterns")
    ap.add_argument("--report", action="store_true", help="only re-read the groups' last (or interrupted) runs")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    report_path = OUT / "results.json"
    for group in args.groups:
        if args.report and not (OUT / group / "mutants").exists():
            continue
        result = collect(OUT / group) if args.report else run_group(group, args.only, args.max_children)
        (OUT / f"{group}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    # Every group's last result (groups may run in separate invocations).
    report: dict[str, object] = {
        g: json.loads((OUT / f"{g}.json").read_text()) for g in GROUPS if (OUT / f"{g}.json").exists()
    }
    report_path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(f"\n{'module':40} {'killed':>7} {'timeout':>7} {'survived':>8} {'no tests':>8} {'unrun':>6} {'score':>7}")
    for group in report:
        g = report[group]
        assert isinstance(g, dict)
        for mod, c in g.get("modules", {}).items():
            print(
                f"{mod:40} {c.get('killed', 0):7} {c.get('timeout', 0):7} {c.get('survived', 0):8} "
                f"{c.get('no tests', 0):8} {c.get('not checked', 0):6} {score(c):>7}"
            )
    print(f"\nfull results: {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
