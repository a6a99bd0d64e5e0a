"""What the model process keeps in RAM besides the cache (issue #12, item 11; docs/serving.md "Memory")."""

from __future__ import annotations

from ctxcache.server.memtrace import tier_report
from ctxcache.tiers.memory import payload_nbytes

from .model_fixture import prompt_ids


def test_the_tokenizer_keeps_no_python_copy_of_its_vocabulary(lm):
    # transformers keeps Gemma's vocab (262k) and merges (515k) as Python objects: ~175 MiB of RSS.
    big = {k: len(v) for k, v in vars(lm.tokenizer).items() if isinstance(v, (dict, list)) and len(v) > 10_000}
    assert big == {}
    kept = {k: len(v) for k, v in lm.tokenizer.init_kwargs.items() if isinstance(v, (dict, list)) and len(v) > 10_000}
    assert kept == {}
    ids = lm.tokenizer("The harbour tide rose at dawn.").input_ids
    assert lm.tokenizer.decode(ids, skip_special_tokens=True) == "The harbour tide rose at dawn."
    assert lm.tokenizer.get_vocab()["<eos>"] == 1 and len(lm.tokenizer) >= 262_144


def test_a_stored_block_is_one_buffer_of_exactly_its_size(lm):
    lm.prefill(prompt_ids(lm, 3 * lm.block_size + 5))
    tier = lm.cache.tiers[0]
    assert len(tier) == 3
    for key in tier.keys():  # noqa: SIM118 - a Tier, not a dict: it has no __iter__
        payload = tier.get(key)
        tensors = [t for kv in payload for t in kv]
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        assert len(storages) == 1  # one allocation per block, not one per layer and K/V
        # ... which keeps nothing alive beyond what the tier charges for (no larger base tensor)
        assert tensors[0].untyped_storage().nbytes() == payload_nbytes(payload) == tier.nbytes(key)


def test_stored_blocks_are_copies_and_hold_what_the_tier_accounts(lm):
    pf = lm.prefill(prompt_ids(lm, 4 * lm.block_size))
    for layer in pf.kv.layers:  # decoding writes on: the stored blocks must not see it
        layer.keys.fill_(7.0)
    report = tier_report(lm.cache)[0]
    assert report["blocks"] == 4 and report["held"] == report["accounted"] > 0
    payload = lm.cache.tiers[0].get(next(lm.cache.tiers[0].keys()))
    assert not bool((payload[0][0] == 7.0).all())
