"""docs/routing.md's metrics table lists exactly the series the router serves (names as scraped:
counters with ``_total``)."""

from __future__ import annotations

import re
from pathlib import Path

from ctxcache.router.metrics import RouterMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "routing.md"


def _documented() -> set[str]:
    text = DOC.read_text()
    section = text.split("## Metrics (`GET /metrics` on the router)", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `(ctxcache_router_[a-z0-9_]+)`", section, re.M)}


def test_the_router_metrics_table_matches_the_served_series():
    served = set()
    for fam in RouterMetrics().registry.collect():
        served.add(fam.name + "_total" if fam.type == "counter" else fam.name)
    assert _documented() == served
