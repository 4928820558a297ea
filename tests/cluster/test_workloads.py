"""The cluster lab's workload controllers (hack/cluster/lab/workloads.py) on the cluster lab's API server.

In a namespace of its own, `Workloads` runs in a thread next to a tiny kubelet: it binds the
namespace's pods to a made-up node (so deletions are graceful, as on the lab), marks them Running and
Ready, and finishes graceful deletions with grace 0. The namespace is labelled private and the pods name
a scheduler of their own, so the lab's own controllers and node agent, if they run, leave them alone.
Skipped when the cluster lab's API server is not up.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from lab import kube, workloads

from tests.cluster.plugin import eventually
from tests.kube.plugin import KubeLab

Obj = dict[str, Any]
SCHEDULER = "workloads-test"
KUBELET_FINALIZER = "workloads-test/kubelet"
RS = workloads.REPLICASETS


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


class Kubelet:
    """Binds, starts (Running, Ready) and finishes the deletion of the namespace's pods; records what it saw."""

    def __init__(self, client: kube.Client, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.lock = threading.Lock()
        self.first_seen: list[tuple[str, set[str]]] = []  # (pod, the pods Ready when it appeared)
        self.gone: list[str] = []  # pods whose graceful deletion it finished, in order
        self.most_unavailable: dict[str, int] = {}  # app label -> most pods missing or not Ready at once
        self.most_active: dict[str, int] = {}  # app label -> most pods not being deleted at once
        self.expected: dict[str, int] = {}  # app label -> replicas wanted (for "missing")
        self.seen: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.1):
            with contextlib.suppress(kube.ApiError, requests.RequestException):
                self.step(self.client.list(kube.PODS, self.namespace))

    def step(self, pods: list[Obj]) -> None:
        ready = {p["metadata"]["name"] for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")}
        with self.lock:
            self._observe(pods, ready)
        for pod in pods:
            with contextlib.suppress(kube.ApiError):  # a conflict: next round
                self._act(pod, ready)

    def _observe(self, pods: list[Obj], ready: set[str]) -> None:
        for app, expected in self.expected.items():
            mine = [p for p in pods if p["metadata"].get("labels", {}).get("app") == app]
            active = [p for p in mine if not p["metadata"].get("deletionTimestamp")]
            unavailable = expected - sum(1 for p in active if p["metadata"]["name"] in ready)
            self.most_unavailable[app] = max(self.most_unavailable.get(app, 0), unavailable)
            self.most_active[app] = max(self.most_active.get(app, 0), len(active))

    def _act(self, pod: Obj, ready: set[str]) -> None:
        meta, name = pod["metadata"], pod["metadata"]["name"]
        if meta.get("deletionTimestamp"):
            # hack/kube's server deletes at once; this kubelet's finalizer stands for the grace period
            meta["finalizers"] = [f for f in meta.get("finalizers", []) if f != KUBELET_FINALIZER]
            self.client.update(kube.PODS, pod)
            with self.lock:
                self.gone.append(name)
        elif not pod["spec"].get("nodeName"):
            if name not in self.seen:
                with self.lock:
                    self.seen.add(name)
                    self.first_seen.append((name, set(ready)))
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": meta["uid"]},
                       "target": {"kind": "Node", "name": "workloads-test-node"}}  # fmt: skip
            self.client.request("POST", kube.PODS.path(self.namespace, name, "binding"), binding)
        elif KUBELET_FINALIZER not in meta.get("finalizers", []):
            meta["finalizers"] = [*meta.get("finalizers", []), KUBELET_FINALIZER]
            self.client.update(kube.PODS, pod)
        elif pod["status"].get("phase") == "Pending":
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": _now()},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": _now()}]}  # fmt: skip
            self.client.update_status(kube.PODS, pod)


@pytest.fixture(scope="module")
def client(kube_lab: KubeLab) -> kube.Client:
    """The lab client on hack/kube's API server (the cluster lab's own controllers do not run there)."""
    return kube.Client(kube_lab.kubeconfig)


@pytest.fixture(scope="module")
def lab(client: kube.Client) -> Iterator[tuple[kube.Client, str, workloads.Workloads, Kubelet]]:
    """A namespace with Workloads and the kubelet running; everything in it deleted at the end."""
    namespace = f"workloads-test-{uuid.uuid4().hex[:8]}"
    labels = {workloads.PRIVATE_LABEL: "private"}  # the lab's own Workloads, if it runs, leaves it to ours
    client.create(
        kube.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    )
    controllers = workloads.Workloads(client, interval=0.2, namespace=namespace)
    kubelet = Kubelet(client, namespace)
    stop = threading.Event()
    threads = [threading.Thread(target=part.run, args=(stop,), daemon=True) for part in (controllers, kubelet)]
    for thread in threads:
        thread.start()
    try:
        yield client, namespace, controllers, kubelet
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        _clean(client, namespace)


