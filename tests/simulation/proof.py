"""Proof of power (docs/testing.md): put one old bug back into a copy of src/ and run the bounded
seeds against it: ``python -m tests.simulation.proof BUG [--seeds 100]`` (BUG: a fix commit, or
``N-<name>`` for a bug the simulation found). Each edit takes the heart of the fix back out of the
code as it was at eb4a366; later changes to those lines make an edit fail to apply (it says so)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
E = "src/ctxcache/engine/"
EDITS: dict[str, list[tuple[str, str, str]]] = {  # bug -> (file, text of the fix, text of the bug)
    "97d8bb9": [(E + "mover.py", "tier.landing = functools.partial(self._landed, pos)", "pass")],
    "5fde19f": [(E + "mover.py", "move.replaces = self._held(move.dst, move.key)", "move.replaces = 0")],
    "0e26fb5": [(E + "mover.py", "move.release += self._unlanded(move)", "pass")],
    "55eaf87": [(E + "mover.py", "move.release = 0  # a move of it out", "pass  # a move of it out")],
    "e7b4268": [(E + "placement.py", "if not self.mover.deleting(m.key, src.pos):", "if True:")],
    "4c59834": [(E + "placement.py", "stays = m.key in dst.tier\n", "stays = False\n            dst.tier.forget(m.key)\n")],
    "b50a32d": [(E + "placement.py", "node.tier = below[0] if below and m.key in self.tiers[below[0]] else LOST",
                 "node.tier = LOST")],
    "13b5175": [(E + "lookup.py", "if payloads[i] is None and i in unavailable:", "if False:")],
    "7ea7cd1": [(E + "placement.py", "slot.stayed(key)  # no room below", "slot.admit(key)  # no room below")],
    "99080bd": [(E + "erasure.py", "elif slot.slow and pl.mover.leaving(key, t):", "elif False:")],
    "5a37858": [
        (E + "slot.py", "        if self.retry:\n            self.retry.pop(key, None)\n        if key not in", "        if key not in"),
        (E + "slot.py", "        if self.retry:\n            for key in keys:\n                self.retry.pop(key, None)\n", ""),
    ],
    "N-erase_pinned": [(E + "erasure.py", "                if key in e.index:  # in use (a match holds it): marked "
                        "expired, erased on release\n                    continue\n", "")],
    "N-expired_discovered": [(E + "discovery.py", "if expired(key) or key in pl.erased", "if key in pl.erased")],
    "N-unlanded_wrong_move": [(E + "mover.py", "w = self.write_into(move.key, src)", "return 0")],
    "N-failed_demotion_release": [(E + "mover.py", "d = self._queued_delete(m) if m.release and m.delete_src and "
                                   "not m.ok else None", "d = None")],
    "N-corrupt_read_queued_delete": [(E + "lookup.py", "            _discovery.vanished(e.placement, t, key)",
                                      "            pass")],
    "N-corrupt_read_erasure_check": [(E + "erasure.py", "                        _discovery.vanished(e.placement, t, key)",
                                      "                        pass")],
    "N-corrupt_expired_indexed": [(E + "discovery.py", "if node is not None and node.tier == t:", "if False:")],
    "N-erased_refused_rediscovered": [(E + "discovery.py", "or key in pl.erased", "")],
    "N-close_sweep": [(E + "core.py", "        self.sweep()  # expired blocks leave", "        pass  # expired blocks leave")],
}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.simulation.proof")
    ap.add_argument("bug", choices=sorted(EDITS))
    ap.add_argument("--seeds", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxcache-proof-") as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src")
        shutil.copytree(ROOT / "tests", Path(tmp) / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        for name, fix, bug in EDITS[args.bug]:
            path = Path(tmp) / name
            text = path.read_text()
            if fix not in text:
                print(f"{args.bug}: the fix's text is no longer in {name}: the edit needs updating")
                return 2
            path.write_text(text.replace(fix, bug, 1))
        env = {**os.environ, "PYTHONPATH": f"{tmp}/src:{tmp}", "PYTHONHASHSEED": "0"}
        cmd = [sys.executable, "-m", "tests.simulation", "--seeds", str(args.seeds), "--shrink-seconds", "0"]
        return subprocess.run(cmd, cwd=tmp, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
