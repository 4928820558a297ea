"""The bridge loop's Kubernetes requests (slurm_sync/bridge/kube.py) against pytest-httpserver: the exact
bodies it computes, the method, path, content type and body of each request, how answers (404, 409, 500
included) are decoded or raised, and that each write is counted once, only when the apiserver took it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from kubernetes.client.exceptions import ApiException
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.bridge.kube import (
    BridgeKube,
    binding_body,
    label_body,
    pod_group_scheduled_body,
    release_body,
    submit_error_body,
    taint_body,
)
from slurm_sync.bridge.view import BridgePod, read_node, read_pod
from slurm_sync.kube import Kube, is_not_found
from tests.slurm_sync.bridgekube import BNS, OUR_TAINT, bridge_pod, kube_node, pod_group
from tests.slurm_sync.kubefixtures import api_client

JSON = dict[str, Any]
POD = read_pod(bridge_pod("p", job_id=7, uid="uid-p"))
NODE = read_node(kube_node("kn1", slurm_name="n1"))
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{BNS}/resourceclaims"
POD_GROUP = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{BNS}/podgroups/pg"
NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
CONFLICT = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}
FAILED = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "InternalError", "code": 500}


def pod(**kw: Any) -> BridgePod:
    return read_pod(bridge_pod("p", **kw))


# --- the bodies ---------------------------------------------------------------------------------------


def test_the_label_patch_adds_our_finalizer_once_and_carries_the_version_it_was_computed_from() -> None:
    assert label_body(pod(), 7, "") == {
        "metadata": {"resourceVersion": "5", "labels": {names.LABEL_SLURM_JOB_ID: "7"},
                     "finalizers": [names.FINALIZER_SCHEDULER]}
    }  # fmt: skip
    held = pod(finalizers=["other", names.FINALIZER_SCHEDULER])
    assert label_body(held, 8, "d")["metadata"] == {
        "resourceVersion": "5",
        "labels": {names.LABEL_SLURM_JOB_ID: "8"},
        "finalizers": ["other", names.FINALIZER_SCHEDULER],
        "annotations": {names.ANNOTATION_PLACEHOLDER_APPLIED: "d"},
    }
    assert label_body(pod(finalizers=["other"]), 7, "")["metadata"]["finalizers"] == [
        "other",
        names.FINALIZER_SCHEDULER,
    ]
    # an empty submit error is still one to clear
    told = pod(annotations={names.ANNOTATION_SUBMIT_ERROR: ""})
    assert label_body(told, 7, "")["metadata"]["annotations"] == {names.ANNOTATION_SUBMIT_ERROR: None}


def test_the_release_patch_removes_only_our_finalizer_by_a_delete_directive() -> None:
    assert release_body(pod(finalizers=["other", names.FINALIZER_SCHEDULER]), 7) == {
        "metadata": {
            "resourceVersion": "5",
            "annotations": {names.ANNOTATION_JOB_RELEASED: "7"},
            "$deleteFromPrimitiveList/finalizers": [names.FINALIZER_SCHEDULER],
        }
    }
    assert release_body(pod(finalizers=["other"]), 7) == {
        "metadata": {"resourceVersion": "5", "annotations": {names.ANNOTATION_JOB_RELEASED: "7"}}
    }


def test_binding_submit_error_and_taint_bodies() -> None:
    assert binding_body(POD, "kn2") == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": BNS, "uid": "uid-p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kn2"},
    }
    assert submit_error_body("too few nodes") == {
        "metadata": {"annotations": {names.ANNOTATION_SUBMIT_ERROR: "too few nodes"}}
    }
    other = {"key": "x", "effect": "NoSchedule"}
    assert taint_body(NODE, (other, OUR_TAINT)) == {
        "metadata": {"resourceVersion": "3"},
        "spec": {"taints": [other, OUR_TAINT]},
    }
    assert taint_body(NODE, ()) == {"metadata": {"resourceVersion": "3"}, "spec": {"taints": []}}


def test_the_pod_group_condition_is_written_unless_it_is_already_scheduled_as_ours() -> None:
    body = pod_group_scheduled_body(pod_group("pg"), "2026-01-02T03:04:05Z")
    assert body is not None and body["metadata"] == {"resourceVersion": "11"}
    assert [(c["type"], c["status"], c["reason"]) for c in body["status"]["conditions"]] == [
        (names.CONDITION_POD_GROUP_SCHEDULED, "True", "Scheduled")
    ]
    other_reason = {"type": names.CONDITION_POD_GROUP_SCHEDULED, "status": "True", "reason": "ByHand"}
    again = pod_group_scheduled_body(pod_group("pg", conditions=[other_reason]), "t")
    assert again is not None and [c["reason"] for c in again["status"]["conditions"]] == ["Scheduled"]
    assert pod_group_scheduled_body({}, "t") == {
        "metadata": {"resourceVersion": None},
        "status": {"conditions": [dict(body["status"]["conditions"][0], lastTransitionTime="t")]},
    }


# --- the requests --------------------------------------------------------------------------------------


@dataclass
class Rig:
    server: HTTPServer
    counted: list[tuple[str, str]] = field(default_factory=list)

    @property
    def kube(self) -> BridgeKube:
        """Both the wrapped Kube and BridgeKube count into ``counted``, as the service wires them."""

        def count(kind: str, verb: str) -> None:
            self.counted.append((kind, verb))

        return BridgeKube(Kube(api_client(self.server.url_for("/")), count), count)

    def answer(self, method: str, path: str, body: Any, status: int = 200, **query: str) -> None:
        self.server.expect_oneshot_request(path, method, query_string=query or None).respond_with_json(
            body, status=status
        )

    def sent(self) -> list[tuple[str, str, str, Any]]:
        """(method, path, content type, decoded body or None) of every request, in order."""
        return [
            (r.method, r.path, r.headers.get("Content-Type", ""), orjson.loads(r.get_data()) if r.get_data() else None)
            for r, _ in self.server.log
        ]


@pytest.fixture
def rig(httpserver: HTTPServer) -> Iterator[Rig]:
    rig = Rig(httpserver)
    yield rig
    httpserver.check_assertions()  # no request the test did not expect


def test_managed_pods_are_listed_by_the_managed_label_and_nodes_all(rig: Rig) -> None:
    items = [bridge_pod("a"), bridge_pod("b")]
    rig.answer(
        "GET", f"/api/v1/namespaces/{BNS}/pods", {"items": items}, labelSelector=f"{names.LABEL_BRIDGE_MANAGED}=true"
    )
    rig.answer("GET", "/api/v1/nodes", {"items": None})
    assert rig.kube.list_pods(BNS) == items
    assert rig.kube.list_nodes() == []
    assert [(m, p) for m, p, _, _ in rig.sent()] == [
        ("GET", f"/api/v1/namespaces/{BNS}/pods"),
        ("GET", "/api/v1/nodes"),
    ]


def test_a_pod_patch_is_a_strategic_merge_counted_once(rig: Rig) -> None:
    body = label_body(POD, 7, "d")
    rig.answer("PATCH", f"/api/v1/namespaces/{BNS}/pods/p", bridge_pod("p"))
    rig.kube.patch_pod(POD, body)
    assert rig.sent() == [("PATCH", f"/api/v1/namespaces/{BNS}/pods/p", STRATEGIC, body)]
    assert rig.counted == [("pod", "patch")]


def test_a_stale_pod_patch_is_refused_and_not_counted(rig: Rig) -> None:
    rig.answer("PATCH", f"/api/v1/namespaces/{BNS}/pods/p", CONFLICT, 409)
    with pytest.raises(ApiException) as refused:
        rig.kube.patch_pod(POD, release_body(POD, 7))
    assert refused.value.status == 409 and rig.counted == []


def test_bind_posts_the_binding_as_json_and_a_pod_bound_already_conflicts(rig: Rig) -> None:
    path = f"/api/v1/namespaces/{BNS}/pods/p/binding"
    rig.answer("POST", path, {"kind": "Status", "status": "Success", "code": 201}, 201)
    rig.kube.bind(POD, "kn2")
    assert rig.sent() == [("POST", path, "application/json", binding_body(POD, "kn2"))]
    assert rig.counted == [("pod_binding", "create")]
    rig.answer("POST", path, CONFLICT, 409)
    with pytest.raises(ApiException) as conflict:
        rig.kube.bind(POD, "kn2")
    assert conflict.value.status == 409 and rig.counted == [("pod_binding", "create")]


def test_a_pod_is_deleted_only_in_the_incarnation_the_view_saw(rig: Rig) -> None:
    path = f"/api/v1/namespaces/{BNS}/pods/p"
    rig.answer("DELETE", path, bridge_pod("p"))
    rig.kube.delete_pod(POD)
    assert rig.sent() == [("DELETE", path, "application/json", {"preconditions": {"uid": "uid-p"}})]
    assert rig.counted == [("pod", "delete")]
    rig.answer("DELETE", path, NOT_FOUND, 404)
    with pytest.raises(ApiException) as gone:
        rig.kube.delete_pod(POD)
    assert is_not_found(gone.value) and rig.counted == [("pod", "delete")]


def test_a_pod_group_is_read_decoded_and_a_missing_one_is_none(rig: Rig) -> None:
    rig.answer("GET", POD_GROUP, pod_group("pg"))
    assert rig.kube.read_pod_group(BNS, "pg") == pod_group("pg")
    rig.answer("GET", POD_GROUP, NOT_FOUND, 404)
    assert rig.kube.read_pod_group(BNS, "pg") is None
    rig.answer("GET", POD_GROUP, FAILED, 500)
    with pytest.raises(ApiException) as failed:
        rig.kube.read_pod_group(BNS, "pg")
    assert failed.value.status == 500 and rig.counted == []


def test_the_pod_group_status_is_a_merge_patch_of_the_status_subresource(rig: Rig) -> None:
    body = pod_group_scheduled_body(pod_group("pg"), "2026-01-02T03:04:05Z")
    assert body is not None
    rig.answer("PATCH", f"{POD_GROUP}/status", pod_group("pg"))
    rig.kube.patch_pod_group_status(BNS, "pg", body)
    assert rig.sent() == [("PATCH", f"{POD_GROUP}/status", MERGE, body)]
    assert rig.counted == [("podgroup_status", "patch")]
    rig.answer("PATCH", f"{POD_GROUP}/status", CONFLICT, 409)
    with pytest.raises(ApiException):
        rig.kube.patch_pod_group_status(BNS, "pg", body)
    assert rig.counted == [("podgroup_status", "patch")]


def test_the_resource_slices_of_a_node_are_listed_by_a_field_selector(rig: Rig) -> None:
    slices = [{"metadata": {"name": "s"}, "spec": {"nodeName": "kn1", "driver": "gpu.nvidia.com"}}]
    rig.answer("GET", "/apis/resource.k8s.io/v1/resourceslices", {"items": slices}, fieldSelector="spec.nodeName=kn1")
    assert rig.kube.list_resource_slices("kn1") == slices
    rig.answer("GET", "/apis/resource.k8s.io/v1/resourceslices", {"kind": "ResourceSliceList"})
    assert rig.kube.list_resource_slices("kn2") == []
    assert rig.counted == []


def test_a_claim_is_created_and_the_stored_claim_returned_decoded(rig: Rig) -> None:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": BNS}}
    stored = {**body, "metadata": {"name": "c", "namespace": BNS, "uid": "u1", "resourceVersion": "9"}}
    rig.answer("POST", CLAIMS, stored, 201)
    assert rig.kube.create_resource_claim(BNS, body) == stored
    ((method, path, content_type, sent),) = rig.sent()
    assert (method, path, sent) == ("POST", CLAIMS, body)
    assert content_type in ("", "application/json")  # the generated client sets none for a create
    assert rig.counted == [("resourceclaim", "create")]
    rig.answer("POST", CLAIMS, {**CONFLICT, "reason": "AlreadyExists"}, 409)
    with pytest.raises(ApiException) as exists:
        rig.kube.create_resource_claim(BNS, body)
    assert exists.value.status == 409 and rig.counted == [("resourceclaim", "create")]


def test_a_claim_is_read_decoded_and_a_missing_one_raises_the_apiservers_not_found(rig: Rig) -> None:
    stored = {"metadata": {"name": "c", "uid": "u1"}, "status": {"reservedFor": []}}
    rig.answer("GET", f"{CLAIMS}/c", stored)
    assert rig.kube.read_resource_claim(BNS, "c") == stored
    rig.answer("GET", f"{CLAIMS}/c", NOT_FOUND, 404)
    with pytest.raises(ApiException) as missing:
        rig.kube.read_resource_claim(BNS, "c")
    assert is_not_found(missing.value)


def test_the_claim_status_is_a_merge_patch_of_its_status_subresource(rig: Rig) -> None:
    body = {"metadata": {"resourceVersion": "9"}, "status": {"reservedFor": [{"resource": "pods", "name": "p"}]}}
    rig.answer("PATCH", f"{CLAIMS}/c/status", {"metadata": {"name": "c"}})
    rig.kube.patch_resource_claim_status(BNS, "c", body)
    assert rig.sent() == [("PATCH", f"{CLAIMS}/c/status", MERGE, body)]
    assert rig.counted == [("resourceclaim_status", "patch")]
    rig.answer("PATCH", f"{CLAIMS}/c/status", FAILED, 500)
    with pytest.raises(ApiException):
        rig.kube.patch_resource_claim_status(BNS, "c", body)
    assert rig.counted == [("resourceclaim_status", "patch")]


def test_a_claim_is_deleted_in_the_incarnation_given_or_whatever_it_is(rig: Rig) -> None:
    rig.answer("DELETE", f"{CLAIMS}/c", {"kind": "Status", "status": "Success"})
    rig.answer("DELETE", f"{CLAIMS}/c", {"kind": "Status", "status": "Success"})
    rig.kube.delete_resource_claim(BNS, "c", "u1")
    rig.kube.delete_resource_claim(BNS, "c")
    assert rig.sent() == [
        ("DELETE", f"{CLAIMS}/c", "application/json", {"preconditions": {"uid": "u1"}}),
        ("DELETE", f"{CLAIMS}/c", "application/json", {}),
    ]
    assert rig.counted == [("resourceclaim", "delete")] * 2
    rig.answer("DELETE", f"{CLAIMS}/c", NOT_FOUND, 404)
    with pytest.raises(ApiException) as gone:
        rig.kube.delete_resource_claim(BNS, "c")
    assert is_not_found(gone.value) and len(rig.counted) == 2


def test_the_pod_claim_status_is_a_strategic_merge_of_the_pod_status_subresource(rig: Rig) -> None:
    body = {"status": {"extendedResourceClaimStatus": {"resourceClaimName": "c", "requestMappings": []}}}
    rig.answer("PATCH", f"/api/v1/namespaces/{BNS}/pods/p/status", bridge_pod("p"))
    rig.kube.patch_pod_claim_status(POD, body)
    assert rig.sent() == [("PATCH", f"/api/v1/namespaces/{BNS}/pods/p/status", STRATEGIC, body)]
    assert rig.counted == [("pod_status", "patch")]


def test_a_node_patch_is_a_strategic_merge_and_a_failed_one_raises_uncounted(rig: Rig) -> None:
    body = taint_body(NODE, (OUR_TAINT,))
    rig.answer("PATCH", "/api/v1/nodes/kn1", kube_node("kn1"))
    rig.kube.patch_node(NODE, body)
    assert rig.sent() == [("PATCH", "/api/v1/nodes/kn1", STRATEGIC, body)]
    assert rig.counted == [("node", "patch")]
    rig.answer("PATCH", "/api/v1/nodes/kn1", CONFLICT, 409)
    with pytest.raises(ApiException) as stale:
        rig.kube.patch_node(NODE, body)
    assert stale.value.status == 409 and rig.counted == [("node", "patch")]
