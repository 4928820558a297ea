"""Calls to a peer (slurmrestd, the API server) in flight, so that readiness names a call that hangs
long before its own timeout ends it (docs/architecture.md §4.2)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HUNG_AFTER = 4.0  # seconds a call may wait for its answer before readiness reports it


class InFlight:
    """The calls of one client that have not been answered yet, each with when it was sent."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()

    @contextmanager
    def call(self, what: str) -> Iterator[None]:
        """Record ``what`` (e.g. "GET /api/v1/nodes") as in flight for the duration of the block."""
        key = next(self._ids)
        with self._lock:
            self._calls[key] = (what, self._clock())
        try:
            yield
        finally:
            with self._lock:
                del self._calls[key]

    def hung(self, after: float = HUNG_AFTER) -> str:
        """The oldest call waiting longer than ``after`` seconds, as "<call> in flight for <n> s", or ""."""
        with self._lock:
            oldest = min(self._calls.values(), key=lambda call: call[1], default=None)
        if oldest is None or (waited := self._clock() - oldest[1]) <= after:
            return ""
        return f"{oldest[0]} in flight for {waited:.0f} s"
