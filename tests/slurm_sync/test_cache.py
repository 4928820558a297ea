"""What the watch cache keeps of an object, which changes wake the loop, the view memo, and what a
pass plans when little changed (docs/architecture.md §4.8)."""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

import pytest

from slinky_common import names
from slurm_sync.bridge import view as bridge_view
from slurm_sync.cache import ViewMemo, matters, trim_node, trim_pod
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator import topology
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.view import read_controller_pod, read_kube_node, read_pod
from slurm_sync.wake import Wakeup, run_passes
from tests.slurm_sync.fakekube import merge_conditions, merge_metadata
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    RecordedEvents,
    kube_node,
    node,
    nodeset,
    pod,
)

JSON = dict[str, Any]


def full_pod() -> JSON:
    """A pod with everything a cluster puts on one: what the views read and much they do not."""
    obj = pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON: "true"})
    obj["metadata"]["managedFields"] = [{"manager": "metacontroller", "fieldsV1": {"f:metadata": {}}}]
    obj["metadata"]["annotations"] |= {
        names.ANNOTATION_LAST_APPLIED: '{"big": "' + "x" * 4000 + '"}',
        names.ANNOTATION_PLACEHOLDER_JOB: '{"partition": "debug"}',
        names.ANNOTATION_SLURM_NODE: "n1",
    }
    obj["metadata"] |= {"finalizers": [names.FINALIZER_SCHEDULER], "deletionTimestamp": "2026-01-02T00:00:00Z"}
    obj["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = "42"
    obj["spec"] |= {
        "schedulerName": names.BRIDGE_SCHEDULER_NAME,
        "schedulingGroup": {"podGroupName": "g"},
        "containers": [{"name": "slurmd", "image": "slurmd:26.05", "resources": {"limits": {"cpu": "64"}}}],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    }
    obj["status"] |= {"podIP": "10.0.0.1", "containerStatuses": [{"name": "slurmd", "ready": True}]}
    return obj


def full_node() -> JSON:
    obj = kube_node("k1", unschedulable=True, cordon_reason="disk")
    obj["metadata"] |= {"resourceVersion": "9", "labels": {names.LABEL_BRIDGE_WORKER: "true"}}
    obj["metadata"]["annotations"] |= {names.ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s1"}
    obj["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    obj["spec"]["taints"] = [{"key": names.TAINT_MANAGED_NODE, "effect": "NoSchedule"}]
    obj["status"] = {
        "images": [{"names": ["slurmd:1"], "sizeBytes": 1}],
        "nodeInfo": {"kubeletVersion": "v1.33.1"},
        "capacity": {"cpu": "64"},
        "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "PLEG"}],
    }
    return obj


def test_the_cache_keeps_all_the_views_read() -> None:
    pod_obj, node_obj = full_pod(), full_node()
    kept = trim_pod(copy.deepcopy(pod_obj))
    assert "managedFields" not in kept["metadata"] and "containers" not in kept["spec"]
    assert set(kept["status"]) == {"phase", "conditions"}
    without_last_applied = copy.deepcopy(pod_obj)
    del without_last_applied["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]
    assert read_pod(kept) == read_pod(without_last_applied)
    assert read_controller_pod(kept) == read_controller_pod(pod_obj)
    assert bridge_view.read_pod(kept) == bridge_view.read_pod(pod_obj)
    kept_node = trim_node(copy.deepcopy(node_obj))
    assert set(kept_node["status"]) == {"conditions"} and "managedFields" not in kept_node["metadata"]
    assert read_kube_node(kept_node) == read_kube_node(node_obj)
    assert bridge_view.read_node(kept_node) == bridge_view.read_node(node_obj)


def test_only_real_changes_matter() -> None:
    node_obj = kube_node("k1")
    node_obj["status"] = {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "T1"}]}
    heartbeat = copy.deepcopy(node_obj)
    heartbeat["metadata"]["resourceVersion"] = "99"
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "T2"
    assert not matters(node_obj, heartbeat)
    cordoned = copy.deepcopy(heartbeat)
    cordoned["spec"]["unschedulable"] = True
    assert matters(node_obj, cordoned)
    not_ready = copy.deepcopy(heartbeat)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert matters(node_obj, not_ready)
    assert matters(None, node_obj) and matters(node_obj, None)


def test_view_memo_reads_only_objects_it_has_not_seen() -> None:
    reads: list[str] = []

    def read(obj: JSON) -> str:
        reads.append(obj["metadata"]["name"])
        return obj["metadata"]["name"].upper()

    memo = ViewMemo(read)
    a, b = pod("a"), pod("b")
    assert memo([a, b]) == ["A", "B"]
    assert memo([a, b]) == ["A", "B"] and reads == ["a", "b"]
    b2 = copy.deepcopy(b)  # the cache's dict for a changed object is a new one
    assert memo([a, b2]) == ["A", "B"] and reads == ["a", "b", "b"]


def test_view_memo_hands_out_the_same_list_while_no_view_changes() -> None:
    """The same listing, or one whose objects changed only in what the views do not read: the very same list
    (an idle pass then costs nothing per object, issue 28); a change a view reads: a new list, the other
    objects' views as they were."""
    memo = ViewMemo(lambda obj: (obj["metadata"]["name"], obj["metadata"].get("labels", {}).get("x")))
    a, b = pod("a"), pod("b")
    listing = [a, b]
    first = memo(listing)
    assert memo(listing) is first
    b_heartbeat = copy.deepcopy(b)
    b_heartbeat["metadata"]["resourceVersion"] = "99"  # what no view reads
    assert memo([a, b_heartbeat]) is first
    b_labelled = copy.deepcopy(b)
    b_labelled["metadata"].setdefault("labels", {})["x"] = "1"
    changed = memo([a, b_labelled])
    assert changed is not first and changed == [("a", None), ("b", "1")] and changed[0] is first[0]


class SameDicts:
    """The cache's side of the loop: the very same dicts pass after pass until an object changes (a
    write replaces the written object's dict, as its watch event would)."""

    same_dicts = True

    def __init__(self, pods: list[JSON], nodesets: list[JSON], nodes: list[JSON]) -> None:
        self.pods, self.nodesets, self.nodes = pods, nodesets, nodes
        self.writes: list[tuple[str, JSON]] = []

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[JSON]:
        return list(self.pods) if names.LABEL_CLUSTER in labels else []

    change_marks = Kube.change_marks  # this reader cannot tell what changed: no pass drains before its listing
    changes_since = Kube.changes_since

    def list_custom(self, plural: str, namespace: str | None) -> list[JSON]:
        return list(self.nodesets)

    def list_nodes(self) -> list[JSON]:
        return list(self.nodes)

    def _patch(self, name: str, body: JSON, status: bool) -> None:
        self.writes.append((name + ("/status" if status else ""), body))
        index = next(i for i, p in enumerate(self.pods) if p["metadata"]["name"] == name)
        changed = copy.deepcopy(self.pods[index])
        merge_metadata(changed, body.get("metadata") or {})
        if status:
            merge_conditions(changed, (body.get("status") or {}).get("conditions") or [])
        self.pods[index] = changed

    def patch_pod(self, namespace: str, name: str, body: JSON) -> None:
        self._patch(name, body, status=False)

    def patch_pod_status(self, namespace: str, name: str, body: JSON) -> None:
        self._patch(name, body, status=True)

    def annotate_nodeset(self, namespace: str, name: str, key: str, value: str) -> None:
        self.writes.append((f"nodeset {name}", {key: value}))
        changed = copy.deepcopy(self.nodesets[0])
        changed["metadata"].setdefault("annotations", {})[key] = value
        self.nodesets[0] = changed


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods planned, pass after pass (topology.plan_pod_with_topology is what the loop calls per pod)."""
    names_: list[str] = []
    plan_pod = topology.plan_pod_with_topology

    def counting(pod_view: Any, *args: Any, **kwargs: Any) -> Any:
        names_.append(pod_view.name)
        return plan_pod(pod_view, *args, **kwargs)

    monkeypatch.setattr(topology, "plan_pod_with_topology", counting)
    return names_


def settled_cluster() -> tuple[SameDicts, FakeSlurm]:
    pods = [pod(f"gpu-{i}", f"n{i}", states=("IDLE",)) for i in range(4)]
    comment = '{{"namespace":"{ns}","podName":"gpu-{i}","node":"k1","nodeSetName":"gpu","nodeSetUID":"{uid}"}}'
    nodes = {f"n{i}": node(f"n{i}", "IDLE", comment=comment.format(ns=NS, i=i, uid=NODESET_UID)) for i in range(4)}
    return SameDicts(pods, [nodeset()], [kube_node()]), FakeSlurm(nodes)


def test_a_pass_plans_only_pods_whose_inputs_changed_and_all_at_the_full_replan(planned: list[str]) -> None:
    kube, slurm = settled_cluster()
    clock = [0.0]
    loop = OperatorLoop(
        CLUSTER, NS, CLUSTER, slurm, kube, Metrics(),  # type: ignore[arg-type]
        now=lambda: NOW, clock=lambda: clock[0], events=RecordedEvents(), full_replan_interval=300,
    )  # fmt: skip
    first = loop.run_pass()
    assert first.ok and first.slurm_writes == 0 and kube.writes == [("nodeset gpu", kube.writes[0][1])]
    assert sorted(planned) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    planned.clear()
    quiet = loop.run_pass()
    assert (quiet.kube_writes, quiet.slurm_writes, planned) == (0, 0, []), "nothing changed: nothing planned"

    kube.pods[1] = pod("gpu-1", "n1", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON: "true"})
    assert loop.run_pass().slurm_writes == 1 and slurm.updates[-1][0] == "n1"
    assert planned == ["gpu-1"]
    planned.clear()
    slurm.nodes["n1"] = dataclasses.replace(slurm.nodes["n1"], state=frozenset({"IDLE", "DRAIN"}),
                                            reason=slurm.updates[-1][1].reason or "")  # fmt: skip
    slurm.nodes["n2"] = dataclasses.replace(slurm.nodes["n2"], state=frozenset({"IDLE", "DRAIN"}), reason="admin")
    loop.run_pass()
    assert planned == ["gpu-1", "gpu-2"], "only the pods whose Slurm node changed"
    written = {name for name, _ in kube.writes}
    assert {"gpu-1", "gpu-1/status", "gpu-2/status"} <= written and "gpu-0" not in written
    planned.clear()
    loop.run_pass()
    assert planned == ["gpu-1", "gpu-2"], "and once more, as our writes changed their pods"
    planned.clear()
    loop.run_pass()
    assert planned == []
    clock[0] = 301.0
    loop.run_pass()
    assert sorted(planned) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], "the full re-plan"


def test_a_change_wakes_the_next_pass_at_once_and_the_interval_still_runs_them() -> None:
    wakeup, stop = Wakeup(), threading.Event()
    passes: list[int] = []
    woken = threading.Event()

    def one_pass() -> None:
        passes.append(1)
        if len(passes) == 1:
            wakeup.set()  # a change seen during the first pass
        if len(passes) == 2:
            woken.set()
            stop.set()

    thread = threading.Thread(target=run_passes, args=(one_pass, wakeup, 3600.0, stop))
    thread.start()
    assert woken.wait(30), "the change did not start a pass (the poll interval is an hour)"
    thread.join(30)
    assert not thread.is_alive() and len(passes) == 2
    timer_stop = threading.Event()
    assert not Wakeup().wait(0.01, timer_stop), "nothing set: the interval ends the wait"
