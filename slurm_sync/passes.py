"""The frame both loops' passes share (the operator's, per cluster, and the bridge's): the clock, the tally a
pass fills while it runs, its outcome and the readiness it implies, and how a Kubernetes write, a failed
Slurm call or an unreadable Kubernetes view is accounted for. What differs between the loops (the operator's
wrong-cluster verdict, the bridge's user mistakes) stays in each loop."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from slurm_sync.kube import describe_error
from slurm_sync.metrics import Metrics
from slurm_sync.slurm.errors import SlurmError

log = logging.getLogger(__name__)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(moment: datetime.datetime) -> str:
    """A moment as Kubernetes writes times (UTC, seconds, ``Z``)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Seconds after a pass that wrote to Slurm until the next looks at the effect: Slurm is polled, not watched, and
# what a write causes (a drained node, a placeholder job started) is usually there within a second.
FOLLOW_UP = 1.0


@dataclass
class Tally:
    """What one pass did and what went wrong (mutable: filled in while executing)."""

    errors: list[str] = field(default_factory=list)
    kube_writes: int = 0
    slurm_writes: int = 0
    unready: list[str] = field(default_factory=list)  # reasons for readiness (failed reads and writes)


@dataclass(frozen=True)
class Outcome:
    """What a pass reports: its counts, its errors and whether the process may say it is ready."""

    slurm_ok: bool  # Slurm answered
    errors: tuple[str, ...]  # everything that went wrong, refused writes included
    kube_writes: int
    slurm_writes: int
    read_ok: bool = True  # the Kubernetes objects (and, for the bridge, Slurm's) could be read
    unready: tuple[str, ...] = ()  # why not ready: failed reads, failing writes (never a user's mistake)
    follow_up: float | None = None  # seconds until the loop expects work: a write's effect, evidence to confirm

    @property
    def ok(self) -> bool:
        return self.slurm_ok and not self.errors

    @property
    def ready(self) -> bool:
        """Readiness: Slurm and Kubernetes could be read, and took every write we sent."""
        return self.slurm_ok and self.read_ok and not self.unready


def kube_write(tally: Tally, who: str, what: str, write: Callable[[], object]) -> bool:
    """One Kubernetes write: counted, or its refusal an error of the pass (the next pass retries it)."""
    try:
        write()
    except ApiException as exc:
        tally.errors.append(f"{what}: HTTP {exc.status}")
        log.error("%s: %s: HTTP %s %s", who, what, exc.status, exc.reason)
        return False
    tally.kube_writes += 1
    return True


def slurm_failed(tally: Tally, metrics: Metrics, label: str, what: str, exc: SlurmError) -> None:
    """A failed Slurm call, read or write: counted, an error of the pass and a reason to be unready (Slurm's
    state is unknown, or Slurm did not take our write). The caller logs it at the level it deserves."""
    metrics.count_slurm_error(label, exc)
    tally.errors.append(f"{what}: {exc}")
    tally.unready.append(f"{what}: {exc}")


def kube_read_failed(tally: Tally, who: str, exc: Exception) -> None:
    """The pass could not read its Kubernetes objects (an ApiException, the apiserver unreachable, a cache not
    synced): it writes nothing, and says why it is not ready."""
    tally.errors.append(f"reading Kubernetes objects: {describe_error(exc)}")
    tally.unready.append(f"reading Kubernetes objects: {describe_error(exc)}")
    log.error("%s: reading Kubernetes objects failed: %s", who, describe_error(exc))
