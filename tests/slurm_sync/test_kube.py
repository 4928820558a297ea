"""slurm_sync's Kubernetes writes against a real API server: the patch types it sends, status
subresource writes, resourceVersion conflicts, pod binding, and the ownerReference removal that keeps
retained PVCs alive when their NodeSet goes (with the server's garbage collector doing the rest)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slinky_common import names
from slurm_sync.bridge.kube import BridgeKube, binding_body, label_body, release_body
from slurm_sync.bridge.view import BridgePod, read_pod
from slurm_sync.kube import Kube
from slurm_sync.operator.plan import claim_release_patch
from tests.crds.cases import example
from tests.fixtures.slurm import wait_for
from tests.kube.kubeapi import GROUP, VERSION, create_cr

Obj = dict[str, Any]


def pod_body(name: str, **meta: Any) -> Obj:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"containers": [{"name": "slurmd", "image": "slurmd:1"}, {"name": "logs", "image": "busybox:1"}]},
    }


def read(core: client.CoreV1Api, namespace: str, name: str) -> Obj:
    return client.ApiClient().sanitize_for_serialization(core.read_namespaced_pod(name, namespace))


@pytest.fixture
def core(kube_api) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


def test_pod_patch_is_a_strategic_merge(kube_api, core, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod_body("p", labels={"keep": "1"}, annotations={"a": "1"}))
    Kube(kube_api).patch_pod(kube_namespace, "p", {"metadata": {"annotations": {"b": "2"}}})
    pod = read(core, kube_namespace, "p")
    assert pod["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert pod["metadata"]["labels"] == {"keep": "1"}
    assert pod["metadata"]["generation"] == 1, "a metadata patch is not a spec change"


def test_pod_status_patch_merges_conditions_by_type_and_touches_nothing_else(
    kube_api, core, kube_namespace: str
) -> None:
    core.create_namespaced_pod(kube_namespace, pod_body("p", labels={"keep": "1"}))
    kube = Kube(kube_api)
    ready = {"type": "Ready", "status": "True"}
    kube.patch_pod_status(kube_namespace, "p", {"status": {"conditions": [ready]}})
    idle = {"type": "SlurmNodeStateIdle", "status": "True", "reason": "", "message": ""}
    kube.patch_pod_status(kube_namespace, "p", {"status": {"conditions": [idle]}, "spec": {"nodeName": "sneaky"}})
    pod = read(core, kube_namespace, "p")
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]} == {
        "Ready": "True",
        "SlurmNodeStateIdle": "True",
    }
    assert "nodeName" not in pod["spec"], "a status write must not change the spec"
    kube.patch_pod(kube_namespace, "p", {"status": {"phase": "Failed"}})
    assert read(core, kube_namespace, "p")["status"]["phase"] == "Pending", "the main resource ignores status"


def test_label_selector_lists_only_matching_pods(kube_api, core, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod_body("a", labels={"app": "slurmd", "set": "x"}))
    core.create_namespaced_pod(kube_namespace, pod_body("b", labels={"app": "slurmd", "set": "y"}))
    core.create_namespaced_pod(kube_namespace, pod_body("c", labels={"app": "other"}))
    listed = Kube(kube_api).list_pods(kube_namespace, {"app": "slurmd", "set": "y"})
    assert [p["metadata"]["name"] for p in listed] == ["b"]


def test_secret_key_from_string_data(kube_api, core, kube_namespace: str) -> None:
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "jwt"}, "stringData": {"jwt.key": "s3cret"}})
    value = Kube(kube_api).read_secret_key(kube_namespace, "jwt", "jwt.key")
    assert value.data == b"s3cret"
    stored = core.read_namespaced_secret("jwt", kube_namespace)
    assert stored.string_data is None and base64.b64decode(stored.data["jwt.key"]) == b"s3cret"
    assert value.resource_version == stored.metadata.resource_version
    with pytest.raises(KeyError):
        Kube(kube_api).read_secret_key(kube_namespace, "jwt", "missing")


def test_nodeset_annotation_is_a_merge_patch(kube_api, installed_crds, kube_namespace: str) -> None:
    nodeset = example("NodeSet")
    nodeset["metadata"] = {"name": "gpu", "namespace": kube_namespace, "annotations": {"mine": "1"}}
    create_cr(kube_api, nodeset, kube_namespace)
    Kube(kube_api).annotate_nodeset(kube_namespace, "gpu", names.ANNOTATION_SLURM_OBSERVED, "x")
    got = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, "nodesets", "gpu"
    )
    assert got["metadata"]["annotations"] == {"mine": "1", names.ANNOTATION_SLURM_OBSERVED: "x"}
    assert got["metadata"]["generation"] == 1


# --- PVC ownerReference removal, and the garbage collector ---------------------------------------------


def owner(core: client.CoreV1Api, namespace: str, name: str) -> Obj:
    cm = core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": cm.metadata.uid}


def claim(core: client.CoreV1Api, namespace: str, name: str, owners: list[Obj]) -> Obj:
    body = {
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    created = core.create_namespaced_persistent_volume_claim(namespace, body)
    return client.ApiClient().sanitize_for_serialization(created)


def test_release_patch_removes_only_our_reference(kube_api, core, kube_namespace: str) -> None:
    ours, other = owner(core, kube_namespace, "nodeset"), owner(core, kube_namespace, "other")
    pvc = claim(core, kube_namespace, "data", [ours, other])
    Kube(kube_api).patch_pvc(kube_namespace, "data", claim_release_patch(pvc, ours["uid"]))
    refs = core.read_namespaced_persistent_volume_claim("data", kube_namespace).metadata.owner_references
    assert [r.uid for r in refs] == [other["uid"]]


def test_release_patch_computed_from_a_stale_read_is_refused(kube_api, core, kube_namespace: str) -> None:
    ours, other = owner(core, kube_namespace, "nodeset"), owner(core, kube_namespace, "other")
    stale = claim(core, kube_namespace, "data", [ours])
    core.patch_namespaced_persistent_volume_claim(
        "data", kube_namespace, {"metadata": {"ownerReferences": [ours, other]}}
    )
    with pytest.raises(ApiException) as refused:
        Kube(kube_api).patch_pvc(kube_namespace, "data", claim_release_patch(stale, ours["uid"]))
    assert refused.value.status == 422  # the JSON patch's "test" failed: nothing was written
    refs = core.read_namespaced_persistent_volume_claim("data", kube_namespace).metadata.owner_references
    assert {r.uid for r in refs} == {ours["uid"], other["uid"]}


def test_released_claim_outlives_its_owner_and_an_owned_one_does_not(kube_api, core, kube_namespace: str) -> None:
    ours = owner(core, kube_namespace, "nodeset")
    released = claim(core, kube_namespace, "kept", [ours])
    claim(core, kube_namespace, "owned", [ours])
    Kube(kube_api).patch_pvc(kube_namespace, "kept", claim_release_patch(released, ours["uid"]))
    core.delete_namespaced_config_map("nodeset", kube_namespace)
    wait_for(
        lambda: [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(kube_namespace).items],
        lambda left: left == ["kept"],
        what="the garbage collector to delete only the owned claim",
    )


# --- the bridge: binding and resourceVersion preconditions ---------------------------------------------


def test_bind_sets_the_node_once_and_a_second_bind_conflicts(kube_api, core, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod_body("job"))
    bridge = BridgeKube(Kube(kube_api))
    pod = read_pod(read(core, kube_namespace, "job"))
    bridge.bind(pod, "n1")
    bound = read(core, kube_namespace, "job")
    assert bound["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    with pytest.raises(ApiException) as again:
        bridge.bind(pod, "n2")
    assert again.value.status == 409
    assert read(core, kube_namespace, "job")["spec"]["nodeName"] == "n1"


def recreated_pod(core: client.CoreV1Api, namespace: str, name: str) -> BridgePod:
    """The view of a pod that was then deleted and created again under the same name."""
    core.create_namespaced_pod(namespace, pod_body(name))
    old = read_pod(read(core, namespace, name))
    core.delete_namespaced_pod(name, namespace)
    core.create_namespaced_pod(namespace, pod_body(name))
    return old


def test_binding_for_a_recreated_pod_is_refused(kube_api, core, kube_namespace: str) -> None:
    old = recreated_pod(core, kube_namespace, "job")
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod_binding(
            "job",
            kube_namespace,
            binding_body(old, "n1"),
            _preload_content=False,
            _headers={"Content-Type": "application/json"},
        )
    assert refused.value.status == 409
    assert "nodeName" not in read(core, kube_namespace, "job")["spec"]


def test_label_patch_from_a_stale_read_conflicts(kube_api, core, kube_namespace: str) -> None:
    core.create_namespaced_pod(kube_namespace, pod_body("job"))
    stale = read_pod(read(core, kube_namespace, "job"))
    core.patch_namespaced_pod("job", kube_namespace, {"metadata": {"finalizers": ["someone.else/keep"]}})
    with pytest.raises(ApiException) as conflict:
        BridgeKube(Kube(kube_api)).patch_pod(stale, label_body(stale, 42, ""))
    assert conflict.value.status == 409
    pod = read(core, kube_namespace, "job")
    assert pod["metadata"]["finalizers"] == ["someone.else/keep"]
    core.patch_namespaced_pod(
        "job", kube_namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["someone.else/keep"]}}
    )


def test_release_removes_only_our_finalizer_and_lets_a_deleted_pod_go(kube_api, core, kube_namespace: str) -> None:
    """metadata.finalizers merges as a set in a strategic merge patch: the release must delete ours by name."""
    mine, theirs = names.FINALIZER_SCHEDULER, "someone.else/keep"
    core.create_namespaced_pod(kube_namespace, pod_body("job", finalizers=[theirs, mine]))
    bridge = BridgeKube(Kube(kube_api))
    holding = read_pod(read(core, kube_namespace, "job"))
    bridge.patch_pod(holding, release_body(holding, 42))
    released = read(core, kube_namespace, "job")["metadata"]
    assert released["finalizers"] == [theirs] and released["annotations"][names.ANNOTATION_JOB_RELEASED] == "42"
    core.patch_namespaced_pod("job", kube_namespace, {"metadata": {"finalizers": [mine]}})
    core.delete_namespaced_pod("job", kube_namespace)
    core.patch_namespaced_pod("job", kube_namespace, {"metadata": {"$deleteFromPrimitiveList/finalizers": [theirs]}})
    deleting = read_pod(read(core, kube_namespace, "job"))
    assert deleting.deletion is not None and deleting.finalizers == (mine,)
    bridge.patch_pod(deleting, release_body(deleting, 42))
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("job", kube_namespace)
    assert gone.value.status == 404


def test_delete_with_a_stale_uid_is_refused(kube_api, core, kube_namespace: str) -> None:
    old = recreated_pod(core, kube_namespace, "job")
    with pytest.raises(ApiException) as refused:
        BridgeKube(Kube(kube_api)).delete_pod(old)
    assert refused.value.status == 409
    assert read(core, kube_namespace, "job")["metadata"]["uid"] != old.uid
