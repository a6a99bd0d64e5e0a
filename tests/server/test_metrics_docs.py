"""docs/metrics.md and grafana/ctxcache.json name only series that /metrics really serves, and
every served series is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .conftest import chat
from .test_observability import serve

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bctxcache_[a-z][a-z0-9_]*")
REDIS_ONLY = {"ctxcache_tier_reconnects_total", "ctxcache_tier_errors_total"}  # tiers without a backend lack them


def served() -> set[str]:
    """Series names a server with one memory tier serves after two requests (histograms with their
    _bucket/_sum/_count, counters with _total)."""
    with serve() as c:
        for _ in range(2):  # the second is a hit: series labelled by serving tier appear
            assert c.post("/v1/chat/completions", json=chat("hello " * 30)).status_code == 200
        text = c.get("/metrics").text
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_docs_and_grafana_name_only_served_series_and_docs_cover_them_all():
    have = {n for n in served() if not n.endswith("_created")} | REDIS_ONLY  # _created: client bookkeeping
    docs = (ROOT / "docs" / "metrics.md").read_text()
    dash = json.loads((ROOT / "grafana" / "ctxcache.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14 and all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in dash["panels"])
    documented = set(NAME.findall(docs))
    in_dash = {n for e in exprs for n in NAME.findall(e)}
    assert in_dash - have == set(), "the Grafana dashboard queries series that /metrics does not serve"
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in have}  # a histogram by its name
    assert documented - have - bases == set(), "docs/metrics.md names series that /metrics does not serve"
    undocumented = {n for n in bases if n not in documented}
    assert undocumented == set(), "served but not in docs/metrics.md"
