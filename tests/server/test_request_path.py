"""The server's pins go through the cache API with the request's Prompt (keys the lookup already
computed), not with re-sliced token lists that would be validated and hashed again."""

from __future__ import annotations

from ctxcache.keys import Prompt

from .conftest import message, serve
from .test_api import LONG


def test_cache_control_pins_reuse_the_requests_prompt(monkeypatch):
    with serve(auto_cache=False) as c:
        pins = c.app.state.ctx.pins
        seen = []
        keep = pins.keep

        def spy(tokens, namespace, ttl_s):
            seen.append(tokens)
            return keep(tokens, namespace, ttl_s)

        monkeypatch.setattr(pins, "keep", spy)
        system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "5m"}}]
        r = c.post("/v1/messages", json=message("First?", system=system))
        assert r.status_code == 200, r.text
        assert len(seen) == 1 and isinstance(seen[0], Prompt)
        assert len(seen[0]._keys) >= seen[0].n_blocks  # already hashed by the prefill's lookup/store
        assert c.get("/healthz").json()["pins"]["pinned_prefixes"] == 1
