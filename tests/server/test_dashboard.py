"""The dashboard in headless Chromium (Debian's ``chromium``, driven by playwright): after a known
workload the page loads without console errors and shows that workload's numbers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ctxcache.observability.service import ObsConfig

from .conftest import chat
from .test_observability import SYSTEM, serve

ADMIN = "dash-admin-key"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def chromium() -> str:
    path = os.environ.get("CTXCACHE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed: `make test` installs Debian's chromium (apt-get install chromium)"
    return path


def test_dashboard_shows_the_workload_without_console_errors(tmp_path):
    # docs/dashboard.png is refreshed on request only, so a test run leaves the checkout clean
    shot = DOCS / "dashboard.png" if os.environ.get("CTXCACHE_UPDATE_SCREENSHOT") == "1" else tmp_path / "dash.png"
    from playwright.sync_api import sync_playwright

    keys = {"key-alice": "alice", "key-bob": "bob"}
    with serve(obs=ObsConfig(log_every_s=3600, admin_key=ADMIN), api_keys=keys) as c:
        obs = c.app.state.obs
        for i in range(6):  # alice 4 requests, bob 2; the shared system prompt is cached after the first
            key = "key-alice" if i % 3 else "key-bob"
            r = c.post("/v1/chat/completions", json=chat(f"question {i}", system=SYSTEM), headers={"x-api-key": key})
            assert r.status_code == 200
            obs.tick()
        want = c.get("/dashboard/data", headers={"X-Admin-Key": ADMIN}).json()
        assert want["totals"]["requests"] == 6
        errors: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{c.base_url}/dashboard#admin={ADMIN}")
                page.wait_for_function("document.getElementById('requests').textContent === '6'", timeout=15000)
                text = {k: page.inner_text(f"#{k}") for k in ("hit-ratio", "hit-tokens", "entropy", "ttft-p50")}
                tenants = page.locator("#tenants tbody tr").all_inner_texts()
                tiers = page.locator("#tiers tbody tr").all_inner_texts()
                points = page.eval_on_selector("#chart-hit polyline", "e => e.getAttribute('points').split(' ').length")
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
    assert errors == []
    assert shot.stat().st_size > 10_000
    t = want["totals"]
    assert text["hit-ratio"] == f"{100 * t['hit_ratio']:.1f}%" and t["hit_ratio"] > 0
    assert text["hit-tokens"] == f"{t['hit_tokens']:,} / {t['prompt_tokens']:,}"
    assert text["ttft-p50"].endswith("ms")
    assert [row.split("\t")[:3] for row in tenants] == [["alice", "a", "4"], ["bob", "a", "2"]]
    assert len(tiers) == 1 and tiers[0].startswith("memory (memory)") and "up" in tiers[0]
    assert points >= 5  # one history point per tick with lookups
