"""Mutation testing of the modules whose bugs cost correctness (``make mutate``; not part of ``make test``).

Each group below is a set of source files and the test files that own them. A group runs in its
own scratch copy of the repository (build/mutation/<group>), where a ``[tool.mutmut]`` section
limits mutmut to that group's sources and tests; mutmut then runs each mutant only against the
tests of that selection that reach the mutated function. Results: build/mutation/results.json
(per group and per module: killed, survived, timeouts, no tests, and every surviving mutant's name),
printed as a table. ``docs/testing.md`` records the last run and the triage of the survivors.

    python tools/mutate.py [GROUP ...] [--max-children N] [--only GLOB ...] [--sample N] [--seed S]

``--only`` narrows a group to some of its files (a representative subset when time is short).
``--sample N`` runs N mutants of each group, drawn with a fixed seed and spread over its modules in
proportion to their mutant counts; the others are reported as "not checked", and a module's score
is then an estimate from its sample (docs/testing.md gives the sample sizes of the recorded run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
        [
            "tests/test_keys.py",
            "tests/test_keys_byteorder.py",
            "tests/test_cache.py",
            "tests/engine/test_request_path.py",
        ],
    ),
    "index": (
        ["src/ctxcache/index.py"],
        [
            "tests/test_index.py",
            "tests/test_index_shards.py",
            "tests/test_properties.py",
            "tests/test_cache.py",
            "tests/test_pins_tiers.py",
        ],
    ),
    # codec_arrays.py and payload.py are the codec's array and payload halves (split for file size);
    # test_sealing owns the codec's encryption-at-rest path (_aad, _open).
    "codec": (
        ["src/ctxcache/codec.py", "src/ctxcache/codec_arrays.py", "src/ctxcache/payload.py"],
        [
            "tests/test_codec.py",
            "tests/test_codec_limits.py",
            "tests/test_codec_kinds.py",
            "tests/test_payload.py",
            "tests/tiers/test_disk.py",
            "tests/tiers/test_disk_misfiled.py",
            "tests/engine/test_sealing.py",
        ],
    ),
    "policies": (["src/ctxcache/policies/*.py"], ["tests/policies"]),
    # Verified erasure is the only user of RedisTier.stored_keys_of and _owned_by.
    "tiers": (
        ["src/ctxcache/tiers/*.py"],
        [
            "tests/tiers",
            "tests/test_hierarchy.py",
            "tests/test_pins_tiers.py",
            "tests/engine/test_ttl_bandwidth_erasure.py",
        ],
    ),
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
        'also_copy = ["docs"]\n'  # tests that check documented values read docs/
        # A mutant that makes a test wait (a mover thread that never starts) burns no CPU, so only
        # the wall-clock limit, (estimated test time + 1 s) x this, ends it; mutmut's 15 let one
        # mutant hold a worker for 15 minutes.
        "timeout_multiplier = 5.0\n"
    )


def prepare(group: str, srcs: list[str], tests: list[str], max_children: int) -> Path:
    work = OUT / group
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", work / "docs")
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


def generate(work: Path, env: dict[str, str]) -> list[str]:
    """Every mutant's name, from mutmut's own generation step (no test runs): ``mutmut run`` sees
    the files unchanged afterwards and keeps them."""
    code = (
        "from mutmut.__main__ import copy_src_dir, copy_also_copy_files, setup_source_paths, create_mutants\n"
        "copy_src_dir(); copy_also_copy_files(); setup_source_paths(); create_mutants(1)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, check=True)
    names: list[str] = []
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        names += json.loads(meta.read_text())["exit_code_by_key"]
    return sorted(names)


def sample(names: list[str], n: int, seed: int) -> list[str]:
    """``n`` names, each module's share in proportion to its mutant count (at least one each)."""
    by_module: dict[str, list[str]] = {}
    for name in names:
        by_module.setdefault(module_of(name), []).append(name)
    out: list[str] = []
    for mod in sorted(by_module):
        ms = by_module[mod]
        # One RNG per module: a change that adds or removes mutants in one module leaves the other
        # modules' samples as they were, so a triage of their survivors stays valid.
        rng = random.Random(f"{seed}:{mod}")
        out += rng.sample(ms, min(len(ms), max(1, round(n * len(ms) / len(names)))))
    return sorted(out)


def run_group(group: str, only: list[str], max_children: int, n_sample: int = 0, seed: int = 0) -> dict[str, object]:
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
    chosen: list[str] = []
    if n_sample:
        names = generate(work, env)
        chosen = sample(names, n_sample, seed)
        print(f"[{group}] sample of {len(chosen)} of {len(names)} mutants (seed {seed})", flush=True)
    with open(work / "mutmut.log", "w") as log:
        proc = subprocess.run(
            [str(mutmut), "run", "--max-children", str(max_children), *chosen],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    summary = collect(work)
    elapsed = time.monotonic() - t0
    print(f"[{group}] mutmut exit {proc.returncode} after {elapsed:.0f} s; log: {work / 'mutmut.log'}", flush=True)
    sampled = {"sample": len(chosen), "seed": seed} if n_sample else {}
    return {"exit": proc.returncode, "seconds": round(elapsed), **sampled, **summary}


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
    # [] in choices: argparse checks an empty positional list against them (default: every group)
    ap.add_argument("groups", nargs="*", metavar="GROUP", default=[], choices=[*GROUPS, []])
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", nargs="*", default=[], help="narrow to source files matching these patterns")
    ap.add_argument("--sample", type=int, default=0, help="run this many mutants per group (0: all)")
    ap.add_argument("--seed", type=int, default=17, help="seed of --sample")
    ap.add_argument("--report", action="store_true", help="only re-read the groups' last (or interrupted) runs")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    report_path = OUT / "results.json"
    for group in args.groups or list(GROUPS):
        if args.report and not (OUT / group / "mutants").exists():
            continue
        result = (
            collect(OUT / group)
            if args.report
            else run_group(group, args.only, args.max_children, args.sample, args.seed)
        )
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
