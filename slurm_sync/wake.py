"""Pass after pass, each started by a change the watches saw or, at the latest, by the poll interval
(docs/architecture.md §4.8).

A change on the Kubernetes side (a pod cordoned, a drain intent, a cordoned Node, a new bridge pod)
starts a pass within a fraction of a second instead of at the next poll. Slurm is still read afresh
by every pass (its conditional listing costs one small answer while nothing changed), so a pass never
acts on an old picture of Slurm. A burst of changes becomes one pass: a pass waits ``SETTLE``
seconds after the first change, and passes are at least ``MIN_GAP`` apart.

A pass can also ask for the next one at a given time (``set_after``): after it wrote to Slurm (the next
pass sees the effect and takes the step that follows, a drained node's record deleted, say) and when
absence evidence becomes confirmable. Without it each step of a drain waited for the poll interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

SETTLE = 0.05  # seconds a pass waits after the first change for the rest of a burst
MIN_GAP = 0.25  # seconds between the start of two passes woken by changes
STOP_CHECK = 0.2  # how often a wait looks at the stop event


class Wakeup:
    """A latch the watches set and the loop waits on (with a timeout: the poll interval)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending = False
        self._due: float | None = None  # when a pass asked for the next one (monotonic)

    def set(self) -> None:
        with self._cond:
            self._pending = True
            self._cond.notify_all()

    def set_after(self, delay: float) -> None:
        """Set the latch ``delay`` seconds from now (the earliest such request wins)."""
        due = time.monotonic() + max(delay, 0.0)
        with self._cond:
            if self._due is None or due < self._due:
                self._due = due
                self._cond.notify_all()

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Until set or due (True), ``timeout`` passes or ``stop`` is set (False); clears the latch."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._pending and not stop.is_set():
                now = time.monotonic()
                if self._due is not None and now >= self._due:
                    self._pending, self._due = True, None
                    break
                left = min(deadline, self._due if self._due is not None else deadline) - now
                if left <= 0:
                    break
                self._cond.wait(min(left, STOP_CHECK))
            woken, self._pending = self._pending, False
            return woken


def run_passes(run_pass: Callable[[], object], wakeup: Wakeup, interval: float, stop: threading.Event) -> None:
    """``run_pass`` until ``stop``: again after ``interval`` seconds, or sooner when ``wakeup`` is set."""
    while not stop.is_set():
        started = time.monotonic()
        run_pass()
        if wakeup.wait(interval, stop) and not stop.is_set():
            stop.wait(max(SETTLE, MIN_GAP - (time.monotonic() - started)))
            wakeup.wait(0, stop)  # the rest of the burst is part of this pass
