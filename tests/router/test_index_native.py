"""The router index's prefix query in C (ctxcache._native.table_prefix) against the numpy path.

Both run on the same index after every step of a random run of events (stores in every tier,
removals, clears, shared stores, a new epoch, growth), on queries that hit, miss part way, hit
dead slots, and on keys built to collide: one low word for several keys, one home slot for runs
longer than the numpy path's 16-slot window, the all-zero low word. Skipped where the module is
not built; the switch itself is tested either way.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxcache.events import BlockRemoved, BlockStored, EventBatch, TierCleared, WorkerStarted
from ctxcache.router.index import BlockIndex

SRC = Path(__file__).resolve().parents[2] / "src"
TIERS = WorkerStarted(tiers=("memory", "disk", "redis"), shared=("redis",), stores=("r1",))
OTHER_STORE = WorkerStarted(tiers=("memory", "valkey"), shared=("valkey",), stores=("r2",))


def _native():
    mod = pytest.importorskip("ctxcache._native", reason="ctxcache._native is not built (tools/build_native.py)")
    if not hasattr(mod, "table_prefix"):
        pytest.skip("ctxcache._native predates table_prefix: rebuild it (tools/build_native.py)")
    return mod


def both(idx: BlockIndex, ks: list[bytes], native) -> tuple[object, object]:
    """The same query through C, then numpy; each answer as plain data (workers and tiers)."""
    answers = []
    for mod in (native, None):
        idx._native = mod
        m = idx.prefix(ks)
        answers.append((m.n_keys, m.workers, {w: m.tiers(w).tolist() for w in m.workers}))
    return answers[0], answers[1]


def colliding_keys(rng: random.Random, cap: int) -> list[bytes]:
    """Keys whose low words share one home slot (runs past the 16-slot window), several with the
    same low word, and low words of 0 (read as 1)."""
    home = rng.randrange(cap)
    out = [struct.pack("<QQ", home + i * cap, rng.getrandbits(64)) for i in range(40)]
    lo = rng.getrandbits(64)
    out += [struct.pack("<QQ", lo, h) for h in range(1, 6)]
    out += [struct.pack("<QQ", 0, rng.getrandbits(64)) for _ in range(3)] + [struct.pack("<QQ", 1, 7)]
    return out


def test_the_c_query_gives_the_numpy_answers_through_a_random_run():
    native = _native()
    rng = random.Random(27)
    idx = BlockIndex(capacity=1024)
    pool = [os.urandom(16) for _ in range(6000)] + colliding_keys(rng, 1024) + colliding_keys(rng, 1536)
    rng.shuffle(pool)
    chains = [pool[i : i + 64] for i in range(0, len(pool), 64)]
    seqs = dict.fromkeys("abcde", 0)
    epochs = dict.fromkeys("abcde", "100-a")

    def send(w: str, *evs: object) -> None:
        seqs[w] += 1
        idx.apply(EventBatch(w, epochs[w], seqs[w], tuple(evs)))  # type: ignore[arg-type]

    for w in "abcd":
        send(w, TIERS)
    send("e", OTHER_STORE)
    compared = 0
    for step in range(300):
        w = rng.choice("abcde")
        chain = rng.choice(chains)
        cut = rng.randint(1, len(chain))
        tier = rng.choice(["memory", "disk", "redis"] if w != "e" else ["memory", "valkey"])
        r = rng.random()
        if r < 0.6:
            send(w, BlockStored(tuple(chain[:cut]), tier))
        elif r < 0.85:
            send(w, BlockRemoved(tuple(rng.sample(chain, rng.randint(1, 8))), tier))
        elif r < 0.9:
            send(w, TierCleared(tier, reason=rng.choice(["lost", "cleared"])))
        elif r < 0.93:  # a restart: everything it held is forgotten
            epochs[w] = f"{200 + step:x}-b"
            seqs[w] = 0
            send(w, TIERS if w != "e" else OTHER_STORE)
        for _ in range(4):
            q = list(rng.choice(chains))
            if rng.random() < 0.3:  # a miss part way through
                q[rng.randrange(len(q))] = os.urandom(16)
            q = q[: rng.randint(0, len(q))]
            c, py = both(idx, q, native)
            assert c == py, (step, len(q))
            compared += 1
    assert idx.stats()["capacity"] > 1024  # the run grew the table: queries after rehashes too
    assert compared == 1200


def test_long_requests_and_every_worker_bit():
    native = _native()
    idx = BlockIndex()
    ks = [os.urandom(16) for _ in range(3000)]  # past the C code's stack buffer (512 keys)
    for i in range(64):
        idx.apply(EventBatch(f"w{i}", "1-a", 1, (TIERS, BlockStored(tuple(ks[: 40 * i + 1]), "memory"))))
    idx.apply(EventBatch("w63", "1-a", 2, (BlockStored(tuple(ks), "disk"),)))
    c, py = both(idx, ks, native)
    assert c == py
    assert c[1]["w63"].blocks == 3000 and c[1]["w5"].blocks == 201  # type: ignore[index]


def test_bad_keys_are_refused_by_both_paths():
    native = _native()
    idx = BlockIndex()
    idx.apply(EventBatch("a", "1-a", 1, (TIERS,)))
    for mod in (native, None):
        idx._native = mod
        with pytest.raises(ValueError, match="16 bytes"):
            idx.prefix([b"short", os.urandom(16)])


def test_table_prefix_checks_its_arrays():
    native = _native()
    idx = BlockIndex()
    t = idx._t
    key = os.urandom(16)
    with pytest.raises(ValueError, match="mismatched"):
        native.table_prefix(key, t.lo, t.hi[:-8], t.fast, t.slow, t.shared, idx._readers, t.capacity, b"")
    with pytest.raises(ValueError, match="below 64"):
        native.table_prefix(key, t.lo, t.hi, t.fast, t.slow, t.shared, idx._readers, t.capacity, b"\x40")
    counts, fm, sm = native.table_prefix(key, t.lo, t.hi, t.fast, t.slow, t.shared, idx._readers, t.capacity, b"\x00")
    assert counts == [(0, 0, 0)] and fm == sm == b""
    assert np.array_equal(np.frombuffer(fm, np.uint64), np.empty(0, np.uint64))


def test_no_native_selects_the_numpy_path():
    code = "from ctxcache.router.index import BlockIndex; print(BlockIndex()._native is None)"
    env = {**os.environ, "CTXCACHE_NO_NATIVE": "1", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_c_inserts_place_every_key_where_the_numpy_lookup_finds_it():
    """table_upsert (inserts and rehashes) against KeyTable's numpy inserts: batches with
    duplicates, keys already present, colliding runs longer than the window, growth by load and
    by a run reaching the padding's end; each key found by the numpy lookup at the slot C gave."""
    from ctxcache.router.table import KeyTable, key_arrays

    native, rng = _native(), random.Random(30)
    c, ref = KeyTable(1024, native), KeyTable(1024)
    seen: list[bytes] = []
    for step in range(60):
        fresh = [rng.randbytes(16) for _ in range(rng.choice((1, 7, 300, 2000)))]
        if step % 5 == 0:
            fresh += colliding_keys(rng, c.capacity)
        batch = fresh + rng.sample(seen, min(len(seen), 50)) + fresh[: len(fresh) // 3]  # repeats
        rng.shuffle(batch)
        lo, hi = key_arrays(batch)
        got, want = c.insert(lo, hi), ref.insert(lo, hi)
        seen += fresh
        assert np.array_equal(c.find(lo, hi), got), step  # the numpy lookup finds C's placements
        assert (got >= 0).all() and (want >= 0).all()
        assert len(set(got.tolist())) == len(set(batch)) and c.used == ref.used == len(set(seen))
        c.fast[got], ref.fast[want] = 1, 1
    all_lo, all_hi = key_arrays(list(dict.fromkeys(seen)))
    assert (c.find(all_lo, all_hi) >= 0).all() and c.capacity == ref.capacity
    c.fast[c.find(all_lo[:100], all_hi[:100])] = 0  # dead slots: gone at the next rehash
    c.rehash(0)
    assert c.used == len(all_lo) - 100 and (c.find(all_lo[100:], all_hi[100:]) >= 0).all()


def test_table_upsert_checks_its_arrays():
    native = _native()
    z = np.zeros(2048 + 512, np.uint64)
    keys, out = np.ones(3, np.uint64), np.empty(3, np.int64)
    with pytest.raises(ValueError, match="mismatched"):
        native.table_upsert(keys, keys[:2], z, z, 2048, 2048 + 400, 1000, 0, out)
    with pytest.raises(ValueError, match="mismatched"):
        native.table_upsert(keys, keys, z, z, 4096, 2048, 1000, 0, out)
    with pytest.raises((TypeError, BufferError, ValueError)):
        native.table_upsert(keys, keys, z[:10].tobytes(), z, 8, 4, 1000, 0, out)  # read-only table
