"""Token-level retention on the real model: positions, budgets, warm store, compressed namespaces."""

from __future__ import annotations

import math
from collections.abc import Hashable

import pytest
import torch
from transformers import DynamicCache

from ctxcache.errors import TierUnavailableError
from ctxcache.integrations.compressed import RetentionLM
from ctxcache.integrations.retained import Evicted, RetentionSession, nll
from ctxcache.integrations.retention import RetentionConfig, RetentionConfigError
from ctxcache.integrations.truncation import naive_prompt, stable_cut, stable_prompt
from ctxcache.integrations.warm_kv import WarmStore, recall_feed
from ctxcache.tiers import MemoryTier

from .model_fixture import new_lm, prompt_ids

CTX, Q = 600, 24  # a context past Gemma 3's 512-token sliding window
SHORT = 256


@pytest.fixture(scope="module")
def lm():
    return new_lm()


@pytest.fixture(scope="module")
def ids(lm):
    return prompt_ids(lm, CTX + Q, seed=3)


@pytest.fixture
def eager(lm):
    lm.model.set_attn_implementation("eager")
    yield lm.model
    lm.model.set_attn_implementation("sdpa")


class _Masked(RetentionSession):
    """Reference: every token kept, the given positions hidden from later queries by the mask."""

    def __init__(self, model, hidden):
        super().__init__(model, RetentionConfig("full", 1.0))
        self.hidden = hidden

    def allowed(self, qpos, kpos):
        vis = ~torch.isin(kpos, self.hidden)
        return {k: a & vis[None] for k, a in super().allowed(qpos, kpos).items()}

    @property
    def kept(self):  # forces explicit masks even though nothing is dropped
        return len(self.pos) - 1 if len(self.pos) else 0


def _plain(lm, ids, split):
    kv = DynamicCache()
    lm._forward(ids[:split], kv, 0)
    return lm._forward(ids[split:], kv, split, keep=len(ids) - split)


@pytest.fixture(scope="module")
def plain(lm, ids):
    return _plain(lm, ids, CTX)


@pytest.mark.parametrize("policy", ["full", "streaming", "h2o"])
def test_budget_100_percent_gives_identical_logits(lm, ids, plain, policy, request):
    if policy == "h2o":
        request.getfixturevalue("eager")  # the scored path (output_attentions) must not change a bit either
    s = RetentionSession(lm.model, RetentionConfig(policy, 1.0), chunk=lm.prefill_chunk)
    s.feed(ids[:CTX])
    assert s.compress() is None and s.kept == CTX
    got = s.feed(ids[CTX:], keep_logits=Q)
    assert torch.equal(got, plain if policy != "h2o" else _plain(lm, ids, CTX))  # h2o: vs plain eager


def test_explicit_masks_match_the_models_own_masks(lm, ids, plain):
    """With nothing hidden, the explicit full and sliding-window masks reproduce the plain forward."""
    ref = _masked_logits(lm, ids, torch.zeros(0, dtype=torch.int64))
    diff = (ref - plain).abs().max().item()
    assert diff < 1e-3, diff


def _masked_logits(lm, ids, hidden):
    r = _Masked(lm.model, torch.zeros(0, dtype=torch.int64))
    r.feed(ids[:CTX])  # the context itself ran with every token visible, as in the session
    r.hidden = hidden
    return r.feed(ids[CTX:], keep_logits=Q)


def test_positions_stay_correct_after_dropping(lm, ids):
    s = RetentionSession(lm.model, RetentionConfig("streaming", 0.5, sinks=4))
    s.feed(ids[:CTX])
    ev = s.compress()
    assert ev is not None and s.kept == 300 and len(ev.positions) == 300
    naive_kv = DynamicCache()
    for li, layer in enumerate(s.kv.layers):
        naive_kv.update(layer.keys.clone(), layer.values.clone(), li)
    got = s.feed(ids[CTX:], keep_logits=Q)
    ref = _masked_logits(lm, ids, ev.positions)
    assert (got - ref).abs().max().item() < 1e-3
    # Naive: positions from the cache length, masks from cache indices (what transformers does).
    out = lm.model(input_ids=torch.tensor([ids[CTX:]]), cache=naive_kv, use_cache=True, logits_to_keep=Q)
    assert (out.logits[0] - ref).abs().max().item() > 1.0


def test_budget_is_kept_on_every_compress_and_nll_is_finite(lm, ids):
    s = RetentionSession(lm.model, RetentionConfig("streaming", 64, sinks=4))
    s.feed(ids[:200])
    s.compress()
    total, n = nll(s, ids[200:264], step=32)
    assert s.kept == 64 and n == 64 and math.isfinite(total) and total > 0
    assert s.kv_bytes() == 64 * sum(2 * layer.keys[0, :, 0].numel() * 4 for layer in s.kv.layers)


@pytest.mark.parametrize("policy", ["h2o", "snapkv", "entropy"])
def test_scored_policies_keep_sinks_and_the_budget(lm, ids, eager, policy):
    s = RetentionSession(lm.model, RetentionConfig(policy, 0.25, sinks=4, recent=16))
    s.feed(ids[:SHORT])
    s.compress()
    assert s.kept == SHORT // 4 and s.pos[:4].tolist() == [0, 1, 2, 3]
    assert s.pos[-16:].tolist() == list(range(SHORT - 16, SHORT))
    assert torch.all(s.pos[1:] > s.pos[:-1])  # ascending, no duplicates
    assert s.scores.entropy[1:SHORT].min() >= 0 and s.scores.entropy.max() <= 1.0 + 1e-9


