"""The import rules of docs/ARCHITECTURE.md, as import-linter contracts (pyproject.toml,
``[tool.importlinter]``): tiers are storage only, policies sit low, the engine knows no HTTP and
no simulator, nothing imports server/ or cli.py but the entry points, and the core is layered
facade -> engine -> tiers | policies."""

from __future__ import annotations

from pathlib import Path

from importlinter import cli as importlinter_cli  # the dev extra: a missing linter fails, not skips

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold(capsys):
    code = importlinter_cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out and "5 kept" in out, out
