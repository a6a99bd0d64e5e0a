"""A valid block file under another key's name (copied or renamed there: by an operator, a backup
restore, a bug, or someone probing another tenant's blocks) must never be served for that key.

Its checksums are fine; only the key in its header gives it away. The disk tier promises such a
file is a miss, counted in ``corrupt`` and deleted, both when it is read at runtime and when the
index is rebuilt on start. Through ContextCache this is tenant isolation: two tenants' blocks of
the same tokens have the same token bytes, so the token check alone would serve one tenant's KV
to the other.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import BlockMeta, DiskTier

KEYS = [bytes([i]) * 16 for i in range(6)]
TOKENS = np.arange(4, dtype="<i4").tobytes()  # every block here has the same token bytes
BS = 4


def meta(depth: int = 0) -> BlockMeta:
    return BlockMeta(tokens=TOKENS, parent=b"\0" * 16, depth=depth)


def path_of(tier: DiskTier, key: bytes) -> Path:
    """Where the documented layout files a key: <root>/blocks/<first byte hex>/<key hex>.blk."""
    return tier.root / "blocks" / key[:1].hex() / f"{key.hex()}.blk"


def blk_files(root: Path) -> set[Path]:
    return set(root.glob("blocks/*/*.blk"))


def misfile(src: Path, dst: Path, rename: bool) -> None:
    dst.parent.mkdir(exist_ok=True)
    if rename:
        src.replace(dst)
    else:
        shutil.copyfile(src, dst)


def two_blocks(tmp_path: Path) -> DiskTier:
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    t.put(KEYS[0], b"block zero", meta())
    t.put(KEYS[1], b"block one", meta())
    return t


def test_a_copy_over_another_keys_file_is_a_counted_miss_and_is_removed(tmp_path):
    t = two_blocks(tmp_path)
    misfile(path_of(t, KEYS[0]), path_of(t, KEYS[1]), rename=False)
    assert t.get(KEYS[1]) is None  # never "block zero"
    assert t.corrupt == 1 and not path_of(t, KEYS[1]).exists() and KEYS[1] not in t
    assert t.get(KEYS[0]) == b"block zero" and t.corrupt == 1  # the original is untouched
    assert t.used_bytes == t.nbytes(KEYS[0])


def test_every_read_path_checks_the_key(tmp_path):
    """load_many with matching tokens (what the cache calls), get_blob (what demotion copies)."""
    t = two_blocks(tmp_path)
    t.put(KEYS[2], b"block two", meta())
    misfile(path_of(t, KEYS[0]), path_of(t, KEYS[1]), rename=False)
    misfile(path_of(t, KEYS[0]), path_of(t, KEYS[2]), rename=False)
    assert t.load_many([KEYS[1]], [TOKENS]) == [None]
    assert t.get_blob(KEYS[2]) is None
    assert t.corrupt == 2 and blk_files(tmp_path) == {path_of(t, KEYS[0])}


def test_a_file_renamed_to_a_key_the_tier_never_had_is_a_counted_miss(tmp_path):
    t = two_blocks(tmp_path)
    misfile(path_of(t, KEYS[0]), path_of(t, KEYS[4]), rename=True)
    assert t.load_many([KEYS[4]], [TOKENS]) == [None]
    assert t.corrupt == 1 and not path_of(t, KEYS[4]).exists()
    assert t.get(KEYS[0]) is None and t.corrupt == 1  # the moved-away original: a plain miss
    assert KEYS[0] not in t and t.used_bytes == t.nbytes(KEYS[1])


def test_on_restart_misfiled_copies_and_renames_are_counted_removed_and_not_indexed(tmp_path):
    t = two_blocks(tmp_path)
    t.put(KEYS[2], b"block two", meta())
    good = {k: path_of(t, k).stat().st_size for k in KEYS[:2]}
    misfile(path_of(t, KEYS[0]), path_of(t, KEYS[3]), rename=False)  # a copy under a new name
    misfile(path_of(t, KEYS[1]), path_of(t, KEYS[0]), rename=False)  # a copy over an existing block
    misfile(path_of(t, KEYS[2]), path_of(t, KEYS[5]), rename=True)  # a rename
    t.close()
    t2 = DiskTier(1 << 20, path=tmp_path)
    assert t2.corrupt == 3 and t2.recovered == 1
    assert list(t2.keys()) == [KEYS[1]] and t2.used_bytes == good[KEYS[1]]
    assert blk_files(tmp_path) == {path_of(t2, KEYS[1])}
    assert t2.get(KEYS[1]) == b"block one"
    assert [t2.get(k) for k in (KEYS[0], KEYS[2], KEYS[3], KEYS[5])] == [None] * 4
    assert t2.corrupt == 3


# --- through ContextCache: one tenant's block file under another tenant's key ---------------------


def disk_cache(path: Path) -> ContextCache:
    tier = {"kind": "disk", "path": str(path), "capacity": "1MiB", "fsync": False}
    return ContextCache.from_config({"block_size": BS, "tiers": [tier]})


def store_files(cache: ContextCache, root: Path, tokens: list[int], ns: str, payload: bytes) -> set[Path]:
    """Store one block for ``ns``; the block files it added."""
    before = blk_files(root)
    cache.store(tokens, [payload], ns)
    assert cache.flush(10)
    added = blk_files(root) - before
    assert len(added) == 1
    return added


def test_another_tenants_block_file_is_never_served_at_runtime(tmp_path):
    toks = [5, 6, 7, 8]
    with disk_cache(tmp_path) as cache:
        (fx,) = store_files(cache, tmp_path, toks, "x", b"tenant x's kv")
        (fy,) = store_files(cache, tmp_path, toks, "y", b"tenant y's kv")
        shutil.copyfile(fx, fy)
        with cache.lookup(toks, "y") as m:
            assert m.hit_tokens == 0 and m.payloads == []
        assert cache.stats()["corrupt"] == 1 and not fy.exists()
        with cache.lookup(toks, "x") as m:
            assert m.payloads == [b"tenant x's kv"]


def test_another_tenants_block_file_is_never_served_after_a_restart(tmp_path):
    toks = [5, 6, 7, 8]
    with disk_cache(tmp_path) as cache:
        (fx,) = store_files(cache, tmp_path, toks, "x", b"tenant x's kv")
        (fy,) = store_files(cache, tmp_path, toks, "y", b"tenant y's kv")
    shutil.copyfile(fx, fy)
    with disk_cache(tmp_path) as again:
        assert again.stats()["corrupt"] == 1 and not fy.exists()
        with again.lookup(toks, "y") as m:
            assert m.hit_tokens == 0
        with again.lookup(toks, "x") as m:
            assert m.payloads == [b"tenant x's kv"]
        assert again.stats()["corrupt"] == 1
