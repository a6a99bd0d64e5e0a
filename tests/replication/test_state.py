"""SparseClock, Update's wire form and RegionState's rules: causal per-key delivery, the
register rules for concurrent updates, duplicates, the pending bound and full sync."""

from __future__ import annotations

import pytest

from ctxcache.replication import state as state_mod
from ctxcache.replication.clock import SparseClock
from ctxcache.replication.ops import Update
from ctxcache.replication.state import KeyState, RegionState

K = bytes(range(8))  # a block key
PK = f"p:{K.hex()}"


def regions(*names: str) -> dict[str, RegionState]:
    return {n: RegionState(n) for n in names}


def send(dst: RegionState, *updates: Update) -> list[Update]:
    out: list[Update] = []
    for u in updates:
        out += dst.receive(u)
    return out


# --- SparseClock --------------------------------------------------------------------------------
def test_clock_bump_merge_and_order():
    a = SparseClock().bump("A")
    assert dict(a) == {"A": 1} and a.bump("A")["A"] == 2
    b = SparseClock().bump("B")
    assert a.compare(b) == "concurrent" and b.compare(a) == "concurrent"
    m = a.merge(b)
    assert dict(m) == {"A": 1, "B": 1}
    assert a.compare(m) == "before" and m.compare(a) == "after" and m.compare(m.merge(a)) == "equal"
    assert a < m and a <= m and not m <= a and not m < m
    assert SparseClock({"A": 0, "B": 2}) == SparseClock({"B": 2})  # zero entries are absent
    assert len(SparseClock({"A": 0})) == 0 and SparseClock().get("A") == 0
    with pytest.raises(ValueError):
        SparseClock({"A": -1})


def test_clock_encode_decode_round_trip_and_bad_bytes():
    c = SparseClock({"eu-west": 300, "us.east-1": 1, "ap": 2**40})
    raw = bytes(c.encode())
    back, pos = SparseClock.decode(raw)
    assert back == c and pos == len(raw) and hash(back) == hash(c)
    assert SparseClock.decode(bytes(SparseClock().encode()))[0] == SparseClock()
    for bad in (raw[:-1], raw[:3], b"\x01", b"\x80" * 12, b"\xff\xff\xff\x0f"):
        with pytest.raises(ValueError):
            SparseClock.decode(bad)


# --- Update -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "target", "value"),
    [("erase_tenant", "t:acme", None), ("ttl", "t:acme", 300.0), ("ttl", "t:acme", None),
     ("invalidate", PK, None), ("pin", PK, True), ("pin", PK, False), ("sem_feedback", "s:ab", False)],
)  # fmt: skip
def test_update_encode_decode(kind, target, value):
    u = Update("A", target, kind, value, SparseClock({"A": 3, "B": 1}), at=1234.5)
    back = Update.decode(u.encode())
    assert back == u and back.uid == "A/3/" + target


def test_update_decode_refuses_bad_bytes():
    raw = Update("A", "t:acme", "ttl", 5.0, SparseClock({"A": 1})).encode()
    for bad in (b"", raw[:-1], raw + b"\x00", bytes([9]) + raw[1:], raw[:1] + bytes([99]) + raw[2:]):
        with pytest.raises(ValueError):
            Update.decode(bad)
    no_origin = Update("A", "t:acme", "ttl", 5.0, SparseClock({"B": 1})).encode()  # clock lacks its origin
    with pytest.raises(ValueError):
        Update.decode(no_origin)
    wrong_key = Update("A", PK, "ttl", 5.0, SparseClock({"A": 1})).encode()  # a ttl on a prefix key
    with pytest.raises(ValueError):
        Update.decode(wrong_key)


# --- register rules -------------------------------------------------------------------------------
def concurrent_pair(kind: str, target: str, va: object, vb: object) -> dict[str, RegionState]:
    r = regions("A", "B")
    ua = r["A"].local(kind, target, va)
    ub = r["B"].local(kind, target, vb)
    send(r["A"], ub)
    send(r["B"], ua)
    return r


