"""Leader election over a ``coordination.k8s.io/v1`` Lease, and the fence that keeps every write of
slurm_sync inside the leader's term (docs/architecture.md §8).

The rule, client-go's made explicit:

* A replica may write only until ``renew_deadline`` after the *start* of its last successful renew
  (monotonic clock). That start precedes the API server's commit, which precedes any other replica
  seeing the renewed record.
* Another replica takes the Lease over only when the record it read has stayed unchanged for the
  record's ``leaseDurationSeconds``, counted from when *it* first saw that record, and only by an
  update carrying that record's resourceVersion (a renew in between turns it into a 409).
* So a leader that cannot renew (paused, partitioned, its API server slow) has stopped writing at least
  ``lease_duration - renew_deadline`` (5 s by default) before anyone else may start. Each write is sent
  with a timeout that ends when the fence closes; the margin covers a request already on the wire.
* A renewal is one request: the update carries the resourceVersion this replica last wrote, so it
  succeeds only if nobody wrote since, exactly what a read before it would have shown. The Lease is
  read only when no record is known, while another's record has not stood for its duration (a
  standby watching it), and once after an update the API server refused (409, or NotFound: deleted).

Why not the client library's ``kubernetes.leaderelection`` (it ships a Lease lock): its loop measures the
renew deadline with the wall clock from the start of each retry series rather than from the last
successful renew, takes the renew time only after the answer (too late for a fence), sends requests
without a timeout (a hung renew stalls the loop while the leader's work goes on), reads the Lease through
the global default configuration instead of our client, never releases the Lease, and runs the leader's
work in a thread it cannot stop. None of that gives "a replica that cannot renew stops writing before
another can take over", so this module holds a small elector whose fence is exactly that guarantee.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from slurm_sync.kube import describe_error, is_not_found
from slurm_sync.kubeapi import CoordinationV1

log = logging.getLogger(__name__)

# Kubernetes' usual defaults (kube-controller-manager, kube-scheduler, controller-runtime).
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
JITTER_FACTOR = 1.2  # client-go's: the renew deadline must leave room for more than one retry
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CONFLICT = 409
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Clock = Callable[[], float]
JSON = dict[str, Any]


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def problem(self) -> str | None:
        """Why these timings cannot give the fencing guarantee, or None."""
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            return "--lease-duration, --renew-deadline and --retry-period must be positive"
        if self.lease_duration <= self.renew_deadline:
            return (
                f"--lease-duration ({self.lease_duration:g}) must exceed --renew-deadline ({self.renew_deadline:g}): "
                "the difference is the margin between a leader's last write and a takeover"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            return (
                f"--renew-deadline ({self.renew_deadline:g}) must exceed {JITTER_FACTOR:g} x --retry-period "
                f"({self.retry_period:g}), so that a leader gets more than one try to renew"
            )
        return None


def new_identity(pod_name: str | None = None) -> str:
    """The pod's name (HOSTNAME in a pod) and a random suffix: a restarted container is a new
    candidate, never mistaken for the holder its previous life left in the Lease."""
    base = pod_name or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{base}_{secrets.token_hex(4)}"


def own_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The pod's namespace from its service account, None outside a pod."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


class Fence:
    """Open while this replica may write: until ``renew_deadline`` after the start of the attempt
    that last renewed (or acquired) the Lease."""

    def __init__(self, renew_deadline: float, clock: Clock = time.monotonic) -> None:
        self.renew_deadline = renew_deadline
        self._clock = clock
        self._lock = threading.Lock()
        self._until = -math.inf

    def extend(self, attempt_started: float) -> None:
        with self._lock:
            self._until = max(self._until, attempt_started + self.renew_deadline)

    def close(self) -> None:
        with self._lock:
            self._until = -math.inf

    def remaining(self) -> float:
        """Seconds a write may still take (0 or less: none may be sent)."""
        with self._lock:
            return self._until - self._clock()

    @property
    def open(self) -> bool:
        return self.remaining() > 0


class NotLeader(ApiException):
    """A Kubernetes write refused before it was sent: this replica does not hold the Lease. It has no
    HTTP status because nothing was sent."""

    def __init__(self, method: str, url: str) -> None:
        path = url.split("://", 1)[-1].partition("/")[2]
        super().__init__(reason=f"not sent ({method} /{path}): this replica does not hold the lease")


def clamp_timeout(given: Any, left: float) -> float | tuple[float, float]:
    """The client's ``_request_timeout`` (none, seconds, or (connect, read)) ending by ``left``."""
    if isinstance(given, tuple):
        return min(float(given[0]), left), min(float(given[1]), left)
    return min(float(given), left) if given else left


