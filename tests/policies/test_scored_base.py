"""ScoredPolicy's defaults for subclasses (base.py): a new policy that only gives a score inherits
the veto contract of docs/policies.md, without overriding ``evict``."""

from __future__ import annotations

from typing import Any

from ctxcache.policies.base import Key, ScoredPolicy

from .helpers import drain, evict_refusing_every_tenth


class Uses(ScoredPolicy):
    """The smallest scored policy: fewest uses first, ties to the older entry; no evict of its own."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.uses: dict[Key, int] = {}

    def _score(self, key: Key, hit: bool) -> float:
        self.uses[key] = self.uses.get(key, 0) + 1 if hit else 1
        return self.uses[key]

    def _forget(self, key: Key) -> None:
        del self.uses[key]


def test_a_subclass_counts_a_refusal_as_a_use_by_default():
    p = Uses()
    for k in range(4):
        p.on_insert(k)
    p.on_hit(3)
    assert p.peek(lambda k: k != 0) == 1 and p.uses[0] == 1  # peek only looks
    assert p.evict(lambda k: k != 0) == 1
    # 0 was refused once: a use, after 2 (one use) and after 3, which reached two uses first.
    # Pushed back unchanged it stayed the lowest score and was asked first by every evict.
    assert p.uses[0] == 2 and drain(p) == [2, 3, 0]


def test_a_subclass_pays_amortised_constant_for_refused_keys():
    p = Uses()
    for k in range(1000):
        p.on_insert(k)
    evict_refusing_every_tenth(p, 1000, "Uses")
