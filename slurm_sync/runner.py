"""Each cluster's passes, and the bridge's, on a worker thread of its own (docs/architecture.md §4.2).

Passes used to run one cluster after another, so a slurmrestd that hung (each read up to three tries of
the Slurm timeout) held up every other cluster's drains for as long. Now a hung peer holds up only its
own part, and readiness names the call it waits on (``InFlight``) or the pass that runs too long, while
the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for

from slurm_sync.inflight import HUNG_AFTER, InFlight

log = logging.getLogger(__name__)

Outcome = tuple[bool, bool, str]  # (ready, ok, why not ready)


STOPPED: Outcome = (False, False, "stopped")  # what a pass asked of a closed runner ends with (none ran)


class Runner:
    """The passes of one part (a cluster, the bridge), one at a time on a thread of its own. A pass asked
    for while one runs follows right after it, so a change seen meanwhile is not left for the next poll.

    Once closed, no pass starts (nor follows the running one); ``after``, the runner this one replaces
    (the same cluster's, its handle built anew), ends its pass before this one's first starts: two
    loops of one cluster never run side by side (two writes for one change)."""

    def __init__(
        self,
        name: str,
        run: Callable[[], Outcome],
        calls: InFlight,
        clock: Callable[[], float] = time.monotonic,
        after: Runner | None = None,
    ) -> None:
        """``calls``: the part's client's calls in flight (what a hung pass waits on)."""
        self.name = name
        self.calls = calls
        self._run = run
        self._clock = clock
        self._after = after
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pass {name}")
        self._lock = threading.Lock()
        self._future: Future[Outcome] | None = None
        self._running = False
        self._again = False
        self._closed = False
        self._started: float | None = None  # when the pass running now started (None: none runs)
        self.outcome: Outcome | None = None  # the last pass's (None before the first ends)
        self.passed = False  # a pass has ended ready

    def request(self) -> Future[Outcome]:
        """Start a pass, or, while one runs, have another follow it; the outcome of the last of them."""
        with self._lock:
            if self._closed:
                stopped: Future[Outcome] = Future()
                stopped.set_result(STOPPED)
                return stopped
            if self._running and self._future is not None:
                self._again = True
                return self._future
            self._running = True
            self._future = self._executor.submit(self._passes)
            return self._future

    @property
    def busy(self) -> bool:
        """A pass runs, or is about to (its writes may not have ended)."""
        with self._lock:
            future = self._future
        return future is not None and not future.done()

    def join(self) -> None:
        """Until the pass running now (and any asked to follow it) has ended."""
        with self._lock:
            future = self._future
        if future is not None:
            wait_for([future])

    def _passes(self) -> Outcome:
        if self._after is not None:
            self._after.join()
            self._after = None
        while True:
            with self._lock:
                if self._closed:  # closed while it waited for the runner it replaces: no pass
                    self._running, self._again = False, False
                    return STOPPED
            self._started = self._clock()
            try:
                outcome = self._run()
            except Exception:  # the part's pass catches its own failures; this is a bug in that
                log.exception("%s: pass crashed", self.name)
                outcome = (False, False, "pass crashed")
            self.outcome = outcome
            self.passed = self.passed or outcome[0]
            with self._lock:
                if not self._again or self._closed:
                    self._running, self._started, self._again = False, None, False
                    return outcome
                self._again = False

    def problem(self, overdue_after: float) -> str:
        """Why the part is not ready now ("" when it is): a call that hangs, a pass running longer than
        ``overdue_after`` seconds, the last pass's reason, or no pass done yet."""
        started = self._started
        running = self._clock() - started if started is not None else 0.0
        reasons = [
            self.calls.hung(),
            f"pass running for {running:.0f} s" if running > overdue_after else "",
            "first pass not done yet" if self.outcome is None else "" if self.outcome[0] else self.outcome[2],
        ]
        return "; ".join(r for r in reasons if r)

    def close(self, wait: bool, then: Callable[[], None] | None = None) -> None:
        """No pass starts any more (none follows the one running); ``then`` is called once the running one
        has ended (at once when none runs; on the worker's thread otherwise): e.g. closing the client it
        uses. ``wait``: return only then (a term's writes end before its Lease is released)."""
        with self._lock:
            self._closed = True
            future = self._future
        self._executor.shutdown(wait=False, cancel_futures=True)  # a pass not started yet never starts
        if then is not None:
            if future is None:
                then()
            else:  # at once when it is done (or was cancelled)
                future.add_done_callback(lambda _: then())
        if wait:
            self._executor.shutdown(wait=True)


def overdue_after(poll_interval: float) -> float:
    """A pass is overdue once it has run this long: the next one would have started by now."""
    return poll_interval + HUNG_AFTER