class _FencedRest:
    """The client's REST layer behind the fence: every method that writes is refused while the fence
    is closed, and otherwise sent with a timeout that ends when it closes."""

    def __init__(self, inner: Any, fence: Fence) -> None:
        self._inner = inner
        self._fence = fence

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        if method.upper() not in _READ_METHODS:
            left = self._fence.remaining()
            if left <= 0:
                raise NotLeader(method.upper(), url)
            _request_timeout = clamp_timeout(_request_timeout, left)
        return self._inner.request(
            method, url, headers=headers, body=body, post_params=post_params, _request_timeout=_request_timeout
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def fence_writes(api: ApiClient, fence: Fence) -> None:
    """Put ``fence`` in front of every write made through ``api`` (pods, bindings, nodes, our CRs,
    PVCs, Events: whichever wrapper makes it). The Lease itself goes through another client."""
    api.rest_client = _FencedRest(api.rest_client, fence)  # type: ignore[assignment]  # same request()


@dataclass(frozen=True)
class LeaseRecord:
    """The election record a Lease holds, and the resourceVersion it was read at."""

    holder: str
    duration: float
    transitions: int
    acquire_time: str
    renew_time: str
    resource_version: str


def read_record(lease: Mapping[str, Any]) -> LeaseRecord:
    """Read defensively: a field that cannot be read counts as absent (an empty holder can be taken)."""
    spec, meta = _mapping(lease.get("spec")), _mapping(lease.get("metadata"))
    duration, transitions, holder = (
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
        spec.get("holderIdentity"),
    )
    return LeaseRecord(
        holder=holder if isinstance(holder, str) else "",
        duration=float(duration) if isinstance(duration, int) and duration > 0 else 0.0,
        transitions=transitions if isinstance(transitions, int) else 0,
        acquire_time=str(spec.get("acquireTime") or ""),
        renew_time=str(spec.get("renewTime") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _body(response: Any) -> JSON:
    """The JSON object of an undecoded answer (``_preload_content=False``; the client's types say a model)."""
    return orjson.loads(response.data)


def micro_time(now: datetime.datetime | None = None) -> str:
    """A MicroTime as the API server writes it (RFC 3339, microseconds, UTC)."""
    return (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Acquires, renews and releases one Lease; ``fence`` tells whether this replica may write.

    ``run`` tries every ``retry_period`` (a leader also wakes when its fence is about to close) and
    reports each change of leadership to ``on_change``; ``attempt`` is one try.
    """

    def __init__(
        self,
        api: ApiClient,
        settings: LeaseSettings,
        fence: Fence,
        clock: Clock = time.monotonic,
    ) -> None:
        self.coordination = CoordinationV1(api)
        self.settings = settings
        self.fence = fence
        self.on_change: Callable[[bool], None] = lambda leading: None
        self.error = ""  # why the last attempt could not read or write the Lease; "" after one that could
        self._clock = clock
        self._lease: JSON | None = None  # the Lease as last read or written
        self._record: LeaseRecord | None = None
        self._seen_at = 0.0  # when this replica first saw _record (monotonic)
        self._reported = False

    @property
    def leading(self) -> bool:
        return self.fence.open

    @property
    def record(self) -> LeaseRecord | None:
        """The record as last read or written (None before the first read)."""
        return self._record

    @property
    def holder(self) -> str:
        """The holder in the last record seen ("" when none, or before the first read)."""
        return self._record.holder if self._record else ""

    # --- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Campaign and renew until ``stop``; then close the fence and release the Lease. The caller
        stops its writers before setting ``stop``, so the release cannot precede a write."""
        lapsed = f"not renewed within {self.settings.renew_deadline:g}s"
        while not stop.is_set():
            self._report(lapsed)  # a fence that closed since the last attempt
            self.attempt()
            self._report(lapsed)
            stop.wait(self._pause())
        self.fence.close()
        self._report("shutting down")
        self.release()

    def _pause(self) -> float:
        """Until the next attempt: the retry period, or less when the fence closes sooner."""
        left = self.fence.remaining()
        return min(self.settings.retry_period, left) if left > 0 else self.settings.retry_period

    def _report(self, why_not: str) -> None:
        """Tell ``on_change`` when leadership changed; ``why_not`` says why it would have ended."""
        leading = self.leading
        if leading == self._reported:
            return
        self._reported = leading
        if leading:
            log.info("lease %s: %s leads; writing", self.settings.where, self.settings.identity)
        else:
            log.log(
                logging.INFO if why_not == "shutting down" else logging.WARNING,
                "lease %s: %s no longer leads (%s); writes stopped",
                self.settings.where,
                self.settings.identity,
                why_not,
            )
        self.on_change(leading)

    # --- one attempt ------------------------------------------------------------------------

    def attempt(self) -> bool:
        """One try to acquire or renew; True when this replica holds the Lease now."""
        started = self._clock()
        try:
            won = self._try()
        except ApiException as exc:
            won = False
            if exc.status == CONFLICT:  # someone else wrote the Lease since we read it: not a fault
                self.error = ""
                log.info("lease %s: changed while we tried to take it (HTTP 409)", self.settings.where)
            else:
                self._failed(exc)
        except Exception as exc:  # the API server unreachable, a timeout: nothing learned this time
            won = False
            self._failed(exc)
        if won:
            self.fence.extend(started)
        return won

    def _failed(self, exc: Exception) -> None:
        error = describe_error(exc)
        level = logging.WARNING if self.leading or error != self.error else logging.DEBUG
        log.log(level, "lease %s: cannot read or write it: %s", self.settings.where, error)
        self.error = error

    def _try(self) -> bool:
        """One request when the record last read or written may be written now (ours to renew, free, or
        another's that stood unchanged for its duration): an update carrying its resourceVersion, which the
        API server refuses (409) if anyone wrote the Lease since. Read first only when that record is
        unknown, held by another and not yet expired, or after such a refusal (or a NotFound: deleted)."""
        lease, record = self._lease, self._record
        if lease is not None and record is not None and not self._held_by_another(record, self._clock()):
            try:
                return self._write(lease, record)
            except ApiException as exc:
                if exc.status != CONFLICT and not is_not_found(exc):
                    raise
                log.info("lease %s: written or deleted since (HTTP %s); reading it", self.settings.where, exc.status)
        return self._read_and_decide()

    def _read_and_decide(self) -> bool:
        """Read the Lease, then create it, write it or leave it to its holder."""
        lease = self._get()
        if lease is None:
            self._remember(self._create(), self._clock())
            self.error = ""
            log.info("lease %s: created, held by %s", self.settings.where, self.settings.identity)
            return True
        self.error = ""
        record = read_record(lease)
        if record != self._record:
            if record.holder != self.holder and record.holder != self.settings.identity:
                log.info("lease %s: held by %s", self.settings.where, record.holder or "nobody")
            self._record, self._seen_at = record, self._clock()
        self._lease = lease
        if self._held_by_another(record, self._clock()):
            return False
        return self._write(lease, record)

    def _write(self, lease: JSON, record: LeaseRecord) -> bool:
        """Renew our record or take over one that may be taken, from ``lease`` as last seen."""
        taking_over = record.holder != self.settings.identity
        self._remember(self._replace(lease, self._spec(record)), self._clock())
        self.error = ""
        if taking_over:
            log.info(
                "lease %s: acquired by %s (was held by %s)",
                self.settings.where,
                self.settings.identity,
                record.holder or "nobody",
            )
        return True

    def _held_by_another(self, record: LeaseRecord, now: float) -> bool:
        """Another holder whose record has not stood unchanged, since we first saw it, for its duration."""
        if not record.holder or record.holder == self.settings.identity:
            return False
        return now < self._seen_at + (record.duration or self.settings.lease_duration)

    def _spec(self, record: LeaseRecord | None) -> JSON:
        now = micro_time()
        ours = record is not None and record.holder == self.settings.identity
        transitions = 0 if record is None else record.transitions + (0 if ours else 1)
        return {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": math.ceil(self.settings.lease_duration),
            "acquireTime": record.acquire_time if ours and record and record.acquire_time else now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _remember(self, lease: JSON, now: float) -> None:
        self._lease, self._record, self._seen_at = lease, read_record(lease), now

    # --- release ----------------------------------------------------------------------------

    def release(self) -> bool:
        """Give the Lease up (graceful shutdown, after our writers stopped), so that a standby takes
        over at its next try instead of after the lease duration. Only a record that is still ours, at
        the resourceVersion we wrote, is touched."""
        if self._lease is None or self._record is None or self._record.holder != self.settings.identity:
            return False
        spec = {
            "leaseDurationSeconds": 1,
            "acquireTime": micro_time(),
            "renewTime": micro_time(),
            "leaseTransitions": self._record.transitions,
        }
        try:
            self._remember(self._replace(self._lease, spec), self._clock())
        except Exception as exc:  # taken meanwhile (409) or unreachable: it expires on its own
            log.warning("lease %s: not released: %s", self.settings.where, describe_error(exc))
            return False
        log.info("lease %s: released by %s", self.settings.where, self.settings.identity)
        return True

    # --- the API ----------------------------------------------------------------------------

    def _timeout(self) -> float:
        """Each Lease request may take half the renew deadline (at least a retry period), so that a
        hung request leaves the leader time for another try before its fence closes."""
        return max(self.settings.retry_period, self.settings.renew_deadline / 2)

    def _get(self) -> JSON | None:
        """The Lease, or None on the API server's own NotFound."""
        try:
            response = self.coordination.read_namespaced_lease(
                self.settings.name, self.settings.namespace, _preload_content=False, _request_timeout=self._timeout()
            )
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise
        return _body(response)

    def _create(self) -> JSON:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
            "spec": self._spec(None),
        }
        response = self.coordination.create_namespaced_lease(
            self.settings.namespace,
            body,
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return _body(response)

    def _replace(self, lease: JSON, spec: JSON) -> JSON:
        """An update carrying the resourceVersion we read: a 409 if anyone wrote the Lease since."""
        response = self.coordination.replace_namespaced_lease(
            self.settings.name,
            self.settings.namespace,
            {**lease, "spec": spec},
            _preload_content=False,
            _request_timeout=self._timeout(),
        )
        return _body(response)