def _clean(client: kube.Client, namespace: str) -> None:
    for res in (kube.STATEFULSETS, kube.DEPLOYMENTS, RS, kube.PVCS):
        for obj in client.list(res, namespace):
            client.delete(res, namespace, obj["metadata"]["name"])
    for _ in range(50):  # no kubelet any more: bound pods are deleted with grace 0
        pods = client.list(kube.PODS, namespace)
        if not pods:
            break
        for pod in pods:
            client.delete(kube.PODS, namespace, pod["metadata"]["name"], grace=0)
        time.sleep(0.1)
    client.delete(kube.NAMESPACES, None, namespace)


def _pod_template(app: str, version: str) -> Obj:
    return {"metadata": {"labels": {"app": app}, "annotations": {"version": version}},
            "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "main", "image": "busybox"}]}}  # fmt: skip


def _statefulset(namespace: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": namespace},
            "spec": {"replicas": 3, "serviceName": "web-internal", "selector": {"matchLabels": {"app": "web"}},
                     "template": _pod_template("web", "1"),
                     "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "disk"}},
                                               "spec": {"accessModes": ["ReadWriteOnce"],
                                                        "resources": {"requests": {"storage": "1Gi"}}}}]}}  # fmt: skip


def _deployment(namespace: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": namespace},
            "spec": {"replicas": 2, "revisionHistoryLimit": 0, "selector": {"matchLabels": {"app": "api"}},
                     "template": _pod_template("api", "1")}}  # fmt: skip


def _sts_settled(client: kube.Client, namespace: str, revision_other_than: str = "") -> Obj | None:
    sts = client.get(kube.STATEFULSETS, namespace, "web")
    assert sts is not None
    status = sts["status"]
    done = (status.get("observedGeneration") == sts["metadata"]["generation"] and status.get("readyReplicas") == 3
            and status.get("updatedReplicas") == 3 and status.get("currentReplicas") == 3
            and status.get("currentRevision") == status.get("updateRevision") != revision_other_than)  # fmt: skip
    return sts if done else None


def test_statefulset_comes_up_in_order_with_bound_claims_then_rolls_from_the_highest(lab: tuple) -> None:
    client, namespace, _, kubelet = lab
    kubelet.expected["web"] = 3
    client.create(kube.STATEFULSETS, _statefulset(namespace))
    sts = eventually("web's 3 pods Ready", lambda: _sts_settled(client, namespace))

    status = sts["status"]
    revision = status["updateRevision"]
    assert re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]+", revision)
    assert status == {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                      "currentReplicas": 3, "updatedReplicas": 3, "currentRevision": revision,
                      "updateRevision": revision, "collisionCount": 0}  # fmt: skip
    with kubelet.lock:
        order = [(name, ready) for name, ready in kubelet.first_seen if name.startswith("web-")]
    assert [name for name, _ in order] == ["web-0", "web-1", "web-2"]
    assert all(f"web-{i - 1}" in ready for i, (_, ready) in enumerate(order) if i), (
        "a pod before its predecessor was Ready"
    )
    for ordinal in range(3):
        pod = client.get(kube.PODS, namespace, f"web-{ordinal}")
        assert pod["metadata"]["labels"] == {"app": "web", "controller-revision-hash": revision,
                                             "statefulset.kubernetes.io/pod-name": f"web-{ordinal}",
                                             "apps.kubernetes.io/pod-index": str(ordinal)}  # fmt: skip
        assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                                       "uid": sts["metadata"]["uid"], "controller": True,
                                                       "blockOwnerDeletion": True}]  # fmt: skip
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"web-{ordinal}", "web-internal")
        assert pod["spec"]["volumes"] == [
            {"name": "data", "persistentVolumeClaim": {"claimName": f"data-web-{ordinal}"}}
        ]
        claim = client.get(kube.PVCS, namespace, f"data-web-{ordinal}")
        assert claim["metadata"]["labels"] == {"tier": "disk", "app": "web"}
        assert "ownerReferences" not in claim["metadata"]  # the default retention policy: Retain
        assert claim["status"] == {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}

    with kubelet.lock:
        kubelet.gone.clear()
        kubelet.most_unavailable["web"] = 0
    patch = {"spec": {"template": {"metadata": {"annotations": {"version": "2"}}}}}
    client.merge_patch(kube.STATEFULSETS, namespace, "web", patch)
    sts = eventually("web rolled to its new template", lambda: _sts_settled(client, namespace, revision))
    new_revision = sts["status"]["updateRevision"]
    with kubelet.lock:
        assert [name for name in kubelet.gone if name.startswith("web-")] == ["web-2", "web-1", "web-0"]
        assert kubelet.most_unavailable["web"] == 1, "more than one pod replaced at a time"
    for ordinal in range(3):
        pod = client.get(kube.PODS, namespace, f"web-{ordinal}")
        assert (pod["metadata"]["labels"]["controller-revision-hash"], pod["metadata"]["annotations"]) == (
            new_revision, {"version": "2"})  # fmt: skip
    assert len(client.list(kube.PVCS, namespace)) == 3, "the claims outlive the pods"


