"""What the steps a pass runs after its pod plans (maintenance reservations, NodeSet deletion, leftover node
records) need of that pass: the clients, the pass's clock, its accounting of writes and errors, and the
absence evidence each step keeps between passes. The operator loop builds one per pass and the steps never
see the loop, so they depend on this narrow surface alone (docs/architecture.md §4)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_sync.events import Events, ObjectRef
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.passes import Tally as PassTally
from slurm_sync.proof import AbsenceProof
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmError


@dataclass
class Tally(PassTally):
    """An operator pass's tally: the shared one (slurm_sync/passes.py) and the wrong-cluster verdict."""

    wrong_cluster: str | None = None  # the slurmrestd reached serves another Slurm cluster: why
    watch_power: bool = False  # an elastic NodeSet waits on Slurm's power decisions (slurm_sync/operator/power.py)
    power_due: float | None = None  # seconds until a node Slurm powers up may be listed up (power.py)

    def merge(self, other: Tally) -> None:
        """Add what ``other`` (one write worker's tally of the same pass) holds."""
        self.errors += other.errors
        self.unready += other.unready
        self.kube_writes += other.kube_writes
        self.slurm_writes += other.slurm_writes
        self.wrong_cluster = self.wrong_cluster or other.wrong_cluster
        self.watch_power = self.watch_power or other.watch_power
        if other.power_due is not None:
            self.power_due = other.power_due if self.power_due is None else min(self.power_due, other.power_due)


KubeWrite = Callable[[Tally, str, Callable[[], object]], None]
SlurmErrorReport = Callable[[Tally, str, SlurmError], None]
# (node, pod namespace, pod name, tally, why, about, Event reason) -> Slurm's error, or ""
DeleteRecord = Callable[[str, str, str, Tally, str, ObjectRef, str], str]


@dataclass(frozen=True)
class StepContext:
    """One pass's surface for its later steps."""

    cluster: str  # the cluster's name in logs and metrics
    now: str  # the pass's clock, RFC 3339
    slurm: SlurmClient
    kube: Kube
    events: Events
    metrics: Metrics
    kube_write: KubeWrite  # one Kubernetes write, counted or reported in the tally
    slurm_error: SlurmErrorReport  # a failed Slurm call: an error of the pass and a reason to be unready
    delete_record: DeleteRecord  # delete a Slurm node record once its pod is confirmed gone
    delete_slurm_node: Callable[[str], None]  # delete a node record (NotFound counts as deleted)
    job_absence: AbsenceProof[int]  # jobs of deleting NodeSets that Slurm says are gone
    reservation_absence: AbsenceProof[str]  # maintenance reservations Slurm says are gone
    leftover_pods: AbsenceProof[str]  # pods of leftover node records the apiserver says are gone
    nothing_left: AbsenceProof[str]  # deleting NodeSets whose partition showed no pending job and no record
    deletion_grace: float  # seconds a deleting NodeSet's pending jobs may wait before they are ended
    wall_clock: Callable[[], float] = time.time  # now, read after Slurm answered (an elastic node's upSince)