@pytest.mark.parametrize(("va", "vb", "want"), [(300, 60, 60.0), (None, 60, 60.0), (None, None, None), (5, 5, 5.0)])
def test_concurrent_ttls_shortest_wins_none_is_longest(va, vb, want):
    r = concurrent_pair("ttl", "acme", va, vb)
    for s in r.values():
        assert s.value("t:acme", "ttl") == want
        assert s.conflicts["ttl_shortest_wins"] == 1
    assert r["A"].digest() == r["B"].digest()


def test_a_later_ttl_replaces_concurrent_ones():
    r = concurrent_pair("ttl", "acme", 60, 300)
    u = r["A"].local("ttl", "acme", 900)  # after both: it alone stands
    send(r["B"], u)
    assert r["A"].value("t:acme", "ttl") == r["B"].value("t:acme", "ttl") == 900.0
    assert len(r["B"].keys["t:acme"].regs["ttl"]) == 1


@pytest.mark.parametrize(("va", "vb"), [(True, False), (False, True)])
def test_concurrent_pin_and_unpin_unpin_wins(va, vb):
    r = concurrent_pair("pin", K, va, vb)
    for s in r.values():
        assert s.value(PK, "pin") is False and s.conflicts["unpin_wins"] == 1


def test_concurrent_pins_stay_pinned_and_a_later_unpin_wins():
    r = concurrent_pair("pin", K, True, True)
    assert r["A"].value(PK, "pin") is True
    send(r["B"], r["A"].local("pin", K, False))
    assert r["B"].value(PK, "pin") is False


@pytest.mark.parametrize(("va", "vb"), [(True, False), (False, True)])
def test_concurrent_feedback_wrong_wins(va, vb):
    r = concurrent_pair("sem_feedback", "ab", va, vb)
    for s in r.values():
        assert s.value("s:ab", "fb") is False and s.conflicts["wrong_wins"] == 1


def test_erasure_dominates_a_concurrent_pin_but_not_a_later_one():
    r = regions("A", "B")
    pin = r["A"].local("pin", K, True)
    inv = r["B"].local("invalidate", K)
    send(r["A"], inv)
    send(r["B"], pin)
    for s in r.values():
        assert s.value(PK, "pin") is None  # void: not strictly after the erasure
        assert s.conflicts["erasure_dominates"] == 1
    again = r["A"].local("pin", K, True)  # after the erasure: it stands
    send(r["B"], again)
    assert r["A"].value(PK, "pin") is r["B"].value(PK, "pin") is True
    assert r["A"].digest() == r["B"].digest()


def test_concurrent_erasures_are_both_kept():
    r = concurrent_pair("erase_tenant", "acme", None, None)
    assert r["A"].value("t:acme", "erase") == ["A/1/t:acme", "B/1/t:acme"]
    assert r["A"].conflicts["concurrent_erasures"] == 1 and r["A"].digest() == r["B"].digest()


def test_an_erasure_does_not_void_a_ttl():
    r = regions("A", "B")
    send(r["B"], r["A"].local("ttl", "acme", 60))
    send(r["A"], r["B"].local("erase_tenant", "acme"))
    assert r["A"].value("t:acme", "ttl") == r["B"].value("t:acme", "ttl") == 60.0


# --- causal delivery --------------------------------------------------------------------------------
def test_an_update_is_held_until_its_dependency_arrives():
    r = regions("A", "B", "C")
    e = r["A"].local("erase_tenant", "acme")
    send(r["B"], e)
    t = r["B"].local("ttl", "acme", 60)  # depends on A's erasure
    assert send(r["C"], t) == []  # held: C has not seen the erasure
    assert r["C"].n_pending == 1 and r["C"].counters["held"] == 1 and r["C"].value("t:acme", "ttl") is None
    got = send(r["C"], e)
    assert got == [e, t]  # the erasure first, then what it released
    assert r["C"].n_pending == 0 and r["C"].pending == {}
    assert r["C"].digest() == r["B"].digest()


