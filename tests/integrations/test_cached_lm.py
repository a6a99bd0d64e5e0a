"""CachedLM on the real model: cached prefills must give the logits of a full recompute."""

from __future__ import annotations

import pytest

from ctxcache.integrations import SamplingParams

from .model_fixture import new_lm, prompt_ids, text

TOL = 1e-3


@pytest.fixture(scope="module")
def stored():
    """One cache holding a 600-token prompt: 9 full blocks (576 tokens), its tail block partial."""
    lm = new_lm()
    base = prompt_ids(lm, 700)
    pf = lm.prefill(base[:600])
    assert pf.usage.cache_creation_tokens == 576 and pf.usage.cache_read_tokens == 0
    return lm, base


def _other_suffix(lm):
    return list(lm.tokenizer(" Question: why was the train to the coast late?", add_special_tokens=False).input_ids)


@pytest.mark.parametrize(
    ("case", "hit"),
    [
        ("block boundary inside the window", 256),  # P[:300]
        ("cached prompt ended mid-block, hit beyond the 512 window", 576),  # P[:700]
        ("whole prompt cached: last block is recomputed", 512),  # P[:576]
        ("another prompt's prefix, different suffix", 576),  # P[:576] + other text
    ],
)
def test_cached_continuation_logits_equal_full_recompute(stored, case, hit):
    lm, base = stored
    query = {
        256: base[:300],
        512: base[:576],
        576: base[:700] if "window" in case else base[:576] + _other_suffix(lm),
    }[hit]
    n_suffix = len(query) - hit
    pf = lm.prefill(query, keep_logits=n_suffix, store_upto=0)
    assert pf.usage.cache_read_tokens == hit, case
    assert pf.usage.uncached_tokens == n_suffix
    assert pf.usage.by_tier == {"memory": hit}
    ref = lm.full_logits(query, keep_logits=n_suffix)
    assert pf.logits.shape == ref.shape == (n_suffix, lm.vocab_size)
    diff = (pf.logits - ref).abs().max().item()
    assert diff < TOL, f"{case}: max |logit diff| = {diff}"
    assert pf.timings.prefill_s > 0 and pf.timings.lookup_s >= 0 and pf.timings.load_s > 0


def test_a_model_without_the_cache_disagrees(stored):
    """Negative control: if positions were wrong the comparison above would catch it."""
    import torch

    lm, base = stored
    query = base[:300]
    ref = lm.full_logits(query)
    pf = lm.prefill(query, store_upto=0)
    kv = pf.kv
    shifted = lm._forward(query[256:], lm._rebuild([[(k[:, :, :256], v[:, :, :256]) for k, v in _kv(kv)]]), 0)
    assert (shifted[-1] - ref[-1]).abs().max().item() > 1.0
    assert torch.equal(pf.logits.argmax(-1), ref.argmax(-1))


def _kv(kv):
    return [(layer.keys, layer.values) for layer in kv.layers]


def test_greedy_outputs_identical_with_and_without_the_cache():
    lm = new_lm(block_size=32)
    msgs = [{"role": "system", "content": text(10)}, {"role": "user", "content": "Which bridge was debated?"}]
    cold = lm.generate(msgs, max_new_tokens=8)
    warm = lm.generate(msgs, max_new_tokens=8)
    ids = lm.encode(msgs)
    off = lm.stream_tokens(ids, SamplingParams(max_new_tokens=8), use_cache=False)
    off_text = "".join(off)
    assert cold.usage.cache_read_tokens == 0 and cold.usage.cache_creation_tokens == len(ids) // 32 * 32
    assert warm.usage.cache_read_tokens == (len(ids) - 1) // 32 * 32 > 0
    assert warm.token_ids == cold.token_ids == off.result.token_ids
    assert warm.text == cold.text == off_text
    assert off.result.usage.cache_read_tokens == 0 and off.result.usage.cache_creation_tokens == 0


def test_another_namespace_gets_no_hit():
    lm = new_lm(block_size=32)
    ids = prompt_ids(lm, 100)
    assert lm.prefill(ids, namespace="tenant-a").usage.cache_creation_tokens == 96
    assert lm.prefill(ids, namespace="tenant-b").usage.cache_read_tokens == 0
    assert lm.prefill(ids, namespace="tenant-a").usage.cache_read_tokens == 96


