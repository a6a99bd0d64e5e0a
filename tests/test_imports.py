"""The import rules of docs/ARCHITECTURE.md, as import-linter contracts (pyproject.toml,
``[tool.importlinter]``): tiers are storage only, policies sit low, the engine knows no HTTP and
no simulator, nothing imports server/ or cli.py but the entry points, the router's decision core
(index, table, score) imports none of its service, and the core is layered
facade -> engine -> tiers | policies."""

from __future__ import annotations

from pathlib import Path

from importlinter import cli as importlinter_cli  # the dev extra: a missing linter fails, not skips

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold(capsys):
    code = importlinter_cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out and "6 kept" in out, out


# --- run-time imports, function-level ones included (grimp: the graph import-linter reads) ------------

# router/ is a service of its own (`ctxcache route`) that parses requests with the server's schemas.
ENTRY_POINTS = ("ctxcache.cli", "ctxcache.cli_cache", "ctxcache.server", "ctxcache.router")
# Its decision core is a library the fleet simulator (sim/fleet_arms.py) routes with, so the
# simulated arms take the router's own decisions; a contract in pyproject.toml keeps it free of
# the service (no HTTP, no server, no proxy).
ROUTER_CORE = frozenset({"ctxcache.router.index", "ctxcache.router.table", "ctxcache.router.score"})
# The engine's function-module pattern (docs/ARCHITECTURE.md, "Import circles"): a module of
# functions that take the owner as their first argument names the owner's class for its type hints
# only (under TYPE_CHECKING), while the owner imports the module to call it. No other circle.
TYPE_ONLY_CIRCLES = [
    # tombstones.py is the mover's too (refused deletes are journaled), so the circle through its
    # type-only import of Engine takes in the modules from core down to the mover.
    [
        "ctxcache.engine.core",
        "ctxcache.engine.discovery",
        "ctxcache.engine.erasure",
        "ctxcache.engine.invalidation",
        "ctxcache.engine.lifecycle",
        "ctxcache.engine.lookup",
        "ctxcache.engine.lookup_simple",
        "ctxcache.engine.mover",
        "ctxcache.engine.placement",
        "ctxcache.engine.refusals",
        "ctxcache.engine.store",
        "ctxcache.engine.store_simple",
        "ctxcache.engine.through",
        "ctxcache.engine.tombstones",
        "ctxcache.engine.ttl",
        "ctxcache.engine.write_lag",
    ],
    ["ctxcache.semantic.cache", "ctxcache.semantic.erasure"],
]


def _graph(type_checking: bool):
    import grimp

    return grimp.build_graph("ctxcache", exclude_type_checking_imports=not type_checking, cache_dir=None)


def _circles(graph) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan, iterative)."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in graph.modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(adj):
        if root in order:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                order[v] = low[v] = len(order)
                stack.append(v)
                on_stack.add(v)
            if i < len(adj[v]):
                work.append((v, i + 1))
                w = adj[v][i]
                if w not in order:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], order[w])
                continue
            for w in adj[v]:
                if w in on_stack:
                    low[v] = min(low[v], low[w])
            if low[v] == order[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def test_no_module_imports_an_entry_point_at_run_time():
    """Also an import inside a function (observability/cli.py took ``default_trace`` from cli.py so):
    every package below the entry points, present or added later, without a list to keep."""
    graph = _graph(type_checking=False)
    up = []
    for target in ENTRY_POINTS:
        for mod in ({target} | graph.find_descendants(target)) - ROUTER_CORE:
            for importer in graph.find_modules_that_directly_import(mod):
                if not importer.startswith(ENTRY_POINTS) and importer != "ctxcache":
                    up.append(f"{importer} -> {mod}")
    assert up == []


def test_no_import_circle_at_run_time():
    assert _circles(_graph(type_checking=False)) == []


def test_the_type_only_circles_are_the_named_ones():
    """A new circle through a TYPE_CHECKING import is either removed or named in ARCHITECTURE.md and here."""
    assert _circles(_graph(type_checking=True)) == TYPE_ONLY_CIRCLES
