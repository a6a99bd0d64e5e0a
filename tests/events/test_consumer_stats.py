"""Consumer.stats() is read by the metrics thread while the consumer thread follows new workers
and forgets silent ones: it must never see a dict change size under it."""

from __future__ import annotations

import sys
import threading

from ctxcache.events.consumer import Consumer, _Followed


def test_stats_while_workers_come_and_go() -> None:
    c = Consumer(client=None, prefix="s:")
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:  # what the consumer thread does to ``followed`` as workers join and go silent
        i = 0
        while not stop.is_set():
            c.followed[f"w{i}"] = _Followed(f"w{i}", 0.0)
            c.followed.pop(f"w{i - 50}", None)
            i += 1

    def read() -> None:
        try:
            for _ in range(3000):
                c.stats()
        except BaseException as e:  # noqa: BLE001 -- the failure under test
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so a racing iteration shows up in a short run
    try:
        threads = [threading.Thread(target=churn), threading.Thread(target=read)]
        for t in threads:
            t.start()
        threads[1].join()
        stop.set()
        threads[0].join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