def test_a_gap_in_one_origins_updates_is_held():
    a, b = RegionState("A"), RegionState("B")
    u1, u2, u3 = a.local("ttl", "x", 1), a.local("ttl", "x", 2), a.local("ttl", "x", 3)
    assert send(b, u3, u2) == []
    assert send(b, u1) == [u1, u2, u3] and b.value("t:x", "ttl") == 3.0


def test_duplicates_are_dropped():
    a, b = RegionState("A"), RegionState("B")
    u = a.local("erase_tenant", "acme")
    assert send(b, u) == [u]
    assert send(b, u) == [] and b.counters["duplicates"] == 1
    u2 = a.local("ttl", "acme", 5)
    send(b, u2)
    assert send(b, u) == [] and b.counters["duplicates"] == 2 and b.counters["applied"] == 2
    a.local("ttl", "acme", 6)  # never sent: the next is held
    v4 = a.local("ttl", "acme", 7)
    send(b, v4, v4)  # held once, not twice
    assert b.n_pending == 1 and b.counters["held"] == 1


def test_pending_is_bounded_and_asks_for_a_full_sync(monkeypatch):
    monkeypatch.setattr(state_mod, "MAX_PENDING", 3)
    a, b = RegionState("A"), RegionState("B")
    ups = [a.local("ttl", "x", i + 1) for i in range(6)]
    send(b, *ups[1:])  # five held, the first never arrives
    assert b.n_pending == 3 and b.counters["pending_dropped"] == 2 and b.resync_due
    assert sum(len(h) for h in b.pending.values()) == 3


def test_merge_key_joins_a_peers_state_and_returns_what_is_new():
    a, b = RegionState("A"), RegionState("B")
    e = a.local("erase_tenant", "acme")
    t1 = a.local("ttl", "acme", 60)
    bt = b.local("ttl", "acme", 30)  # concurrent with both
    remote = KeyState.decode(a.keys["t:acme"].encode())
    new = b.merge_key("t:acme", remote)
    assert {u.uid for u in new} == {e.uid, t1.uid}
    assert b.value("t:acme", "ttl") == 30.0 and b.value("t:acme", "erase") == [e.uid]
    a.merge_key("t:acme", KeyState.decode(b.keys["t:acme"].encode()))
    assert a.digest() == b.digest()
    assert b.merge_key("t:acme", remote) == []  # nothing new the second time
    assert bt.uid in {u.uid for u in b.keys["t:acme"].regs["ttl"]}


def test_merge_key_releases_held_updates():
    a, b, c = RegionState("A"), RegionState("B"), RegionState("C")
    e = a.local("erase_tenant", "acme")
    send(b, e)
    t = b.local("ttl", "acme", 60)
    send(c, t)  # held: C lacks the erasure
    new = c.merge_key("t:acme", KeyState.decode(a.keys["t:acme"].encode()))
    assert [u.uid for u in new] == [e.uid, t.uid] and c.n_pending == 0
    assert c.digest() == b.digest()


def test_key_state_encode_decode_round_trip():
    r = concurrent_pair("ttl", "acme", 60, None)
    r["A"].local("erase_tenant", "acme")
    ks = r["A"].keys["t:acme"]
    back = KeyState.decode(ks.encode())
    assert back.view() == ks.view() and back.clock == ks.clock


def test_conflicts_are_counted_by_rule():
    r = concurrent_pair("ttl", "acme", 1, 2)
    x = concurrent_pair("pin", K, True, False)
    assert dict(r["A"].conflicts) == {"ttl_shortest_wins": 1}
    assert dict(x["A"].conflicts) == {"unpin_wins": 1}
    a = RegionState("A")
    a.local("ttl", "acme", 1)
    a.local("ttl", "acme", 2)  # sequential: no conflict
    assert not a.conflicts
