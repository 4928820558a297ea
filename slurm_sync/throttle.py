"""The Kubernetes client's request rate: client-go's QPS and burst (``--kube-api-qps``, ``--kube-api-burst``).

A token bucket: ``burst`` requests may go at once, then ``qps`` a second. Every request through the client
takes a token before it is sent (slurm_sync/kube.py, before its deadline starts), so a storm of writes
(issue 28: every node's state changing at once) reaches the API server at a rate its operator chose, not at
whatever the write workers manage. A request that must wait reserves its turn and sleeps until then:
waiters are served in the order they came, and none is lost or reordered by a wake-up race. The Lease has a
client of its own and never waits here (slurm_sync/leader.py): a write storm cannot cost the leadership.

Why by hand: client-go's ``flowcontrol.NewTokenBucketRateLimiter`` has no Python counterpart in the
libraries slurm_sync uses; this is its reservation rule (golang.org/x/time/rate's ``Reserve``), in a few
lines, tested in tests/slurm_sync/test_throttle.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_QPS = 100.0  # kube-scheduler's client is 50/100; slurm_sync writes two patches per changed pod
DEFAULT_BURST = 200


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` a second; ``qps <= 0``: no limit."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 with a QPS limit, not {burst}")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock()
        self.waited = 0.0  # seconds requests spent waiting for a token, in all (a metric and tests read it)

    def delay(self) -> float:
        """Take a token now: the seconds to wait before the request it admits may go (0: at once)."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited += wait
            return wait

    def wait(self) -> None:
        """Take a token, sleeping until its turn."""
        wait = self.delay()
        if wait > 0:
            self._sleep(wait)