def test_warm_store_round_trip_is_exact(lm, ids):
    full_layers = [i for i, t in enumerate(lm.model.config.layer_types) if t == "full_attention"]
    warm = WarmStore(full_layers, block_size=64, namespace="t")
    s = RetentionSession(lm.model, RetentionConfig("streaming", 0.5), warm=warm)
    ref = RetentionSession(lm.model, RetentionConfig("full", 1.0))
    s.feed(ids[:SHORT])
    ref.feed(ids[:SHORT])
    ev = s.compress()
    assert len(warm.entries) == len(torch.unique(ev.positions // 64))  # one entry per (block, offsets)
    for key in list(warm.entries):
        pos, layers = warm.take(key)
        s.insert(pos, layers)
    assert not warm.entries and torch.equal(s.pos, torch.arange(SHORT))
    for a, b in zip(s.kv.layers, ref.kv.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_recall_brings_back_what_the_query_needs(lm, ids):
    full_layers = [i for i, t in enumerate(lm.model.config.layer_types) if t == "full_attention"]
    warm = WarmStore(full_layers, block_size=64)
    s = RetentionSession(lm.model, RetentionConfig("streaming", 0.5), warm=warm)
    s.feed(ids[:SHORT])
    s.compress()
    n0 = len(warm.entries)
    logits, st = recall_feed(s, ids[CTX:], top_k=2, measure=True, tau=0.01)
    assert st.entries == n0 and len(st.recalled) == 2 and len(warm.entries) == n0 - 2
    assert s.kept == SHORT // 2 + st.recalled_tokens + Q and logits.shape == (1, lm.vocab_size)
    assert set(st.needed) <= set(warm.entries) | set(st.recalled)


def test_compressed_and_exact_namespaces_never_share_blocks(lm):
    ids = prompt_ids(lm, 300, seed=5)
    rlm = RetentionLM(lm, RetentionConfig("streaming", 0.5))
    exact = lm.prefill(ids)
    assert exact.usage.cache_creation_tokens == 256
    first = rlm.prefill(ids)
    assert first.usage.cache_read_tokens == 0 and first.usage.cache_creation_tokens == 256
    ns_exact, ns_comp = lm.cache.namespace("default"), lm.cache.namespace(first.namespace)
    assert not set(lm.cache.hasher.keys(ids, ns_exact)) & set(lm.cache.hasher.keys(ids, ns_comp))
    again = rlm.prefill(ids)  # the compressed prefix is reused, and gives what the first call computed
    assert again.usage.cache_read_tokens == 256
    assert (again.logits - first.logits).abs().max().item() < 1e-4
    with lm.cache.lookup(ids, "default") as m:  # the exact blocks are untouched, full width
        assert m.n_blocks == 4 and all(p[0][0].shape[-2] == 64 for p in m.payloads)
    other = RetentionLM(lm, RetentionConfig("streaming", 0.25))  # another budget: another namespace
    assert other.prefill(ids).usage.cache_read_tokens == 0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"budget": 0}, "token budget must be >= 1"),
        ({"budget": -3}, "token budget must be >= 1"),
        ({"budget": 0.0}, r"fractional budget must be in \(0, 1\]"),
        ({"budget": 1.5}, r"fractional budget must be in \(0, 1\]"),
        ({"budget": float("nan")}, "budget must be"),
        ({"budget": True}, "budget must be"),
        ({"policy": "lru"}, "unknown retention policy 'lru'"),
        ({"policy": "full", "budget": 0.5}, "budget must be 1.0"),
        ({"decay": 0.0}, "decay"),
    ],
)
def test_bad_config_is_a_clear_error(kw, match):
    with pytest.raises(RetentionConfigError, match=match):
        RetentionConfig(**kw)


@pytest.mark.parametrize("policy", ["h2o", "snapkv", "entropy"])
def test_scored_policy_on_an_sdpa_model_is_refused(lm, policy):
    assert lm.model.config._attn_implementation == "sdpa"
    with pytest.raises(RetentionConfigError, match="only eager attention"):
        RetentionSession(lm.model, RetentionConfig(policy, 0.5))
    with pytest.raises(RetentionConfigError, match="only eager attention"):
        RetentionLM(lm, RetentionConfig(policy, 0.5))


def test_stable_cut_keeps_its_prefix_and_naive_does_not():
    system, turns = [1] * 10, [[i] * 30 for i in range(2, 40)]
    prompts = [stable_prompt(system, turns[:n], 200) for n in range(1, len(turns) + 1)]
    assert all(len(p) <= 200 for p in prompts)
    cuts = [stable_cut([30] * n, 10, 200) for n in range(1, len(turns) + 1)]
    assert cuts == sorted(cuts) and len(set(cuts)) < len(cuts) // 2  # moves rarely, never back
    same = sum(p[: len(q) - 30] == q[: len(q) - 30] for q, p in zip(prompts[1:], prompts))
    assert same >= len(prompts) * 0.6
    naive = [naive_prompt(system, turns[:n], 200) for n in range(8, len(turns) + 1)]
    assert all(a[10:40] != b[10:40] for a, b in zip(naive, naive[1:]))


def test_take_keeps_the_recall_when_the_tiers_delete_fails():
    """A remote tier (Redis) raises when a delete may not have landed; the KV was read by then, so
    the recall goes on and the entry leaves the store (its copy is counted as orphaned)."""

    class Refusing(MemoryTier):
        def delete(self, key: Hashable) -> bool:
            raise TierUnavailableError("redis down")

    warm = WarmStore([0], block_size=4, tier=Refusing(1 << 20))
    k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    (key,) = warm.put([5, 6, 7, 8], Evicted(torch.tensor([0, 1, 2]), [(k, v)]))
    pos, layers = warm.take(key)
    assert pos.tolist() == [0, 1, 2] and torch.equal(layers[0][0], k) and torch.equal(layers[0][1], v)
    assert not warm.entries and warm.recalls == 1 and warm.orphaned == 1
