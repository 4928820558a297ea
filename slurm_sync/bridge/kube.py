"""The Kubernetes writes of the bridge loop, each one request with the smallest exact body.

Pod and node patches that rewrite a list (finalizers, taints) carry the resourceVersion they were
computed from, so the apiserver refuses them (409) if someone changed the object meanwhile; the
next pass recomputes. Deletes carry the pod's uid, so a pod re-created under the same name is safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from slinky_common import names
from slurm_sync.bridge.view import BridgeNode, BridgePod
from slurm_sync.kube import Kube, WriteCounter, released
from slurm_sync.kubeapi import ResourceV1

JSON = dict[str, Any]


def label_body(pod: BridgePod, job_id: int, applied: str) -> JSON:
    finalizers = list(pod.finalizers) + (
        [] if names.FINALIZER_SCHEDULER in pod.finalizers else [names.FINALIZER_SCHEDULER]
    )
    meta: JSON = {
        "resourceVersion": pod.resource_version,
        "labels": {names.LABEL_SLURM_JOB_ID: str(job_id)},
        "finalizers": finalizers,
    }
    annotations: dict[str, str | None] = {}
    if applied:
        annotations[names.ANNOTATION_PLACEHOLDER_APPLIED] = applied
    if pod.submit_error is not None:
        annotations[names.ANNOTATION_SUBMIT_ERROR] = None  # submitted (or adopted) now
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta}


def submit_error_body(why: str) -> JSON:
    return {"metadata": {"annotations": {names.ANNOTATION_SUBMIT_ERROR: why}}}


def unscheduled_body(message: str, since: str | None) -> JSON:
    """The pods/status strategic merge patch of condition PodScheduled=False (merged by type, as kube-scheduler
    writes it); ``since``: its lastTransitionTime when the condition turns False now, None to keep the one it has."""
    condition: JSON = {"type": names.CONDITION_POD_SCHEDULED, "status": "False",
                       "reason": names.REASON_UNSCHEDULABLE, "message": message}  # fmt: skip
    if since is not None:
        condition["lastTransitionTime"] = since
    return {"status": {"conditions": [condition]}}


def pod_group_scheduled_body(pod_group: JSON, now: str) -> JSON | None:
    """The status merge patch that sets PodGroupScheduled=True (reason Scheduled), or None when it
    is already so. A merge patch replaces the whole list, so the other conditions are carried and
    the resourceVersion makes the apiserver refuse it (409) if the PodGroup changed meanwhile."""
    conditions = list((pod_group.get("status") or {}).get("conditions") or [])
    ours = next((c for c in conditions if c.get("type") == names.CONDITION_POD_GROUP_SCHEDULED), None)
    if ours is not None and ours.get("status") == "True" and ours.get("reason") == "Scheduled":
        return None
    condition = {
        "type": names.CONDITION_POD_GROUP_SCHEDULED,
        "status": "True",
        "reason": "Scheduled",
        "message": "every pod of the group is bound to a node Slurm allocated",
        "lastTransitionTime": now,
    }
    others = [c for c in conditions if c.get("type") != names.CONDITION_POD_GROUP_SCHEDULED]
    return {
        "metadata": {"resourceVersion": (pod_group.get("metadata") or {}).get("resourceVersion")},
        "status": {"conditions": [*others, condition]},
    }


def release_body(pod: BridgePod, job_id: int) -> JSON:
    """Our finalizer goes by a strategic-merge delete directive: metadata.finalizers merges as a set, so
    sending the shorter list would remove nothing."""
    meta: JSON = {"resourceVersion": pod.resource_version, "annotations": {names.ANNOTATION_JOB_RELEASED: str(job_id)}}
    if names.FINALIZER_SCHEDULER in pod.finalizers:
        meta["$deleteFromPrimitiveList/finalizers"] = [names.FINALIZER_SCHEDULER]
    return {"metadata": meta}


def binding_body(pod: BridgePod, node: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def taint_body(node: BridgeNode, taints: Sequence[Mapping[str, Any]]) -> JSON:
    return {"metadata": {"resourceVersion": node.resource_version}, "spec": {"taints": [dict(t) for t in taints]}}


class BridgeKube:
    def __init__(self, kube: Kube, count_write: WriteCounter = lambda kind, verb: None) -> None:
        self.kube = kube
        self.core = kube.core
        self.resource = ResourceV1(kube.core.api_client)
        self.count = count_write

    def list_pods(self, namespace: str) -> list[JSON]:
        return self.kube.list_pods(namespace, {names.LABEL_BRIDGE_MANAGED: "true"})

    def list_nodes(self) -> list[JSON]:
        return self.kube.list_nodes()

    def patch_pod(self, pod: BridgePod, body: JSON) -> None:
        self.kube.patch_pod(pod.namespace, pod.name, body)

    def bind(self, pod: BridgePod, node: str) -> None:
        released(
            self.core.create_namespaced_pod_binding(
                pod.name,
                pod.namespace,
                binding_body(pod, node),
                _preload_content=False,
            )
        )
        self.count("pod_binding", "create")

    def delete_pod(self, pod: BridgePod) -> None:
        options = {"preconditions": {"uid": pod.uid}}
        released(self.core.delete_namespaced_pod(pod.name, pod.namespace, body=options, _preload_content=False))
        self.count("pod", "delete")

    def read_pod_group(self, namespace: str, name: str) -> JSON | None:
        """A built-in PodGroup (hooks.bridge.workload.POD_GROUP), None when it does not exist."""
        try:
            response = self.kube.custom.get_namespaced_custom_object(
                "scheduling.k8s.io", "v1alpha2", namespace, "podgroups", name, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return orjson.loads(response.data)

    def patch_pod_group_status(self, namespace: str, name: str, body: JSON) -> None:
        """JSON merge patch of the PodGroup's status subresource."""
        released(
            self.kube.custom.patch_namespaced_custom_object_status(
                "scheduling.k8s.io",
                "v1alpha2",
                namespace,
                "podgroups",
                name,
                body,
                _preload_content=False,
                _content_type="application/merge-patch+json",
            )
        )
        self.count("podgroup_status", "patch")

    # --- DRA: the ResourceClaim of a pod's devices (slurm_sync/bridge/claims.py) ----------------------

    def list_resource_slices(self, node: str) -> list[JSON]:
        """The ResourceSlices the DRA drivers publish for ``node``."""
        response = self.resource.list_resource_slice(field_selector=f"spec.nodeName={node}", _preload_content=False)
        return list(orjson.loads(response.data).get("items") or [])

    def create_resource_claim(self, namespace: str, body: JSON) -> JSON:
        response = self.resource.create_namespaced_resource_claim(
            namespace,
            body,
            _preload_content=False,
        )
        self.count("resourceclaim", "create")
        return orjson.loads(response.data)

    def read_resource_claim(self, namespace: str, name: str) -> JSON:
        response = self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False)
        return orjson.loads(response.data)

    def patch_resource_claim_status(self, namespace: str, name: str, body: JSON) -> None:
        """JSON merge patch of the claim's status subresource (allocation and reservedFor)."""
        released(
            self.resource.patch_namespaced_resource_claim_status(
                name, namespace, body, _preload_content=False, _content_type="application/merge-patch+json"
            )
        )
        self.count("resourceclaim_status", "patch")

    def delete_resource_claim(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete a claim (only that incarnation when ``uid`` is given)."""
        options = {"preconditions": {"uid": uid}} if uid else {}
        released(self.resource.delete_namespaced_resource_claim(name, namespace, body=options, _preload_content=False))
        self.count("resourceclaim", "delete")

    def patch_pod_claim_status(self, pod: BridgePod, body: JSON) -> None:
        """pod.status.extendedResourceClaimStatus (a pods/status patch)."""
        self.kube.patch_pod_status(pod.namespace, pod.name, body)

    def patch_pod_scheduled(self, pod: BridgePod, body: JSON) -> None:
        """Condition PodScheduled of a pod whose job is pending (a pods/status patch: unscheduled_body)."""
        self.kube.patch_pod_status(pod.namespace, pod.name, body)

    def patch_node(self, node: BridgeNode, body: JSON) -> None:
        """Strategic merge patch of a Node (``application/strategic-merge-patch+json``)."""
        released(self.core.patch_node(node.name, body, _preload_content=False))
        self.count("node", "patch")
