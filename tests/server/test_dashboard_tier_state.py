"""The dashboard's tier table shows a tier's down Cluster masters and its delete breaker (open:
deletes paused), next to up/DOWN. Chromium renders a canned /dashboard/data (a degraded Redis
Cluster tier); the served feed carries both fields for a real memory tier."""

from __future__ import annotations

import json

from .test_dashboard import chromium
from .test_observability import serve


def test_the_feed_carries_each_tiers_breaker_and_down_masters():
    with serve() as c:
        tiers = c.get("/dashboard/data").json()["tiers"]
    assert [(t["name"], t["deletes_paused"], t["masters_down"]) for t in tiers] == [("memory", False, [])]


def test_the_tier_table_shows_down_masters_and_paused_deletes():
    """Before, the state column said "up" for a Cluster tier with masters down and its deletes paused."""
    from playwright.sync_api import sync_playwright

    with serve() as c:
        data = c.get("/dashboard/data").json()
        base = {"kind": "redis", "bytes": 10, "capacity": 100, "blocks": 1, "corrupt": 0}
        data["tiers"] = [
            {**base, "name": "cl", "up": True, "deletes_paused": True, "masters_down": ["10.0.0.2:7001"]},
            {**base, "name": "one", "up": False, "deletes_paused": False, "masters_down": []},
            {**base, "name": "ok", "up": True, "deletes_paused": False, "masters_down": []},
        ]
        errors: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.route("**/dashboard/data*", lambda r: r.fulfill(status=200, body=json.dumps(data)))
                page.goto(f"{c.base_url}/dashboard")
                page.wait_for_function("document.querySelectorAll('#tiers tbody tr').length === 3", timeout=15000)
                cells = page.eval_on_selector_all(
                    "#tiers tbody tr td:last-child", "tds => tds.map(td => [td.textContent, td.className])"
                )
            finally:
                browser.close()
    assert errors == []
    assert cells == [
        ["up; 1 master down: 10.0.0.2:7001; deletes paused", "down"],
        ["DOWN", "down"],
        ["up", "up"],
    ]
