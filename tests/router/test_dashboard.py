"""The router's fleet panel: /dashboard/data after a known workload (fake-model workers behind the
router), and the page in headless Chromium without console errors showing those numbers."""

from __future__ import annotations

from ..server.test_dashboard import chromium
from .test_proxy import chat, fleet


def workload(f) -> dict:
    for q in ("Opening hours?", "Do you lend maps?", "Is there parking?", "Who runs it?"):
        assert f.client.post("/v1/chat/completions", json=chat(q)).status_code == 200
    return f.client.get("/dashboard/data").json()


def test_the_fleet_data_counts_what_the_router_did():
    with fleet() as f:
        d = workload(f)
        by_url = {w["url"]: w for w in d["workers"]}
        assert set(by_url) == set(f.urls) and all(w["healthy"] for w in d["workers"])
        t = d["totals"]
        assert t["requests"] == 4 and t["healthy_workers"] == 2 and t["ejections"] == 0
        assert sorted(w["requests"] for w in d["workers"]) == [0, 4]  # one shared prefix: one worker
        assert d["imbalance"] == 2.0  # 4 requests against a mean of 2
        assert t["predicted_cached_tokens"] == t["reported_cached_tokens"] > 0
        assert t["prompt_tokens"] == sum(w["prompt_tokens"] for w in d["workers"]) > 0
        assert d["decisions"].get("cache", 0) >= 3 and d["before_send_mean_ms"] > 0
        assert d["index"]["blocks"] == 0 and d["events"] is None  # no --redis: the history routes
        page = f.client.get("/dashboard")
        assert page.status_code == 200 and "ctxcache router" in page.text  # the router's, not a worker's


def test_the_fleet_panel_shows_the_workload_without_console_errors(tmp_path):
    from playwright.sync_api import sync_playwright

    with fleet() as f:
        d = workload(f)
        errors: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{f.url}/dashboard")
                page.wait_for_function("document.getElementById('requests').textContent === '4'", timeout=15000)
                text = {
                    k: page.inner_text(f"#{k}")
                    for k in ("imbalance", "predicted", "reported", "event-lag", "ejections")
                }
                rows = page.locator("#workers tbody tr").all_inner_texts()
                page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)
            finally:
                browser.close()
    assert errors == []
    t = d["totals"]
    assert text["imbalance"] == "2.00" and text["ejections"] == "0" and text["event-lag"] == "no --redis"
    assert text["predicted"] == text["reported"] == f"{t['predicted_cached_tokens']:,}"
    assert len(rows) == 2 and sorted(r.split("\t")[2] for r in rows) == ["0", "4"]
    assert all(r.split("\t")[1] == "up" for r in rows)