def _deployment_settled(client: kube.Client, namespace: str, generation: int) -> Obj | None:
    d = client.get(kube.DEPLOYMENTS, namespace, "api")
    assert d is not None
    status = d["status"]
    progressing = {c["type"]: c for c in status.get("conditions") or []}.get("Progressing") or {}
    done = (d["metadata"]["generation"] == generation == status.get("observedGeneration")
            and status.get("replicas") == status.get("updatedReplicas") == status.get("availableReplicas") == 2
            and progressing.get("reason") == "NewReplicaSetAvailable"
            and len(client.list(RS, namespace)) == 1)  # fmt: skip
    return d if done else None


def _check_replicaset(client: kube.Client, namespace: str, d: Obj, revision: str, version: str) -> str:
    (rs,) = client.list(RS, namespace)
    template_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"api-{template_hash}"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == revision
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "api", "pod-template-hash": template_hash}
    assert rs["metadata"]["ownerReferences"][0]["uid"] == d["metadata"]["uid"]
    assert rs["status"]["readyReplicas"] == rs["status"]["availableReplicas"] == 2
    pods = [p for p in client.list(kube.PODS, namespace) if p["metadata"]["labels"].get("app") == "api"]
    assert len(pods) == 2
    for pod in pods:
        assert re.fullmatch(rf"api-{template_hash}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", pod["metadata"]["name"])
        assert pod["metadata"]["labels"] == {"app": "api", "pod-template-hash": template_hash}
        assert pod["metadata"]["annotations"] == {"version": version}
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
    return template_hash


def test_deployment_comes_up_then_rolls_to_a_new_replicaset(lab: tuple) -> None:
    client, namespace, _, kubelet = lab
    kubelet.expected["api"] = 2
    client.create(kube.DEPLOYMENTS, _deployment(namespace))
    d = eventually("api's 2 pods available", lambda: _deployment_settled(client, namespace, 1))
    first = _check_replicaset(client, namespace, d, "1", "1")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in d["status"]["conditions"]}
    assert conditions == {"Available": ("True", "MinimumReplicasAvailable"),
                          "Progressing": ("True", "NewReplicaSetAvailable")}  # fmt: skip
    assert (d["status"].get("readyReplicas"), d["status"].get("unavailableReplicas", 0)) == (2, 0)

    with kubelet.lock:
        kubelet.most_active["api"] = kubelet.most_unavailable["api"] = 0
    patch = {"spec": {"template": {"metadata": {"annotations": {"version": "2"}}}}}
    client.merge_patch(kube.DEPLOYMENTS, namespace, "api", patch)
    d = eventually("api rolled to a new ReplicaSet", lambda: _deployment_settled(client, namespace, 2))
    assert _check_replicaset(client, namespace, d, "2", "2") != first
    with kubelet.lock:  # the defaults, 25% of 2: one pod of surge, none unavailable
        assert (kubelet.most_active["api"], kubelet.most_unavailable["api"]) == (3, 0)


def test_no_write_once_settled(lab: tuple) -> None:
    client, namespace, controllers, _ = lab
    kinds = (kube.STATEFULSETS, kube.DEPLOYMENTS, RS, kube.PODS, kube.PVCS)

    def versions() -> dict[str, str]:
        return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
                for res in kinds for o in client.list(res, namespace)}  # fmt: skip

    before = versions()
    if not any(k.startswith("StatefulSet/") for k in before) or not any(k.startswith("Deployment/") for k in before):
        pytest.skip("nothing to watch: run with the StatefulSet and Deployment tests above")
    writes = controllers.stats()
    time.sleep(3)
    assert (controllers.stats(), versions()) == (writes, before)
    restarted = workloads.Workloads(client, namespace=namespace)  # no revision history in memory
    restarted.sync_once()
    assert (restarted.stats(), versions()) == ({}, before)
