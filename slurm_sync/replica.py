"""One slurm_sync replica under leader election (docs/architecture.md §8).

A standby runs no pass: it only campaigns for the Lease. Each term of leadership runs a ``Service``
built afresh, so a new leader rebuilds everything from Kubernetes and Slurm and nothing of an earlier
term (absence proofs, refused updates, event rate limits, Slurm listings) survives it. A term ends
when the fence closes (the Lease was not renewed in time) or on shutdown; its Service is closed
before the Lease is released, so the release never precedes a write.

Readiness: a healthy standby is Ready. A Deployment's RollingUpdate waits for each new pod to be
Ready before it removes an old one, and the new pods start as standbys while an old pod leads; an
unready standby would stall every rollout. The leader is Ready when its Service is (Slurm and
Kubernetes readable, writes taken); a standby that cannot read the Lease is not Ready, because it
could not take over. ``/readyz`` names the role either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slurm_sync.leader import LeaseElector
from slurm_sync.metrics import Metrics
from slurm_sync.service import Service

log = logging.getLogger(__name__)


class Replica:
    def __init__(self, elector: LeaseElector, build: Callable[[], Service], metrics: Metrics) -> None:
        self.elector = elector
        self._build = build
        self.metrics = metrics
        self._lock = threading.Lock()
        self._service: Service | None = None
        self._halt = threading.Event()  # ends the current term
        self._changed = threading.Event()  # leadership changed, or stop
        self._stopping = False
        metrics.leader.set(0)
        elector.on_change = self._on_change

    @property
    def identity(self) -> str:
        return self.elector.settings.identity

    def _on_change(self, leading: bool) -> None:
        """Called by the elector's thread on each change of leadership."""
        self.metrics.leader.set(1 if leading else 0)
        if not leading:
            self._halt.set()
        self._changed.set()

    def stop(self) -> None:
        """Shutdown: end the term (after its current pass) and the wait for one."""
        self._stopping = True
        self._halt.set()
        self._changed.set()

    def run(self) -> None:
        """Terms of leadership, one after another, until ``stop``; the elector runs in its own thread."""
        while not self._stopping:
            if self.elector.leading:
                self._term()
            else:
                self._changed.wait(self.elector.settings.retry_period)
                self._changed.clear()

    def _term(self) -> None:
        halt = self._halt = threading.Event()
        if self._stopping or not self.elector.leading:
            return  # stopped, or the lease lost before the term began (the check follows the new event)
        service = self._build()
        with self._lock:
            self._service = service
        log.info("%s leads: starting from what Kubernetes and Slurm say now (nothing carried over)", self.identity)
        try:
            service.run_forever(halt)
        finally:
            with self._lock:
                self._service = None
            service.close()
            log.info("%s: term over, writes stopped and in-memory state dropped", self.identity)

    def run_once(self, wait: float) -> int:
        """``--once`` under leader election: become the leader (waiting at most ``wait`` seconds, the
        time a dead holder's lease takes to expire), make one pass, release the Lease. 1 if a live
        leader holds it: one pass beside it would write twice."""
        stop = threading.Event()
        campaign = threading.Thread(target=self.elector.run, args=(stop,), name="lease", daemon=True)
        campaign.start()
        try:
            if not self._await_leading(wait):
                log.error(
                    "lease %s is held by %s: --once writes only as the leader; stop that replica or use its /readyz",
                    self.elector.settings.where,
                    self.elector.holder or "nobody (it cannot be read)",
                )
                return 1
            service = self._build()
            try:
                return 0 if service.run_pass() else 1
            finally:
                service.close()
        finally:
            stop.set()
            campaign.join()

    def _await_leading(self, wait: float) -> bool:
        deadline = time.monotonic() + wait
        while not self.elector.leading and (left := deadline - time.monotonic()) > 0:
            self._changed.wait(min(self.elector.settings.retry_period, left))
            self._changed.clear()
        return self.elector.leading

    def ready(self) -> tuple[bool, str]:
        """(ready, text) for /readyz, naming this replica's role."""
        with self._lock:
            service = self._service
        where = self.elector.settings.where
        if self.elector.leading and service is not None:
            ok, why = service.health.ready()
            return ok, f"leader {self.identity}: {why}"
        if self.elector.leading:
            return False, f"leader {self.identity}: starting its term"
        if self.elector.error:
            return False, f"standby {self.identity}: cannot read lease {where}: {self.elector.error}"
        if self.elector.record is None:
            return False, f"standby {self.identity}: lease {where} not read yet"
        return True, f"standby {self.identity}: {self.elector.holder or 'nobody'} leads (lease {where})"
