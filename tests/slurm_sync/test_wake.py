"""slurm_sync/wake.py: a pass can ask for the next one at a time of its choosing (the effect of its
Slurm writes, absence evidence to confirm), besides the watches' changes and the poll interval."""

from __future__ import annotations

import threading
import time

from slurm_sync.wake import Wakeup


def test_a_requested_pass_comes_when_due_not_at_the_interval() -> None:
    wakeup, stop = Wakeup(), threading.Event()
    wakeup.set_after(0.2)
    started = time.monotonic()
    assert wakeup.wait(60, stop), "the request did not end the wait: the interval (60 s) did"
    assert time.monotonic() - started >= 0.2, "woken before it was due"
    assert not wakeup.wait(0.01, stop), "a request is used once"


def test_the_earliest_request_wins() -> None:
    wakeup, stop = Wakeup(), threading.Event()
    wakeup.set_after(3600)
    wakeup.set_after(0.05)
    wakeup.set_after(1800)
    assert wakeup.wait(60, stop)


def test_a_request_wakes_a_wait_already_under_way() -> None:
    wakeup, stop = Wakeup(), threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(wakeup.wait(60, stop)))
    waiter.start()
    time.sleep(0.05)
    wakeup.set_after(0.05)
    waiter.join(30)
    assert result == [True]
