"""KeyFilter paths mutation testing found unchecked: keys added while a rebuild scans (the scan may
have passed them already) are in the new filter, and what its stats report."""

from __future__ import annotations

from collections.abc import Iterator

from ctxcache.tiers.bloom import KeyFilter

OLD = [b"old-%04d" % i for i in range(100)]
NEW = [b"new-%04d" % i for i in range(100)]


def test_keys_added_during_a_rebuild_are_in_the_new_filter():
    f = KeyFilter(10_000, 1e-7)

    def scan() -> Iterator[bytes]:
        for i, k in enumerate(OLD):
            if i == 50:  # another thread stores blocks while the scan runs (past where they land)
                for n in NEW:
                    f.add(n)
            yield k

    assert f.rebuild(scan()) == len(OLD)
    assert f.might_contain_many(OLD + NEW) == [True] * (len(OLD) + len(NEW))
    assert f.count == len(OLD) + len(NEW)
    f.add(b"after")  # and adds after the rebuild are no longer kept for the next one
    assert f.rebuild(iter(OLD)) == len(OLD) and f.count == len(OLD)


def test_stats_count_checks_and_skips():
    f = KeyFilter(1000, 1e-7)  # a false "maybe" for b"b": about 1 run in 10 million
    assert f.stats() == {"keys": 0, "capacity": f.capacity, "checks": 0, "skipped": 0, "ready": False}
    assert f.might_contain_many([b"a", b"b"]) == [True, True]  # not built yet: every key a "maybe"
    f.rebuild(iter([b"a"]))
    assert f.might_contain_many([b"a", b"b"]) == [True, False]
    assert f.stats() == {"keys": 1, "capacity": f.capacity, "checks": 4, "skipped": 1, "ready": True}


def test_saturated_means_more_keys_than_the_current_filter_holds_within_its_rate():
    keys = [b"key-%05d" % i for i in range(5000)]
    f = KeyFilter(2000)
    assert 2000 <= f.capacity < 2030
    for k in keys[: f.capacity]:
        f.add(k)
    assert not f.saturated
    f.add(keys[f.capacity])
    assert f.saturated
    n = f.count
    f.rebuild(iter(keys[:n]), hint=n)  # sized for twice the hint: room to grow
    assert not f.saturated and f.count == n and f.capacity >= 2 * n
    for k in keys[n : f.capacity]:
        f.add(k)
    assert not f.saturated  # as many keys as it holds within its rate
    f.add(keys[f.capacity])
    assert f.saturated
    f.rebuild(iter(keys))  # the scan finds more than the filter was sized for:
    assert f.saturated  # still over, until the next rebuild, which is sized for what it found
    f.rebuild(iter(keys))
    assert not f.saturated
