"""What the bridge loop reads from Kubernetes, as small frozen views (the plan never sees raw JSON).

A pod or node we cannot read (no name, a non-numeric job id label) is still shown, with the
unreadable part blank: the plan decides what that means, the reader never drops objects.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slinky_common import names
from slurm_sync.bridge.devices import ContainerRequest, PodClaimStatus, container_requests, read_claim_status

JSON = Mapping[str, Any]
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class BridgePod:
    namespace: str
    name: str
    uid: str
    resource_version: str
    scheduler: str
    phase: str
    node_name: str  # "" while unbound
    deletion: datetime.datetime | None  # metadata.deletionTimestamp (the end of the grace period)
    job_id: int | None  # LABEL_SLURM_JOB_ID, None when absent or not a number
    job_body: str | None  # ANNOTATION_PLACEHOLDER_JOB
    group: str | None  # ANNOTATION_PLACEHOLDER_GROUP
    applied: str | None  # ANNOTATION_PLACEHOLDER_APPLIED: digest of the body the job was last given
    released: str | None  # ANNOTATION_JOB_RELEASED
    slurm_node: str | None  # ANNOTATION_SLURM_NODE
    finalizers: tuple[str, ...]
    pod_group: str | None = None  # spec.schedulingGroup.podGroupName: a built-in (Workload API) PodGroup
    submit_error: str | None = None  # ANNOTATION_SUBMIT_ERROR: why slurm_sync does not submit its job
    devices: tuple[ContainerRequest, ...] = ()  # DRA device classes its containers ask for (bridge/devices.py)
    claim_status: PodClaimStatus | None = None  # status.extendedResourceClaimStatus
    unscheduled: str | None = None  # the message of condition PodScheduled=False (the pending job's reason)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class BridgeNode:
    name: str
    slurm_name: str  # LABEL_SLURM_NODE_NAME, else the node's name
    resource_version: str
    taints: tuple[JSON, ...]
    desired_taint: str | None
    drain_reason: str | None
    registration: str | None  # ANNOTATION_EXTERNAL_NODE_INTENT (JSON)
    registered: str | None  # ANNOTATION_EXTERNAL_NODE_REGISTERED
    bridge: bool = False  # labelled a bridge worker or an external node: pods may be bound here


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _job_id(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def read_pod(obj: JSON) -> BridgePod:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return BridgePod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        scheduler=str(spec.get("schedulerName") or ""),
        phase=str((obj.get("status") or {}).get("phase") or ""),
        node_name=str(spec.get("nodeName") or ""),
        deletion=parse_time(meta.get("deletionTimestamp")),
        job_id=_job_id(labels.get(names.LABEL_SLURM_JOB_ID)),
        job_body=annotations.get(names.ANNOTATION_PLACEHOLDER_JOB),
        group=annotations.get(names.ANNOTATION_PLACEHOLDER_GROUP),
        applied=annotations.get(names.ANNOTATION_PLACEHOLDER_APPLIED),
        released=annotations.get(names.ANNOTATION_JOB_RELEASED),
        slurm_node=annotations.get(names.ANNOTATION_SLURM_NODE),
        finalizers=tuple(meta.get("finalizers") or ()),
        pod_group=((spec.get("schedulingGroup") or {}).get("podGroupName")) or None,
        submit_error=annotations.get(names.ANNOTATION_SUBMIT_ERROR),
        devices=container_requests(spec),
        claim_status=read_claim_status(obj.get("status") or {}),
        unscheduled=_unscheduled(obj.get("status") or {}),
    )


def _unscheduled(status: JSON) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == names.CONDITION_POD_SCHEDULED and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return None


def read_node(obj: JSON) -> BridgeNode:
    meta = obj.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    name = str(meta.get("name") or "")
    return BridgeNode(
        name=name,
        slurm_name=labels.get(names.LABEL_SLURM_NODE_NAME) or name,
        resource_version=str(meta.get("resourceVersion") or ""),
        taints=tuple((obj.get("spec") or {}).get("taints") or ()),
        desired_taint=annotations.get(names.ANNOTATION_DESIRED_TAINT),
        drain_reason=annotations.get(names.ANNOTATION_DRAIN_INTENT),
        registration=annotations.get(names.ANNOTATION_EXTERNAL_NODE_INTENT),
        registered=annotations.get(names.ANNOTATION_EXTERNAL_NODE_REGISTERED),
        bridge=names.LABEL_BRIDGE_WORKER in labels or names.LABEL_EXTERNAL_NODE in labels,
    )