def test_stream_yields_the_text_and_stops_at_a_stop_string():
    lm = new_lm(block_size=32)
    msgs = [{"role": "user", "content": "Tell me about the library in the old town."}]
    s = lm.stream(msgs, max_new_tokens=12)
    deltas = list(s)
    full = s.result
    assert "".join(deltas) == full.text and full.finish_reason in ("length", "stop")
    assert full.completion_tokens == len(full.token_ids) <= 12
    t = full.timings
    assert t.first_token_s > 0 and t.total_s >= t.first_token_s and t.decode_s >= 0
    words = full.text.split()
    assert len(words) >= 3, full.text
    stop = words[2]
    cut = lm.generate(msgs, max_new_tokens=12, stop=[stop])
    assert cut.finish_reason == "stop" and cut.stop_sequence == stop
    assert cut.text == full.text[: full.text.index(stop)]


def test_seeded_sampling_is_reproducible():
    lm = new_lm(block_size=32)
    msgs = [{"role": "user", "content": "Write a word."}]
    a = lm.generate(msgs, max_new_tokens=6, temperature=0.9, top_p=0.9, seed=7)
    b = lm.generate(msgs, max_new_tokens=6, temperature=0.9, top_p=0.9, seed=7)
    assert a.token_ids == b.token_ids


def test_the_reply_is_cached_for_the_next_turn():
    lm = new_lm(block_size=16)
    msgs = [{"role": "system", "content": text(4)}, {"role": "user", "content": "Say something about rain."}]
    first = lm.generate(msgs, max_new_tokens=20)
    n1 = len(lm.encode(msgs))
    assert first.generated_cached_tokens > 0
    follow = [*msgs, {"role": "assistant", "content": first.text}, {"role": "user", "content": "More?"}]
    second = lm.generate(follow, max_new_tokens=2)
    # At least the first turn's prompt blocks; more when the reply re-tokenizes to the same ids.
    assert second.usage.cache_read_tokens >= n1 // 16 * 16


def test_bad_input_gets_a_clear_error():
    lm = new_lm()
    with pytest.raises(ValueError, match="non-empty list"):
        lm.encode([])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        lm.encode([{"role": "robot", "content": "hi"}])
    with pytest.raises(ValueError, match="context limit"):
        lm.prefill([2] * lm.max_context)
    with pytest.raises(ValueError, match="out of range"):
        lm.prefill([2, lm.vocab_size])
    with pytest.raises(ValueError, match="empty"):
        lm.prefill([])
    with pytest.raises(ValueError, match="top_p"):
        lm.generate([{"role": "user", "content": "x"}], top_p=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        lm.generate([{"role": "user", "content": "x"}], max_new_tokens=0)


def test_payloads_are_per_layer_kv_tensors_sized_by_the_memory_tier():
    lm = new_lm(block_size=32)
    lm.prefill(prompt_ids(lm, 70))
    cfg = lm.model.config
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4
    assert lm.cache.stats()["bytes"] == 2 * 32 * per_token
    with lm.cache.lookup(prompt_ids(lm, 70)) as m:
        block = m.payloads[0]
        assert len(block) == cfg.num_hidden_layers
        k, v = block[0]
        assert tuple(k.shape) == (1, cfg.num_key_value_heads, 32, cfg.head_dim) and k.is_contiguous()


def test_blocks_read_back_from_a_disk_tier_give_the_same_logits(tmp_path):
    """Serializing tiers return numpy views of their blobs, not the stored tensors."""
    from ctxcache import ContextCache
    from ctxcache.integrations.transformers import CachedLM

    from .model_fixture import _load

    model, tok = _load()
    block_bytes = 18 * 2 * 256 * 4 * 32
    tiers = [{"kind": "memory", "capacity": 10 * block_bytes}, {"kind": "disk", "path": str(tmp_path), "capacity": "1GiB", "fsync": False}]  # fmt: skip
    with ContextCache.from_config({"block_size": 32, "tiers": tiers}) as cache:
        lm = CachedLM(model, tok, cache)
        a, b = prompt_ids(lm, 300, seed=1), prompt_ids(lm, 260, seed=2)
        lm.prefill(a[:260])
        lm.prefill(b)  # pushes a's blocks down to the disk tier
        pf = lm.prefill(a, keep_logits=5, store_upto=0)
        assert pf.usage.cache_read_tokens == 256 and pf.usage.by_tier.get("disk", 0) > 0, pf.usage
        diff = (pf.logits - lm.full_logits(a, keep_logits=5)).abs().max().item()
        assert diff < TOL
