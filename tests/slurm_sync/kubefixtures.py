"""Builders for Kubernetes objects as the apiserver returns them, a stand-in Slurm for the
mock tests, and the official client pointed at a pytest-httpserver."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from kubernetes import client

from slinky_common import names, slurmstate
from slurm_sync.events import Events, ObjectRef
from slurm_sync.slurm.client import Snapshot
from slurm_sync.slurm.errors import SlurmError, SlurmNotFound
from slurm_sync.slurm.types import ControllerPing, Job, Listing, Node, NodeUpdate, PingResult, SlurmVersion, parse_node

NS = "slurm"
CLUSTER = "slurm"
NODESET = "gpu"
NODESET_UID = "uid-gpu"
NOW = "2026-01-02T03:04:05Z"


def api_client(url: str) -> client.ApiClient:
    config = client.Configuration()
    config.host = url.rstrip("/")
    return client.ApiClient(config)


def node(name: str, *state: str, reason: str = "", comment: str = "") -> Node:
    return parse_node({"name": name, "state": list(state), "reason": reason, "comment": comment})


def pod(
    name: str,
    hostname: str | None = None,
    *,
    node_name: str | None = "k1",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    states: tuple[str, ...] = (),
    reason: str = "",
    phase: str = "Running",
    terminating: bool = False,
) -> dict[str, Any]:
    """A NodeSet worker pod; ``states`` become the SlurmNodeState* conditions slurm_sync wrote."""
    conditions = [{"type": "Ready", "status": "True"}]
    conditions += [
        dict(c, lastTransitionTime="2026-01-01T00:00:00Z") for c in slurmstate.node_conditions(states, reason)
    ]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "resourceVersion": "7",
        "labels": {
            names.LABEL_CLUSTER: CLUSTER,
            names.LABEL_NODESET_POD_HOSTNAME: hostname or name,
            **(labels or {}),
        },
        "annotations": dict(annotations or {}),
        "ownerReferences": [
            {
                "apiVersion": names.API_VERSION,
                "kind": "NodeSet",
                "name": NODESET,
                "uid": NODESET_UID,
                "controller": True,
            }
        ],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    spec: dict[str, Any] = {"hostname": hostname or name}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


SETTLED_DELETION = '{"pendingJobs":[],"cancelAt":null,"nodesLeft":[],"error":""}'


def nodeset(
    intents: Mapping[str, str] | None = None,
    protect: bool | None = None,
    observed: str | None = None,
    deleting: bool = False,
    when_deleted: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NODESET, "namespace": NS, "uid": NODESET_UID}
    if observed is not None:
        meta["annotations"] = {names.ANNOTATION_SLURM_OBSERVED: observed}
    if deleting:  # with the report of a deletion that waits for nothing (tests of other steps write no report)
        meta.setdefault("annotations", {})[names.ANNOTATION_DELETION_OBSERVED] = SETTLED_DELETION
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
        meta["finalizers"] = ["metacontroller.io/compositecontroller-slurm-operator-nodeset"]
    spec: dict[str, Any] = {"controllerRef": {"name": CLUSTER}}
    if protect is not None:
        spec["workloadDisruptionProtection"] = protect
    if when_deleted is not None:
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": when_deleted}
    status = {names.STATUS_DRAINING_PODS: [{"name": k, "reason": v} for k, v in sorted((intents or {}).items())]}
    return {"apiVersion": names.API_VERSION, "kind": "NodeSet", "metadata": meta, "spec": spec, "status": status}


def kube_node(name: str = "k1", unschedulable: bool = False, cordon_reason: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if cordon_reason is not None:
        meta["annotations"] = {names.ANNOTATION_NODE_CORDON_REASON: cordon_reason}
    return {"metadata": meta, "spec": {"unschedulable": True} if unschedulable else {}}


def controller_pod(name: str, active: bool = False) -> dict[str, Any]:
    labels = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: CLUSTER}
    if active:
        labels[names.LABEL_ACTIVE_CONTROLLER] = "true"
    return {"metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": {"hostname": name}}


def running_job(job_id: int, nodes: str) -> Job:
    """A job Slurm lists as running on ``nodes`` (a hostlist)."""
    return Job(job_id, "j", frozenset({"RUNNING"}), "", nodes, "", "debug", "u", 1, "", "", frozenset(), None, None)


def ping(*hosts: tuple[str, bool, bool]) -> PingResult:
    """(hostname, responding, primary) per slurmctld."""
    return PingResult(tuple(ControllerPing(h, r, p, 100, None) for h, r, p in hosts), SlurmVersion(26, 5, 5))


@dataclass
class FakeSlurm:
    """The three calls the loop makes, with a switch to fail them."""

    nodes: dict[str, Node]
    pings: PingResult = field(default_factory=lambda: ping(("slurm-controller-0", True, True)))
    fail: SlurmError | None = None
    updates: list[tuple[str, NodeUpdate]] = field(default_factory=list)
    unlisted: set[str] = field(default_factory=set)  # nodes Slurm has that the listing leaves out (a wrong answer)
    previous: dict[str, Node] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)  # per-node questions (GET node/<name>)
    jobs: dict[int, Job] = field(default_factory=dict)
    job_writes: list[tuple[str, Any, dict]] = field(default_factory=list)  # updates, cancels and node deletes
    relists: int = 0  # how often the loop asked for the whole node listing next
    # slurmctld (26.05) does not date a node deletion: until a whole listing, "unchanged since" keeps the node
    undated_deletes: bool = False
    ghosts: dict[str, Node] = field(default_factory=dict)  # deleted, still in the incremental view

    def node_watch(self) -> FakeSlurm:
        return self

    def poll(
        self, guard: Callable[[Mapping[str, Node], Mapping[str, Node]], None] | None = None
    ) -> Snapshot[str, Node]:
        """The listing (``nodes`` minus ``unlisted``);
        ``guard`` sees it against the previous one, as ListingWatch does."""
        if self.fail:
            raise self.fail
        listed = {k: v for k, v in self.nodes.items() if k not in self.unlisted} | self.ghosts
        if guard is not None:
            guard(self.previous, listed)
        self.previous = listed
        return Snapshot(MappingProxyType(listed), 1, frozenset(), frozenset())

    def relist(self) -> None:
        self.relists += 1
        self.ghosts.clear()

    def get_node(self, name: str) -> Node:
        """Slurm's per-object answer: from ``nodes`` (the listing may omit a node, Slurm still has it)."""
        self.asked.append(name)
        if self.fail:
            raise self.fail
        if name not in self.nodes:
            raise SlurmNotFound(f"GET node/{name}: Slurm has no node {name!r}", status=200)
        return self.nodes[name]

    def ping(self) -> PingResult:
        if self.fail:
            raise self.fail
        return self.pings

    def update_node(self, name: str, update: NodeUpdate) -> None:
        self.updates.append((name, update))

    def list_jobs(self) -> Listing[Job]:
        if self.fail:
            raise self.fail
        return Listing(tuple(self.jobs.values()), 1, unchanged=False)

    def job_watch(self) -> JobWatch:
        return JobWatch(self)

    def get_job(self, job_id: int) -> Job:
        if self.fail:
            raise self.fail
        if job_id not in self.jobs:
            raise SlurmNotFound(f"GET job/{job_id}: HTTP 404", status=404)
        return self.jobs[job_id]

    def update_job(self, job_id: int, changes: Mapping[str, Any]) -> None:
        self.job_writes.append(("update", job_id, dict(changes)))
        self.jobs[job_id] = replace(
            self.jobs[job_id], **{k: v for k, v in changes.items() if k in ("comment", "partition")}
        )

    def cancel_job(self, job_id: int) -> None:
        self.job_writes.append(("cancel", job_id, {}))
        self.jobs[job_id] = replace(self.jobs[job_id], state=frozenset({"CANCELLED"}))

    def delete_node(self, name: str) -> None:
        self.job_writes.append(("delete node", name, {}))
        if name not in self.nodes:
            raise SlurmNotFound(f"DELETE node/{name}: HTTP 422: Invalid node name specified", status=422)
        if self.undated_deletes:
            self.ghosts[name] = self.nodes[name]
        del self.nodes[name]


