"""Admission webhooks: slurm-bridge behaviour, vectors 19-21 (mutation matrix, rejections R1-R7, updates),
patches applied with jsonpatch and validated as real pods, and the AdmissionReview shape."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

from hooks.app import create_app
from hooks.bridge import admission
from hooks.bridge.admission import AdmissionSettings
from hooks.contract import AdmissionRequest
from slinky_common import names
from tests.support.kube import validate_builtin

MANAGED, OTHER = "slurm-bridge", "default"
SLINKY_RULE = AdmissionSettings(namespaces=frozenset({MANAGED}))
DRA = "deviceclass.resource.kubernetes.io/"


def new_pod(
    scheduler="default-scheduler", ns=MANAGED, labels=None, annotations=None, node_name=None, containers=None, **spec
):
    meta = {"name": "p", "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    body = {"schedulerName": scheduler, "containers": containers or [{"name": "c", "image": "busybox"}], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def review(pod, operation="CREATE", old=None):
    return AdmissionRequest(
        uid="uid-1", operation=operation, object=pod, old_object=old, namespace=pod["metadata"]["namespace"]
    )


def patched(pod, cfg=SLINKY_RULE, operation="CREATE", old=None):
    response = admission.mutate_with(review(pod, operation, old), cfg)["response"]
    assert response["allowed"] is True and response["uid"] == "uid-1"
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    result = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert validate_builtin(result) == []
    return result


def rejection(pod, cfg=SLINKY_RULE, operation="CREATE", old=None):
    response = admission.validate_with(review(pod, operation, old), cfg)["response"]
    assert response["uid"] == "uid-1"
    return None if response["allowed"] else response["status"]["message"]


TOLERATION = {
    "key": names.TAINT_MANAGED_NODE,
    "operator": "Equal",
    "value": names.BRIDGE_SCHEDULER_NAME,
    "effect": "NoExecute",
}


@pytest.mark.parametrize(
    ("pod", "operation", "scheduler", "node_name", "managed"),
    [
        pytest.param(new_pod(), "CREATE", names.BRIDGE_SCHEDULER_NAME, None, True, id="v19-default-in-managed-ns"),
        pytest.param(new_pod(scheduler="custom"), "CREATE", "custom", None, False, id="v19-custom-scheduler-kept"),
        pytest.param(new_pod(ns=OTHER), "CREATE", "default-scheduler", None, False, id="v19-unmanaged-ns-unchanged"),
        pytest.param(
            new_pod(node_name="n1"), "CREATE", names.BRIDGE_SCHEDULER_NAME, None, True, id="v19-nodename-cleared"
        ),
        pytest.param(
            new_pod(scheduler=names.BRIDGE_SCHEDULER_NAME, ns=OTHER),
            "CREATE",
            names.BRIDGE_SCHEDULER_NAME,
            None,
            True,
            id="v19-explicit-bridge-scheduler-anywhere",
        ),
        pytest.param(
            new_pod(scheduler=names.BRIDGE_SCHEDULER_NAME, node_name="n1"),
            "UPDATE",
            names.BRIDGE_SCHEDULER_NAME,
            "n1",
            True,
            id="v19-nodename-kept-on-update",
        ),
    ],
)
def test_v19_mutation_matrix(pod, operation, scheduler, node_name, managed):
    result = patched(pod, operation=operation, old=pod if operation == "UPDATE" else None)
    assert result["spec"]["schedulerName"] == scheduler
    assert result["spec"].get("nodeName") == node_name
    assert (names.LABEL_BRIDGE_MANAGED in result["metadata"].get("labels", {})) is managed
    if operation == "CREATE":
        assert (TOLERATION in result["spec"].get("tolerations", [])) is managed


def test_update_never_patches_the_immutable_spec():
    pod = new_pod(scheduler="default-scheduler")
    assert patched(pod, operation="UPDATE", old=pod) == pod


def test_update_labels_a_bridge_pod_that_lacks_the_label():
    pod = new_pod(scheduler=names.BRIDGE_SCHEDULER_NAME, labels={"app": "x"})
    result = patched(pod, operation="UPDATE", old=pod)
    assert result["metadata"]["labels"] == {"app": "x", names.LABEL_BRIDGE_MANAGED: "true"}
    assert result["spec"] == pod["spec"]


def test_label_key_is_escaped_per_rfc6901_and_existing_labels_and_tolerations_kept():
    other = {"key": "k", "operator": "Exists"}
    pod = new_pod(labels={"a/b": "1"}, tolerations=[other])
    response = admission.mutate_with(review(pod), SLINKY_RULE)["response"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/metadata/labels/scheduler.slinky.slurm.net~1managed", "value": "true"} in ops
    result = patched(pod)
    assert result["metadata"]["labels"] == {"a/b": "1", names.LABEL_BRIDGE_MANAGED: "true"}
    assert result["spec"]["tolerations"] == [other, TOLERATION]


def test_pointer_token_escapes_tilde_before_slash():
    assert admission.pointer_token("a~/b") == "a~0~1b"


def test_already_mutated_pod_needs_no_patch():
    pod = new_pod(
        scheduler=names.BRIDGE_SCHEDULER_NAME, labels={names.LABEL_BRIDGE_MANAGED: "true"}, tolerations=[TOLERATION]
    )
    assert "patch" not in admission.mutate_with(review(pod), SLINKY_RULE)["response"]


def test_without_namespace_list_every_received_pod_is_managed_and_scheduler_name_overridable():
    cfg = AdmissionSettings(scheduler_name="my-bridge")
    result = patched(new_pod(ns="anything"), cfg)
    assert result["spec"]["schedulerName"] == "my-bridge"
    assert {**TOLERATION, "value": "my-bridge"} in result["spec"]["tolerations"]


def test_empty_namespace_list_manages_only_explicit_bridge_pods():
    cfg = AdmissionSettings(namespaces=frozenset())
    assert patched(new_pod()) != new_pod()
    assert patched(new_pod(), cfg) == new_pod()


def _containers(requests=None, limits=None, name="c"):
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return [{"name": name, "image": "busybox", "resources": res}]


REJECTIONS = [
    pytest.param(
        new_pod(labels={names.LABEL_SLURM_JOB_ID: "7"}), "slurm external jobid label", id="v20-R1-jobid-label"
    ),
    pytest.param(
        new_pod(annotations={names.ANNOTATION_SLURM_NODE: "n1"}),
        "slurm external node annotation",
        id="v20-R2-node-annotation",
    ),
    pytest.param(
        new_pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}]),
        "use the annotation slurmjob.slinky.slurm.net/gres",
        id="v20-R3-resource-claims",
    ),
    pytest.param(
        new_pod(
            topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]
        ),
        "topologySpreadConstraints is not supported",
        id="v20-R4-topology-spread",
    ),
    pytest.param(
        new_pod(containers=_containers(requests={"cpu": "1", DRA + "dra.cpu": "2"})),
        "can't be combined with deviceclass.resource.kubernetes.io/dra.cpu",
        id="v20-R5-native-and-dra-cpu",
    ),
    pytest.param(
        new_pod(containers=_containers(limits={DRA + "dra.cpu": "2"}), resources={"limits": {"cpu": "1"}}),
        "native cpu",
        id="v20-R5-pod-level-cpu-and-dra-cpu",
    ),
    pytest.param(
        new_pod(containers=_containers(limits={DRA + "tpu.example.com": "1"})),
        "container 'c' uses unsupported DRA device class 'tpu.example.com'",
        id="v20-R6-unsupported-class",
    ),
    pytest.param(
        new_pod(initContainers=_containers(requests={DRA + "fpga": "1"}, name="init")),
        "container 'init' uses unsupported DRA device class 'fpga'",
        id="v20-R6-init-container",
    ),
    pytest.param(
        new_pod(
            annotations={names.SLURMJOB_PREFIX + "cpu-per-task": "2"},
            containers=_containers(requests={DRA + "dra.cpu": "2"}),
        ),
        "cpu-per-task can't be combined",
        id="v20-R7-cpu-per-task-and-dra-cpu",
    ),
    pytest.param(
        new_pod(
            annotations={names.SLURMJOB_PREFIX + "gres": "gres/gpu=1"},
            containers=_containers(limits={DRA + "gpu.nvidia.com": "1"}),
        ),
        "gres can't be combined",
        id="v20-R7-gres-and-dra-gpu",
    ),
]


@pytest.mark.parametrize(("pod", "needle"), REJECTIONS)
def test_v20_rejections(pod, needle):
    assert needle in rejection(pod)


@pytest.mark.parametrize(("pod", "needle"), REJECTIONS)
def test_v20_rejections_apply_to_explicit_bridge_pods_in_unmanaged_namespaces(pod, needle):
    explicit = copy.deepcopy(pod)
    explicit["metadata"]["namespace"] = OTHER
    explicit["spec"]["schedulerName"] = names.BRIDGE_SCHEDULER_NAME
    assert needle in rejection(explicit)
    explicit["spec"]["schedulerName"] = "other-scheduler"
    assert rejection(explicit) is None


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(new_pod(containers=_containers(requests={"cpu": "1", "memory": "1Gi"})), id="native-cpu"),
        pytest.param(
            new_pod(containers=_containers(limits={DRA + "dra.cpu": "2", DRA + "gpu.nvidia.com": "1"})), id="dra"
        ),
        pytest.param(
            new_pod(
                annotations={names.SLURMJOB_PREFIX + "gres": "gres/gpu=1"},
                containers=_containers(limits={DRA + "dra.cpu": "1"}),
            ),
            id="gres-with-dra-cpu-only",
        ),
    ],
)
def test_v20_acceptable_pods_pass(pod):
    assert rejection(pod) is None


def test_every_problem_is_reported_at_once():
    message = rejection(new_pod(labels={names.LABEL_SLURM_JOB_ID: "7"}, annotations={names.ANNOTATION_SLURM_NODE: "n"}))
    assert "jobid label" in message and "node annotation" in message


def _running(pod, job_id="7", node="n1", phase="Running"):
    out = copy.deepcopy(pod)
    out["metadata"]["labels"] = {names.LABEL_SLURM_JOB_ID: job_id}
    out["metadata"]["annotations"] = {names.ANNOTATION_SLURM_NODE: node}
    out["status"] = {"phase": phase}
    return out


@pytest.mark.parametrize(
    ("new", "phase", "rejected"),
    [
        pytest.param({"job_id": "8"}, "Running", True, id="v21-running-jobid-change-rejected"),
        pytest.param({"node": "n2"}, "Running", True, id="v21-running-node-change-rejected"),
        pytest.param({"job_id": "8", "node": "n2"}, "Pending", False, id="v21-pending-change-allowed"),
        pytest.param({}, "Running", False, id="v21-running-unchanged-allowed"),
    ],
)
def test_v21_running_pod_keeps_job_and_node(new, phase, rejected):
    base = new_pod(scheduler=names.BRIDGE_SCHEDULER_NAME)
    old = _running(base, phase=phase)
    updated = _running(base, phase=phase, **new)
    message = rejection(updated, operation="UPDATE", old=old)
    assert (message is not None) is rejected
    if rejected:
        assert "running Slurm Bridge-managed pod" in message


def test_v21_resize_rejected():
    old = new_pod(containers=_containers(requests={"cpu": "1"}))
    new = new_pod(containers=_containers(requests={"cpu": "2"}))
    assert rejection(new, operation="UPDATE", old=old) == "can't resize a Slurm Bridge-managed pod"


def test_delete_is_allowed_without_checks():
    pod = new_pod(labels={names.LABEL_SLURM_JOB_ID: "7"})
    assert rejection(pod, operation="DELETE", old=pod) is None


# --- over HTTP ---------------------------------------------------------------------------------------


def _review_body(pod, uid="u-42"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "namespace": pod["metadata"]["namespace"], "object": pod},
    }


def test_http_response_shape_and_environment_settings(monkeypatch):
    client = create_app().test_client()
    monkeypatch.setenv("BRIDGE_MANAGED_NAMESPACES", "slurm-bridge, other-managed")
    monkeypatch.setenv("BRIDGE_SCHEDULER_NAME", "sb")
    resp = client.post("/bridge/admission/mutate", json=_review_body(new_pod(ns=OTHER)))
    assert resp.status_code == 200
    assert resp.get_json() == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-42", "allowed": True},
    }
    monkeypatch.delenv("BRIDGE_MANAGED_NAMESPACES")
    resp = client.post("/bridge/admission/mutate", json=_review_body(new_pod(ns=OTHER)))
    ops = json.loads(base64.b64decode(resp.get_json()["response"]["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "sb"} in ops


def test_http_rejection_shape():
    resp = (
        create_app()
        .test_client()
        .post("/bridge/admission/validate", json=_review_body(new_pod(labels={names.LABEL_SLURM_JOB_ID: "1"})))
    )
    response = resp.get_json()["response"]
    assert resp.status_code == 200 and response["allowed"] is False and response["uid"] == "u-42"
    assert response["status"]["code"] == 403 and "jobid label" in response["status"]["message"]


def test_http_not_an_admission_review_is_400():
    resp = create_app().test_client().post("/bridge/admission/mutate", json={"kind": "Pod"})
    assert resp.status_code == 400 and "AdmissionReview" in resp.get_json()["error"]
