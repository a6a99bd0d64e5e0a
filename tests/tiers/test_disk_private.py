"""A disk tier creates its directory private whatever the process umask: a group-writable umask
(002, usual with per-user groups) must not make the tier refuse the directory it just made."""

from __future__ import annotations

import os
import stat

import numpy as np

from ctxcache.tiers import BlockMeta, DiskTier

KEY = b"k" * 16
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_a_new_directory_is_private_under_a_group_writable_umask(tmp_path):
    root = tmp_path / "cache"
    old = os.umask(0o002)
    try:
        t = DiskTier(1 << 20, path=root)
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    t.put(KEY, [np.ones(4, np.float32)], BlockMeta(TOKENS))
    assert float(t.get(KEY)[0][0]) == 1.0
    t.close()
