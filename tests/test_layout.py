"""Layout limits that keep the code readable, checked on every test run (docs/ARCHITECTURE.md):
cache.py is a facade of at most 300 lines, no file in src/ over 400 lines, no function over 60.

Also importable as a script: ``python tests/test_layout.py`` prints every violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ctxcache"
MAX_FILE, MAX_FACADE, MAX_FUNCTION = 400, 300, 60


def file_lengths(root: Path = SRC) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def long_functions(root: Path = SRC, limit: int = MAX_FUNCTION) -> list[str]:
    """``path:line name (n lines)`` for each function or method longer than ``limit`` lines,
    counted from its ``def`` (decorators excluded) to its last line."""
    out = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    out.append(f"{p.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return out


def violations() -> list[str]:
    lengths = file_lengths()
    out = [f"{f}: {n} lines > {MAX_FILE}" for f, n in lengths.items() if n > MAX_FILE]
    if lengths["cache.py"] > MAX_FACADE:
        out.append(f"cache.py: {lengths['cache.py']} lines > {MAX_FACADE} (the facade stays thin)")
    return out + long_functions()


def test_files_and_functions_stay_small():
    assert violations() == []


def test_the_checker_sees_a_long_function(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 61)
    assert long_functions(tmp_path) == ["m.py:1 f (62 lines)"]


if __name__ == "__main__":
    for line in violations() or ["ok"]:
        print(line)
