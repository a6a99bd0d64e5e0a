"""Build ctxcache._native (native/*.c) next to the package, in place.

    python tools/build_native.py           # build if a source is newer than the module
    python tools/build_native.py --force   # rebuild
    python tools/build_native.py --clean   # remove the built module: the pure-Python fallback runs
    python tools/build_native.py --strict  # a failed build is an error (else a warning, exit 0)

`make install` runs it. A machine without a C compiler still installs: the build is skipped with a
warning and ctxcache runs its pure-Python key walk and LRU/FIFO order (docs/ARCHITECTURE.md,
"The native module").
The compiler, flags and file suffix come from the running interpreter (sysconfig), as setuptools
would take them; objects go to build/native/.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native"
BLAKE3 = SRC / "vendor" / "blake3"
OBJ = ROOT / "build" / "native"
OUT = ROOT / "src" / "ctxcache" / f"_native{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
# -ffp-contract=off: no fused multiply-adds, so the replay loops' float steps round as Python's do.
CFLAGS = ["-O3", "-fPIC", "-std=gnu11", "-fvisibility=hidden", "-DNDEBUG", "-ffp-contract=off"]
X86_ASM = ["sse2", "sse41", "avx2", "avx512"]


def sources() -> tuple[list[Path], list[str]]:
    """The C (and assembly) files and the defines for this machine's BLAKE3 code paths."""
    files = [
        SRC / "ctxcache_native.c",
        SRC / "ctxcache_table.c",
        SRC / "ctxcache_events.c",
        SRC / "ctxcache_encode.c",
        SRC / "ctxcache_order.c",
        SRC / "ctxcache_blocks.c",
        SRC / "ctxcache_blocks_py.c",
        SRC / "ctxcache_replay.c",
        SRC / "ctxcache_replay_queues.c",
        SRC / "ctxcache_replay_reuse.c",
        SRC / "ctxcache_replay_scored.c",
        SRC / "ctxcache_replay_wtinylfu.c",
        SRC / "ctxcache_replay_prefix.c",
        *(BLAKE3 / f for f in ("blake3.c", "blake3_dispatch.c", "blake3_portable.c")),
    ]
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64") and sys.platform != "win32":
        return files + [BLAKE3 / f"blake3_{isa}_x86-64_unix.S" for isa in X86_ASM], []
    defines = [f"-DBLAKE3_NO_{isa.upper()}" for isa in X86_ASM]
    if machine in ("aarch64", "arm64"):
        return files + [BLAKE3 / "blake3_neon.c"], defines
    return files, defines + ["-DBLAKE3_USE_NEON=0"]


def compiler() -> tuple[list[str], list[str]]:
    """$CC and $LDSHARED when set (as setuptools reads them), else the interpreter's own."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    ld = shlex.split(os.environ.get("LDSHARED") or sysconfig.get_config_var("LDSHARED") or f"{cc[0]} -shared")
    if sys.platform == "darwin" and "-bundle" not in ld:
        ld += ["-bundle", "-undefined", "dynamic_lookup"]
    return cc, ld


def stale(files: list[Path]) -> bool:
    if not OUT.exists():
        return True
    built = OUT.stat().st_mtime
    deps = [*files, Path(__file__), *SRC.rglob("*.h")]
    return any(p.stat().st_mtime > built for p in deps)


def build() -> None:
    files, defines = sources()
    cc, ld = compiler()
    inc = ["-I", sysconfig.get_paths()["include"], "-I", str(SRC / "vendor" / "xxhash"), "-I", str(BLAKE3)]
    OBJ.mkdir(parents=True, exist_ok=True)
    objs = []
    for f in files:
        o = OBJ / (f.name + ".o")
        subprocess.run([*cc, *CFLAGS, *defines, *inc, "-c", str(f), "-o", str(o)], check=True)
        objs.append(str(o))
    tmp = OUT.with_suffix(".tmp")
    subprocess.run([*ld, *objs, "-o", str(tmp)], check=True)
    tmp.replace(OUT)  # atomic: a running process keeps the module it mapped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args()
    if a.clean:
        OUT.unlink(missing_ok=True)
        print(f"removed {OUT.relative_to(ROOT)}: the pure-Python key walk and LRU/FIFO order run")
        return 0
    if not a.force and not stale(sources()[0]):
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return 0
    try:
        build()
    except (OSError, subprocess.CalledProcessError) as exc:
        print(
            f"warning: ctxcache._native not built ({exc}); the pure-Python key walk and LRU/FIFO order run",
            file=sys.stderr,
        )
        return 1 if a.strict else 0
    print(f"built {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
