"""The lookup's fast path: one plain memory tier (``Engine.fast_lookup``), the counterpart of
store_simple.py.

What the general path (lookup.py: ``lookup``, then ``finish_simple``) costs beyond the walk is
mostly fixed: a Prompt built for one walk, a call per step, the tier's batch get and
``first_missing`` for a list of one, the index's pin loop. Here, for raw tokens the compiled
hasher takes as they are, the walk runs on their bytes with no Prompt, and a match of at most
one block (a miss, or the usual one-block hit) is served in line: one get, the slot's touch,
one pin, ``_count`` (the lookup counters' one owner), the same Usage and Match. A longer
match goes on to ``finish_simple``. A Prompt, tokens the compiled hasher does not take
(``token_bytes`` says None: converted or refused by ``as_token_array``) or a pure-Python hasher
take the general path whole. Engines with more tiers, a codec, a tier subclass or a policy that
watches the index never come here. tests/engine/test_lookup_fast.py runs both paths side by side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..keys import Namespace, Prompt
from ..usage import Usage
from . import lookup as _lookup
from .lookup import Match, _count, finish_simple

if TYPE_CHECKING:
    from ..keys import Tokens
    from .core import Engine


def lookup(e: Engine, tokens: Tokens | Prompt, namespace: str | Namespace) -> Match:
    if isinstance(tokens, Prompt):
        return _lookup.lookup(e, tokens)
    # Engine.namespace's cache read in line (a miss or a Namespace: the call resolves or raises)
    ns = e._namespaces.get((namespace, None)) if namespace.__class__ is str else None
    if ns is None:
        ns = e.namespace(namespace)
    h = e.hasher
    native = h._native
    if native is None or (buf := native.token_bytes(tokens)) is None:
        return _lookup.lookup(e, h.prompt(tokens, ns))
    stride = h._stride
    n_full = len(buf) // stride  # Prompt.n_blocks
    n_tokens = len(buf) >> 2  # len(Prompt.tokens): int32 bytes
    keys: list[bytes] = []  # Prompt._keys: what the walk hashes
    with e.lock:
        nodes: list[Any] = native.walk(buf, stride, n_full, keys, ns.root, ns.secret, h._kind, e.index.shards, None)
        if e.expiry.deadline:  # as lookup.lookup
            e.expiry.cut(nodes, e.clock())
        if len(nodes) > 1:
            return finish_simple(e, nodes, keys, n_full, n_tokens, ns)
        slot = e.slots[0]
        payload = slot.tier.get(keys[0]) if nodes else None  # exactly a MemoryTier: get_many's one answer
        if payload is None:  # a miss, or unreadable: the prefix ends before it
            nodes.clear()
            _count(e, nodes, n_full, n_tokens, ns.tenant)
            return Match(0, 0, [], Usage(0, 0, n_tokens, {}), ns, nodes, False, [], e)
        node = nodes[0]
        slot.touch(keys[:1])
        node.pins += 1  # RadixIndex.pin: nothing watches the index (Engine.fast_lookup)
        hit = _count(e, nodes, n_full, n_tokens, ns.tenant)
    # as finish_simple: positional
    return Match(hit, 1, [payload], Usage(hit, 0, n_tokens - hit, {slot.name: hit}), ns, nodes, False, [node], e)
