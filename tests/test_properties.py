"""Hypothesis state machines: the cache against a naive model, under any operation sequence."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ctxcache import ContextCache

from .conftest import payload_for

BS = 3
NAMESPACES = ["a", "b"]
# Few distinct tokens, so prompts share prefixes and diverge at every kind of position.
prompts = st.lists(st.integers(0, 2), min_size=0, max_size=14)
namespaces = st.sampled_from(NAMESPACES)


class CacheMachine(RuleBasedStateMachine):
    """(c) lookup == longest stored prefix of a naive dict model, when nothing is evicted."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": "1GiB"}]})
        self.model: set[tuple[str, tuple[int, ...]]] = set()  # stored (namespace, block-aligned prefix)
        self.matches: list = []

    def expected_blocks(self, ns: str, toks: list[int]) -> int:
        n = 0
        while n < len(toks) // BS and (ns, tuple(toks[: (n + 1) * BS])) in self.model:
            n += 1
        return n

    @rule(toks=prompts, ns=namespaces)
    def store_prompt(self, toks, ns):
        with self.cache.lookup(toks, ns) as m:
            n = len(toks) // BS
            self.cache.store(toks, [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, n)], ns, m.n_blocks)
        for i in range(len(toks) // BS):
            self.model.add((ns, tuple(toks[: (i + 1) * BS])))

    @rule(toks=prompts, ns=namespaces, keep=st.booleans())
    def lookup(self, toks, ns, keep):
        m = self.cache.lookup(toks, ns)
        want = self.expected_blocks(ns, toks)
        assert m.n_blocks == want and m.hit_tokens == want * BS
        assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(want)]
        # (e) the other namespace hits only what was stored under it
        other = NAMESPACES[1 - NAMESPACES.index(ns)]
        with self.cache.lookup(toks, other) as mo:
            assert mo.n_blocks == self.expected_blocks(other, toks)
        if keep:
            self.matches.append(m)
        else:
            self.cache.release(m)

    @rule(a=prompts, p=st.integers(0, 13), ns=namespaces)
    def diverge(self, a, p, ns):
        """(d) prompts first differing at position p match floor(p / BS) blocks."""
        a = (a + [0] * 14)[:14]
        b = a[:p] + [a[p] + 1] + a[p + 1 :]
        with self.cache.lookup(a, ns) as m:
            self.cache.store(a, [payload_for(ns, a, i, BS) for i in range(m.n_blocks, 14 // BS)], ns, m.n_blocks)
        for i in range(14 // BS):
            self.model.add((ns, tuple(a[: (i + 1) * BS])))
        with self.cache.lookup(b, ns) as mb:
            assert mb.n_blocks >= p // BS
            if (ns, tuple(b[: (p // BS + 1) * BS])) not in self.model:
                assert mb.n_blocks == p // BS

    @rule()
    def release_one(self):
        if self.matches:
            self.cache.release(self.matches.pop())

    def teardown(self):
        for m in self.matches:
            self.cache.release(m)


class EvictingMachine(RuleBasedStateMachine):
    """(a) bytes <= capacity, (b) every block reachable from its root, (f) pinned blocks survive."""

    def __init__(self) -> None:
        super().__init__()
        self.cap = 10 * 32
        self.cache = ContextCache.from_config(
            {
                "block_size": BS,
                "tiers": [{"kind": "memory", "capacity": self.cap, "policy": "lru", "high": 0.85, "low": 0.6}],
            }
        )
        self.pinned: list[tuple] = []  # (match, tokens, ns)

    @rule(toks=prompts, ns=namespaces, pin=st.booleans())
    def request(self, toks, ns, pin):
        m = self.cache.lookup(toks, ns)
        assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(m.n_blocks)]  # never a wrong block
        n = len(toks) // BS
        self.cache.store(toks, [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, n)], ns, m.n_blocks)
        if pin:
            self.pinned.append((m, toks, ns))
        else:
            self.cache.release(m)

    @rule()
    def unpin(self):
        if self.pinned:
            self.cache.release(self.pinned.pop(0)[0])

    @rule()
    def evict_everything_possible(self):
        self.cache.evict_all()

    @invariant()
    def bytes_within_capacity(self):
        assert self.cache.stats()["bytes"] <= self.cap

    @invariant()
    def every_block_reachable_from_its_root(self):
        idx = self.cache.index
        roots = {self.cache.namespace(ns).root for ns in NAMESPACES}
        for node in idx:
            chain = idx.chain(node.key)  # raises if a parent is missing
            assert chain[0].parent in roots and [n.depth for n in chain] == list(range(len(chain)))
            assert node.key in self.cache.tiers[node.tier]

    @invariant()
    def pinned_blocks_survive(self):
        for m, toks, ns in self.pinned:
            with self.cache.lookup(toks, ns) as again:
                assert again.n_blocks >= m.n_blocks
                assert again.payloads[: m.n_blocks] == m.payloads

    def teardown(self):
        for m, _, _ in self.pinned:
            self.cache.release(m)


TestCacheMachine = CacheMachine.TestCase
TestCacheMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestEvictingMachine = EvictingMachine.TestCase
TestEvictingMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