@dataclass
class JobWatch:
    """The job watch over ``FakeSlurm.list_jobs`` (a complete listing every poll)."""

    slurm: FakeSlurm

    def poll(self) -> Snapshot[int, Job]:
        jobs = {j.job_id: j for j in self.slurm.list_jobs().items}
        return Snapshot(MappingProxyType(jobs), 1, frozenset(jobs), frozenset())

    def relist(self) -> None:
        """Every poll lists whole already."""


class RecordedEvents(Events):
    """Events kept in memory, for tests that pin every apiserver request; the rate limit still applies.
    Tests against tests/slurm_sync/fakekube.py see the real POSTs instead."""

    def __init__(self) -> None:
        super().__init__(None)
        self.posted: list[tuple[str, str, str, str]] = []  # (type, reason, regarding kind, regarding name)

    def _post(self, ref: ObjectRef, kind: str, reason: str, note: str, action: str) -> bool:
        self.posted.append((kind, reason, ref.kind, ref.name))
        return True


NODESET_OWNER = {
    "apiVersion": names.API_VERSION,
    "kind": "NodeSet",
    "name": NODESET,
    "uid": NODESET_UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


def pvc(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    """A NodeSet PVC as Metacontroller created it (selector labels, the given ownerReferences)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "resourceVersion": "3",
        "labels": {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: NODESET},
    }
    if owners:
        meta["ownerReferences"] = [dict(o) for o in owners]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"]},
    }


def refused_url() -> str:
    """An apiserver URL nothing listens on: the client raises urllib3's MaxRetryError, not an ApiException."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def controller_cr(name: str, ns: str = NS, ref: str = "jwtKeyRef") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {ref: {"name": f"{name}-jwt", "key": "jwt.key"}}}


def restapi_cr(name: str, ctrl: str, created: str, ns: str = NS) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"controllerRef": {"name": ctrl}},
    }
