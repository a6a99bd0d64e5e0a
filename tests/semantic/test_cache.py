"""SemanticCache with the real all-MiniLM-L6-v2 embedder: the issue's acceptance cases."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest

from ctxcache.errors import SemanticInputError
from ctxcache.semantic import DEFAULT_THRESHOLD, EntryStore, HashingEmbedder, SemanticCache, SemanticQuery


def q(text: str, **kw) -> SemanticQuery:
    kw.setdefault("tenant", "t1")
    kw.setdefault("model", "gemma")
    return SemanticQuery(text=text, **kw)


def put(cache: SemanticCache, text: str, answer: str = "A", **kw):
    r = cache.lookup(q(text, **kw))
    assert r.hit is None
    return cache.store(r.probe, {"text": answer})


def test_exact_repeat_hits(make_cache):
    c = make_cache()
    put(c, "How do I create a file in Python?", "use open(path, 'w')")
    r = c.lookup(q("How do I create a file in Python?"))
    assert r.hit is not None and r.similarity == 1.0 and r.hit.response == {"text": "use open(path, 'w')"}
    # Whitespace, case and the final question mark do not matter for an exact repeat.
    assert c.lookup(q("  how do I create a file in python ")).similarity == 1.0


@pytest.mark.parametrize(
    "cached, asked",
    [
        ("What is the capital of France?", "Which city is the capital of France?"),
        ("How many people live in Tokyo?", "What is the population of Tokyo?"),
        ("Is it safe for dogs to eat grapes?", "Can dogs safely eat grapes?"),
    ],
)
def test_paraphrase_above_threshold_hits(make_cache, cached, asked):
    c = make_cache()
    put(c, cached, "answer")
    r = c.lookup(q(asked))
    assert r.hit is not None and r.hit.text == cached
    assert DEFAULT_THRESHOLD <= r.similarity < 1.0


@pytest.mark.parametrize(
    "cached, asked",
    [
        ("Is Python statically typed?", "Is Python not statically typed?"),  # cosine 0.98: the verifier vetoes
        ("Why does my Rust code compile?", "Why doesn't my Rust code compile?"),
        ("How do I create a branch in git?", "How do I delete a branch in git?"),
        ("How to convert Celsius to Fahrenheit?", "How to convert Fahrenheit to Celsius?"),
        ("What is the capital of France?", "What is the capital of Spain?"),
    ],
)
def test_negation_antonym_and_changed_entity_miss(make_cache, cached, asked):
    c = make_cache()
    put(c, cached)
    r = c.lookup(q(asked))
    assert r.hit is None
    assert c.stats()["hits"] == 0


def test_negation_hits_without_the_verifier(make_cache):
    """The embedding alone would serve the negated question: the verifier is what stops it."""
    c = make_cache(verifier=lambda a, b: True)
    put(c, "Is Python statically typed?")
    assert c.lookup(q("Is Python not statically typed?")).hit is not None


@pytest.mark.parametrize(
    "other",
    [
        {"tenant": "t2"},
        {"model": "llama"},
        {"params": {"max_tokens": 64}},
        {"context": "You are a pirate."},
        {"features": {"locale": "fr-FR"}},
    ],
)
def test_other_tenant_model_params_context_never_hit(make_cache, other):
    c = make_cache()
    put(c, "What is the capital of France?")
    assert c.lookup(q("What is the capital of France?", **other)).hit is None
    assert c.lookup(q("Which city is the capital of France?", **other)).hit is None
    assert c.lookup(q("What is the capital of France?")).hit is not None


@pytest.mark.parametrize("kw, reason", [({"temperature": 0.7}, "temperature"), ({"tools": True}, "tools"),
                                        ({"bypass": True}, "request"), ({"temperature": float("nan")}, "temperature")])  # fmt: skip
def test_bypass_never_serves_never_stores(make_cache, kw, reason):
    c = make_cache()
    put(c, "What is the capital of France?")
    r = c.lookup(q("What is the capital of France?", **kw))
    assert r.hit is None and r.bypass == reason
    assert c.store(q("What is the speed of light?", **kw), {"text": "c"}) is None
    assert c.stats()["entries"] == 1


def test_restart_keeps_entries(make_cache, tmp_path):
    c = make_cache(tmp_path / "s")
    put(c, "What is the capital of France?", "Paris")
    put(c, "How many bones are in the adult human body?", "206", tenant="t2")
    c.close()
    again = make_cache(tmp_path / "s")
    assert again.recovered == 2
    r = again.lookup(q("Which city is the capital of France?"))
    assert r.hit is not None and r.hit.response == {"text": "Paris"}
    assert again.lookup(q("number of bones in an adult human skeleton?", tenant="t2")).hit is not None


def test_corrupted_entry_is_dropped_at_restart(make_cache, tmp_path):
    c = make_cache(tmp_path / "s")
    put(c, "What is the capital of France?", "Paris")
    put(c, "What is the capital of Japan?", "Tokyo")
    c.close()
    files = sorted((tmp_path / "s").rglob("*.blk"))
    data = bytearray(files[0].read_bytes())
    data[-5] ^= 0xFF  # flip a payload byte: the checksum catches it
    files[0].write_bytes(bytes(data))
    again = make_cache(tmp_path / "s")
    assert again.recovered == 1  # the damaged entry is a miss, never a wrong answer or a crash
    hits = [again.lookup(q(t)).hit for t in ("What is the capital of France?", "What is the capital of Japan?")]
    assert sum(h is not None for h in hits) == 1


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_text_is_a_clear_error(make_cache, text):
    with pytest.raises(SemanticInputError, match="non-empty"):
        make_cache().lookup(q(text))


def test_huge_text_is_a_clear_error(make_cache):
    c = make_cache(max_text_chars=10_000)
    with pytest.raises(SemanticInputError, match="limit is 10,000"):
        c.lookup(q("word " * 5000))
    with pytest.raises(SemanticInputError):
        c.store(q("word " * 5000), {"text": "x"})


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.9", True, None])
def test_bad_threshold_is_a_clear_error(make_cache, tmp_path, bad):
    if bad is not None:
        with pytest.raises(SemanticInputError, match="threshold"):
            make_cache(tmp_path / "ctor", threshold=bad)
    c = make_cache(tmp_path / "ok")
    with pytest.raises(SemanticInputError, match="threshold"):
        c.lookup(q("What is the capital of France?"), threshold=bad if bad is not None else "x")


def test_threshold_one_serves_exact_repeats_only(make_cache):
    c = make_cache(threshold=1.0)
    put(c, "What is the capital of France?")
    assert c.lookup(q("Which city is the capital of France?")).hit is None
    assert c.lookup(q("what is the capital of france")).hit is not None


def test_text_past_the_embedder_window_is_exact_only(make_cache):
    """Two long prompts that differ only after token 256 embed alike: serve them by exact text only."""
    c = make_cache()
    head = "Summarize the following report. " + "The quarterly numbers were stable across regions. " * 60
    put(c, head + "Conclusion: revenue went up.")
    assert c.lookup(q(head + "Conclusion: revenue went down.")).hit is None
    assert c.lookup(q(head + "Conclusion: revenue went up.")).hit is not None


def test_ttl_expires_with_the_injected_clock(make_cache, clock):
    c = make_cache(ttl=60)
    put(c, "What is the capital of France?")
    clock.t += 59
    assert c.lookup(q("What is the capital of France?")).hit is not None
    clock.t += 2
    assert c.lookup(q("What is the capital of France?")).hit is None
    assert c.stats()["expired"] == 1 and c.stats()["entries"] == 0


def test_expired_entries_are_not_recovered(make_cache, tmp_path, clock):
    c = make_cache(tmp_path / "s", ttl=60)
    put(c, "What is the capital of France?")
    c.close()
    clock.t += 120
    assert make_cache(tmp_path / "s", ttl=60).recovered == 0
    assert not list((tmp_path / "s").rglob("*.blk"))


def test_byte_capacity_evicts_by_policy(tmp_path, clock):
    c = SemanticCache(HashingEmbedder(), EntryStore.disk(tmp_path / "s", fsync=False), capacity=20_000, policy="lru",
                      clock=clock)  # fmt: skip
    try:
        first = c.store(q("question number zero"), {"text": "x" * 1000})
        for i in range(1, 30):
            c.lookup(q("question number zero"))  # keep the first one recently used
            c.store(q(f"another question {i}"), {"text": "x" * 1000})
        s = c.stats()
        assert s["bytes"] <= 20_000 and s["evicted"] > 0
        assert c.get(first.id) is not None  # LRU kept the entry in use
        assert len(list((tmp_path / "s").rglob("*.blk"))) == s["entries"]  # evicted entries left the disk
    finally:
        c.close()


def test_erase_entry_and_tenant(make_cache, tmp_path):
    c = make_cache(tmp_path / "s")
    e = put(c, "What is the capital of France?")
    put(c, "What is the capital of Japan?")
    put(c, "What is the capital of Peru?", tenant="t2")
    assert c.erase(e.id) and not c.erase(e.id)
    out = c.erase_tenant("t1")
    assert out == {"tenant": "t1", "erased": 1, "found_in_storage": 0, "pending_deletes": 0, "verified": True}
    assert [x.tenant for x in c.entries()] == ["t2"]
    assert len(list((tmp_path / "s").rglob("*.blk"))) == 1


def test_context_class_and_image_composite_keys(tmp_path, minilm, clock):
    """Images: a documented interface with a test double (no image model ships on PyPI with weights)."""

    class ByteImageEmbedder:
        name, dim = "bytes-double", 64

        def embed(self, images):
            from ctxcache.semantic import Embedding

            # Same bytes, same vector; different images land nearly orthogonal (random directions).
            seeds = [int.from_bytes(hashlib.blake2b(img, digest_size=8).digest(), "little") for img in images]
            out = np.stack([np.random.default_rng(s).standard_normal(64) for s in seeds]).astype(np.float32)
            out /= np.linalg.norm(out, axis=1, keepdims=True)
            return Embedding(out, [False] * len(images))

    c = SemanticCache(minilm, EntryStore.disk(tmp_path / "s", fsync=False), image_embedder=ByteImageEmbedder(),
                      clock=clock)  # fmt: skip
    try:
        cat, dog = bytes(range(0, 64)) * 8, bytes(range(32, 96)) * 8
        put(c, "What animal is in this picture?", "a cat", image=cat, features={"device": "phone"})
        assert c.lookup(q("Which animal is in this photo?", image=cat, features={"device": "phone"})).hit is not None
        assert c.lookup(q("Which animal is in this photo?", image=dog, features={"device": "phone"})).hit is None
        assert c.lookup(q("Which animal is in this photo?", image=cat, features={"device": "tv"})).hit is None
        assert c.lookup(q("What animal is in this picture?", features={"device": "phone"})).hit is None  # no image
    finally:
        c.close()
    with pytest.raises(SemanticInputError, match="image embedder"):
        SemanticCache(minilm, EntryStore.memory()).lookup(q("x", image=b"png"))


def test_per_entry_threshold_tightens_on_a_wrong_hit(make_cache):
    c = make_cache(threshold=0.8, error_bound=0.02)
    put(c, "What is the capital of France?")
    r = c.lookup(q("Which city is the capital of France?"))
    assert r.hit is not None
    new_t = c.feedback(r.hit.id, r.similarity, correct=False)
    assert new_t > r.similarity
    assert c.lookup(q("Which city is the capital of France?")).hit is None  # never again at that similarity
    assert c.lookup(q("What is the capital of France?")).hit is not None  # the exact repeat still hits


def test_concurrent_lookups_and_stores(make_cache):
    c = make_cache()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(5):
                text = f"What is the capital of country number {i * 10 + j}?"
                r = c.lookup(q(text))
                if r.hit is None:
                    c.store(r.probe, {"text": str(j)})
                assert c.lookup(q(text)).hit is not None
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and c.stats()["entries"] == 20


def test_embedder_loads_offline(minilm):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    e = minilm.embed(["a", "b", "a"])
    assert e.vectors.shape == (3, 384) and np.allclose(np.linalg.norm(e.vectors, axis=1), 1, atol=1e-5)
    assert np.allclose(e.vectors[0], e.vectors[2], atol=1e-5)
