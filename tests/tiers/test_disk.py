"""DiskTier: atomic writes, index rebuilt from headers, corruption detected, one owner per directory."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from ctxcache.errors import ConfigError
from ctxcache.tiers import BlockMeta, DiskTier

KEYS = [bytes([i]) * 16 for i in range(8)]


def meta(i: int) -> BlockMeta:
    return BlockMeta(tokens=np.full(4, i, "<i4").tobytes(), parent=b"\0" * 16, depth=i)


def files(tier: DiskTier) -> list:
    return sorted(tier.root.glob("blocks/*/*.blk"))


def test_put_get_verify_and_account(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    kv = [(np.ones((1, 4, 8), np.float32), np.zeros((1, 4, 8), np.float32))]
    size = t.put(KEYS[0], kv, meta(0))
    assert size == t.used_bytes == t.nbytes(KEYS[0]) == os.path.getsize(files(t)[0])
    assert t.size_of(kv) >= size - 64  # estimate uses the configured token bytes (1024 by default)
    got = t.get(KEYS[0])
    assert np.array_equal(got[0][0], kv[0][0]) and not got[0][0].flags.writeable
    # load_many verifies the stored token bytes against the request's
    assert t.load_many([KEYS[0]], [meta(0).tokens])[0].depth == 0
    assert t.load_many([KEYS[0], KEYS[1]], [meta(1).tokens, None]) == [None, None]
    assert t.might_contain_many(KEYS[:2]) == [True, False] and KEYS[0] in t and len(t) == 1
    assert t.delete(KEYS[0]) and t.used_bytes == 0 and not files(t)


def test_restart_rebuilds_the_index_from_headers(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    for i, k in enumerate(KEYS):
        t.put(k, f"block {i}".encode(), meta(i))
    used = t.used_bytes
    t.close()
    t2 = DiskTier(1 << 20, path=tmp_path)
    assert t2.recovered == 8 and t2.used_bytes == used and list(t2.keys()) == KEYS  # oldest first
    assert t2.get(KEYS[3]) == b"block 3"


def test_corrupt_and_truncated_blocks_are_deleted_counted_and_missed(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path, fsync=False)
    for i, k in enumerate(KEYS[:4]):
        t.put(k, bytes(range(200)), meta(i))
    f0, f1, f2, _ = files(t)
    with open(f0, "r+b") as f:  # flip a payload byte: caught on load
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 1]))
    assert t.get(KEYS[0]) is None and t.corrupt == 1 and not f0.exists() and KEYS[0] not in t
    t.close()
    os.truncate(f1, os.path.getsize(f1) - 10)  # truncated: caught by the start-up scan
    with open(f2, "r+b") as f:  # header damage: caught by the start-up scan
        f.seek(30)
        f.write(b"\xff")
    (tmp_path / "tmp" / "half-written.tmp").write_bytes(b"junk")  # a writer died before rename
    t2 = DiskTier(1 << 20, path=tmp_path)
    assert t2.corrupt == 2 and t2.recovered == 1 and len(files(t2)) == 1
    assert not list((tmp_path / "tmp").iterdir())


def test_a_directory_has_one_owner(tmp_path):
    t = DiskTier(1 << 20, path=tmp_path)
    with pytest.raises(ConfigError, match="in use by another process"):
        DiskTier(1 << 20, path=tmp_path)
    t.close()
    DiskTier(1 << 20, path=tmp_path).close()  # the lock went with close()


def test_bad_paths_and_missing_path_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs a 'path'"):
        DiskTier(1 << 20)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not usable"):
        DiskTier(1 << 20, path=tmp_path / "file" / "sub")


def test_readers_never_see_a_torn_block_while_a_writer_rewrites(tmp_path):
    t = DiskTier(1 << 30, path=tmp_path, fsync=False)
    blocks = [np.full(50_000, i, np.int32) for i in range(4)]
    t.put(KEYS[0], [blocks[0]], meta(0))
    stop, seen, errors = threading.Event(), set(), []

    def reader() -> None:
        while not stop.is_set():
            got = t.get(KEYS[0])
            if got is None:
                errors.append("miss")
            else:
                vals = np.unique(got[0])
                if len(vals) != 1:
                    errors.append(vals)
                seen.add(int(vals[0]))

    th = threading.Thread(target=reader)
    th.start()
    for n in range(200):
        t.put(KEYS[0], [blocks[n % 4]], meta(0))
    stop.set()
    th.join()
    assert not errors and t.corrupt == 0 and len(seen) > 1


def test_blocks_are_private_to_their_owner(tmp_path):
    """#12 item 9: blocks hold token ids (they decode back to the prompt): 0700 directories, 0600 files."""
    import stat

    root = tmp_path / "kv" / "model"
    t = DiskTier(1 << 20, path=root, fsync=False)
    for i, k in enumerate(KEYS[:3]):
        t.put(k, [np.full(16, i, np.float32)], meta(i))
    t.close()
    dirs = [root, *(p for p in root.rglob("*") if p.is_dir())]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) >= 4  # LOCK and the blocks
    assert {stat.S_IMODE(d.stat().st_mode) for d in dirs} == {0o700}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}


def test_a_directory_others_may_write_to_is_refused_and_a_readable_one_tightened(tmp_path):
    import stat

    shared = tmp_path / "shared"
    shared.mkdir()
    for mode in (0o777, 0o770, 0o722):
        shared.chmod(mode)
        with pytest.raises(ConfigError, match=r"not private: others may write to it.*chmod 700"):
            DiskTier(1 << 20, path=shared)
    shared.chmod(0o755)  # e.g. made by an older version: readable only, so made private
    DiskTier(1 << 20, path=shared).close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700
