"""No dead state in the engine: every attribute an engine class sets on ``self`` and every method
it defines is read somewhere in src/ (a counter nobody reads is a second, silent owner of a number
the engine already counts, or a number nobody can see). Found so: ``Mover.moved`` (and
``Mover.errors``, whose failed writes ``Counters.write_errors`` counts), ``Expiry.next_deadline``
and ``Tenancy.is_admin`` (the admin routes compare ``admin_digests`` themselves).

By name, without types: an attribute whose name some other object's attribute also has (as
``errors`` is, in ``exc.errors()``) passes unseen; reads by tests do not count."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "ctxcache"


def _read_names() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # getattr(obj, "name") and the like
    return names


def _defined(cls: ast.ClassDef) -> set[str]:
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return names


def test_every_attribute_and_method_of_an_engine_class_is_read_in_src():
    read = _read_names()
    unread = []
    for path in sorted((SRC / "engine").glob("*.py")):
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            unread += [f"{path.name}: {cls.name}.{name}" for name in sorted(_defined(cls) - read)]
    assert unread == []
