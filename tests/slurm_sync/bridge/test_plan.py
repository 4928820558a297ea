"""The bridge plans as pure functions, named by slurm-bridge behaviour, vector where one applies."""

from __future__ import annotations

import datetime

import orjson
import pytest

from slinky_common import names
from slurm_sync.bridge import nodes as bridge_nodes
from slurm_sync.bridge.kube import label_body, pod_group_scheduled_body, unscheduled_body
from slurm_sync.bridge.nodes import (
    CreateNode,
    DeleteNode,
    MarkRegistered,
    SlurmNodeChange,
    plan_nodes,
    unproven_registered,
)
from slurm_sync.bridge.plan import Cancel, DeletePod, digest, orphans, plan_pods, scheduled_pod_groups
from slurm_sync.bridge.view import BridgePod, read_node, read_pod
from slurm_sync.slurm.types import Job, NodeUpdate, parse_job, parse_node
from tests.slurm_sync.bridgekube import BNS, OUR_TAINT, bridge_pod, job_body, kube_node, single

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
NODES = {n.name: n for n in map(read_node, [kube_node("kn1", slurm_name="n1"), kube_node("kn2", slurm_name="n2")])}


def job(job_id: int, *state: str, nodes: str = "", pods: tuple[str, ...] = (), external: bool = True) -> Job:
    return parse_job({"job_id": job_id, "job_state": list(state), "nodes": nodes,
                      "admin_comment": orjson.dumps({"pods": list(pods)}).decode(),
                      "flags": ["EXTERNAL_JOB"] if external else []})  # fmt: skip


def pod(obj: dict, **meta: object) -> BridgePod:
    obj["metadata"].update(meta)
    return read_pod(obj)


def plan(
    pods: list[BridgePod],
    jobs: dict[int, Job | None],
    index: dict[int, Job] | None = None,
    placeable: frozenset[str] | None = frozenset(NODES),
):
    return plan_pods(pods, NODES, jobs, index or {}, NOW, placeable)


def test_vector_14_running_job_binds_to_the_mapped_node_and_an_unmapped_node_binds_nothing() -> None:
    p = pod(single("p", job_id=7))
    actions = plan([p], {7: job(7, "RUNNING", nodes="n2")})
    assert [(b.pod.name, b.node, b.slurm_node) for b in actions.binds] == [("p", "kn2", "n2")]
    actions = plan([p], {7: job(7, "RUNNING", nodes="n9")})
    assert actions.binds == () and "n9 map to no Kubernetes node" in actions.errors[0]


def test_a_pod_whose_job_is_pending_says_slurms_reason_once() -> None:
    """As kube-scheduler says why it cannot place a pod: condition PodScheduled=False with the pending job's
    reason; written again only when the reason changes."""
    p = pod(single("p", job_id=7))
    pending = parse_job({"job_id": 7, "job_state": ["PENDING"], "state_reason": "Resources",
                         "partition": "slurm-bridge", "flags": ["EXTERNAL_JOB"]})  # fmt: skip
    (waiting,) = plan([p], {7: pending}).unscheduled
    assert (waiting.pod.name, waiting.message) == ("p", "Slurm job 7 is pending in partition slurm-bridge: Resources")
    body = unscheduled_body(waiting.message, "2026-01-02T03:04:05Z")
    said = single("p", job_id=7)
    said["status"] = body["status"]
    assert plan([pod(said)], {7: pending}).unscheduled == ()
    assert body["status"]["conditions"][0]["reason"] == names.REASON_UNSCHEDULABLE
    assert plan([p], {7: job(7, "RUNNING", nodes="n1")}).unscheduled == ()  # bound instead


def test_group_pods_bind_to_distinct_nodes_keeping_an_annotated_choice() -> None:
    body = job_body([f"{BNS}/a", f"{BNS}/b"])
    a = pod(bridge_pod("a", "G", body, job_id=7))
    b = pod(bridge_pod("b", "G", body, job_id=7, annotations={names.ANNOTATION_SLURM_NODE: "kn1"}))
    actions = plan([a, b], {7: job(7, "RUNNING", nodes="n[1-2]")})
    assert sorted((x.pod.name, x.node) for x in actions.binds) == [("a", "kn2"), ("b", "kn1")]


def test_vector_13_submit_once_per_group_only_for_an_agreed_body() -> None:
    body = job_body([f"{BNS}/a", f"{BNS}/b"])
    a, b = pod(bridge_pod("a", "G", body)), pod(bridge_pod("b", "G", body))
    assert [(s.group, len(s.pods)) for s in plan([a, b], {}).submits] == [("G", 2)]
    stale = pod(bridge_pod("b", "G", job_body([f"{BNS}/b"])))
    assert plan([a, stale], {}).submits == ()  # the hook is mid-change: wait


def test_adoption_instead_of_a_second_submit() -> None:
    p = pod(single("p"))
    live = job(9, "PENDING", pods=(f"{BNS}/p",))
    actions = plan([p], {9: live}, {9: live})
    assert actions.submits == () and [(x.job_id, x.pods[0].name) for x in actions.labels] == [(9, "p")]
    actions = plan([p], {9: None}, {9: live})  # the indexed job is gone by now
    assert len(actions.submits) == 1


def test_vector_16_pending_job_is_updated_when_the_body_changes_running_never() -> None:
    body = job_body([f"{BNS}/p"])
    text = orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
    same = pod(single("p", job_id=7, annotations={names.ANNOTATION_PLACEHOLDER_APPLIED: digest(text)}))
    assert plan([same], {7: job(7, "PENDING")}).updates == ()
    changed = pod(single("p", job_id=7, annotations={names.ANNOTATION_PLACEHOLDER_APPLIED: "old"}))
    assert [u.job_id for u in plan([changed], {7: job(7, "PENDING")}).updates] == [7]
    assert plan([changed], {7: job(7, "RUNNING", nodes="n1")}).updates == ()


def test_vector_17_fewer_mapped_bridge_nodes_than_pods_submits_nothing_and_the_pods_say_why() -> None:
    body = job_body([f"{BNS}/a", f"{BNS}/b", f"{BNS}/c"])
    group = [pod(bridge_pod(n, "G", body)) for n in "abc"]
    actions = plan(group, {}, placeable=frozenset({"kn1", "kn2"}))
    assert actions.submits == ()
    (blocked,) = actions.blocked
    assert [p.name for p in blocked.pods] == ["a", "b", "c"]
    assert blocked.why == (
        "the group needs 3 distinct nodes but only 2 Kubernetes node(s) are bridge nodes mapped to a "
        "Slurm node (kn1, kn2); its job is not submitted"
    )
    assert [e.kind for e in actions.errors] == ["too_few_nodes"] and blocked.why in actions.errors[0]
    assert plan(group, {}, placeable=frozenset({"kn1", "kn2", "kn3"})).submits[0].group == "G"  # enough now
    assert (
        plan([pod(single("p"))], {}, placeable=frozenset())
        .blocked[0]
        .why.startswith("the group needs 1 distinct nodes but only 0")
    )
    # Slurm's node listing failed: nothing new is submitted, and nobody is told anything false
    unknown = plan(group, {}, placeable=None)
    assert (unknown.submits, unknown.blocked, unknown.errors) == ((), (), ())
    # a group that already holds a job is not second-guessed (its job may be running)
    held = [pod(bridge_pod(n, "G", body, job_id=7)) for n in "abc"]
    assert plan(held, {7: job(7, "PENDING")}, placeable=frozenset()).blocked == ()


def test_vector_17_only_bridge_nodes_count_and_labelling_clears_the_reason() -> None:
    plain = read_node({"metadata": {"name": "kube-0", "labels": {}}, "spec": {}})
    external = read_node({"metadata": {"name": "ext", "labels": {names.LABEL_EXTERNAL_NODE: "true"}}, "spec": {}})
    assert (plain.bridge, external.bridge, NODES["kn1"].bridge) == (False, True, True)
    told = pod(single("p", annotations={names.ANNOTATION_SUBMIT_ERROR: "too few nodes"}))
    assert told.submit_error == "too few nodes"
    assert label_body(told, 7, "d")["metadata"]["annotations"] == {
        names.ANNOTATION_PLACEHOLDER_APPLIED: "d",
        names.ANNOTATION_SUBMIT_ERROR: None,
    }


def test_vector_18_pod_groups_whose_live_pods_are_all_bound() -> None:
    a = pod(bridge_pod("a", job_id=7, node_name="kn1", phase="Running", pod_group="pg"))
    b = pod(bridge_pod("b", job_id=7, pod_group="pg"))
    other = pod(bridge_pod("c", job_id=8, node_name="kn2", phase="Running", pod_group="solo"))
    done = pod(bridge_pod("d", job_id=8, phase="Succeeded", pod_group="solo"))  # ended: does not hold it back
    assert scheduled_pod_groups([a, b, other, done], NODES, NOW) == {(BNS, "solo")}
    bound_b = pod(bridge_pod("b", job_id=7, node_name="kn2", phase="Running", pod_group="pg"))
    assert scheduled_pod_groups([a, bound_b], NODES, NOW) == {(BNS, "pg")}
    assert scheduled_pod_groups([pod(single("x", job_id=1, node_name="kn1"))], NODES, NOW) == set()  # no PodGroup


def test_vector_18_condition_body_keeps_other_conditions_and_is_none_once_set() -> None:
    other = {
        "type": "Other",
        "status": "False",
        "reason": "X",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    pg = {"metadata": {"resourceVersion": "11"}, "status": {"conditions": [other]}}
    body = pod_group_scheduled_body(pg, "2026-01-02T03:04:05Z")
    assert body == {
        "metadata": {"resourceVersion": "11"},
        "status": {
            "conditions": [
                other,
                {
                    "type": "PodGroupScheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "message": "every pod of the group is bound to a node Slurm allocated",
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                },
            ]
        },
    }
    assert pod_group_scheduled_body({"metadata": {}, "status": body["status"]}, "later") is None
    unscheduled = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable"}
    assert pod_group_scheduled_body({"metadata": {}, "status": {"conditions": [unscheduled]}}, "t") is not None


@pytest.mark.parametrize("state", [("CANCELLED",), ("SUSPENDED",), ("PENDING", "REQUEUED"), None])
def test_vector_25_bound_pod_of_a_job_not_running_is_deleted(state: tuple[str, ...] | None) -> None:
    bound = pod(single("p", job_id=7, node_name="kn1", phase="Running"))
    unbound = pod(single("q", job_id=7))
    actions = plan([bound, unbound], {7: job(7, *state) if state else None})
    assert [d.pod.name for d in actions.deletes] == ["p"]


def test_vector_25_bound_pod_without_a_job_label_is_deleted() -> None:
    orphan = pod(bridge_pod("p", node_name="kn1", phase="Running"))
    assert plan([orphan], {}).deletes == (DeletePod(orphan, "bound without a Slurm job id label"),)


def test_vector_26_last_terminal_pod_cancels_a_terminating_one_keeps_it() -> None:
    done = pod(single("a", job_id=7, node_name="kn1", phase="Succeeded", finalizers=[names.FINALIZER_SCHEDULER]))
    assert [(c.job_id, c.needed) for c in plan([done], {7: job(7, "RUNNING", nodes="n1")}).cancels] == [(7, True)]
    going = pod(single("b", job_id=7, node_name="kn2", phase="Running"), deletionTimestamp="2026-01-02T03:04:00Z")
    cancels = plan([done, going], {7: job(7, "RUNNING", nodes="n[1-2]")}).cancels
    assert [(c.needed, [p.name for p in c.release]) for c in cancels] == [(False, ["a"])]
    assert [c.needed for c in plan([done], {7: job(7, "CANCELLED")}).cancels] == [False]  # no second cancel


def test_vector_26_terminating_pod_past_its_grace_or_on_a_vanished_node_lets_go() -> None:
    late = pod(single("a", job_id=7, node_name="kn1", phase="Running"), deletionTimestamp="2026-01-02T03:03:00Z")
    assert [c.needed for c in plan([late], {7: job(7, "RUNNING", nodes="n1")}).cancels] == [True]
    lost = pod(single("b", job_id=8, node_name="gone", phase="Running"))
    assert [c.job_id for c in plan([lost], {8: job(8, "RUNNING", nodes="n1")}).cancels] == [8]


def test_vector_27_terminal_pod_is_released_once() -> None:
    done = pod(single("a", job_id=7, phase="Failed", finalizers=["other", names.FINALIZER_SCHEDULER]))
    assert [p.name for p in plan([done], {7: None}).cancels[0].release] == ["a"]
    released = pod(single("a", job_id=7, phase="Failed", finalizers=["other"],
                          annotations={names.ANNOTATION_JOB_RELEASED: "7"}))  # fmt: skip
    assert plan([released], {7: None}).cancels == ()


def test_pending_job_nobody_publishes_any_more_is_cancelled() -> None:
    quiet = pod(bridge_pod("p", job_id=7))
    assert plan([quiet], {7: job(7, "PENDING")}).cancels == (
        Cancel(7, True, (), "no pod publishes the pending job any more"),
    )


def test_vector_28_orphans_are_our_live_jobs_whose_pods_are_all_gone() -> None:
    index = {
        1: job(1, "RUNNING", pods=(f"{BNS}/gone",)),
        2: job(2, "PENDING", pods=(f"{BNS}/here",)),
        3: job(3, "RUNNING", pods=("elsewhere/gone",)),  # not a namespace we manage
        4: job(4, "COMPLETED", pods=(f"{BNS}/gone",)),
        5: job(5, "RUNNING", pods=(f"{BNS}/gone",), external=False),  # not bridge JSON on an external job
        6: parse_job(
            {"job_id": 6, "job_state": ["RUNNING"], "admin_comment": "maintenance", "flags": ["EXTERNAL_JOB"]}
        ),
    }
    assert orphans(index, {f"{BNS}/here"}, frozenset({BNS}), set()) == [1]


# --- nodes ----------------------------------------------------------------------------------


def snode(name: str, *state: str, reason: str = "", **fields: object):
    return parse_node({"name": name, "state": list(state), "reason": reason, **fields})


def test_vector_22_taint_where_the_slurm_node_exists() -> None:
    nodes = [read_node(kube_node("kube-0", taint=True)), read_node(kube_node("bridged-0", taint=True)),
             read_node(kube_node("annotated-1", slurm_name="bridged-1", taint=True))]  # fmt: skip
    slurm = {n: snode(n, "IDLE") for n in ("slurm-0", "bridged-0", "bridged-1")}
    actions = plan_nodes(nodes, slurm, None)
    assert [(t.node.name, t.taints) for t in actions.taints] == [
        ("annotated-1", (OUR_TAINT,)),
        ("bridged-0", (OUR_TAINT,)),
    ]
    other = {"key": "x", "effect": "NoSchedule"}
    untaint = read_node(kube_node("bridged-0", taints=[other, OUR_TAINT]))  # intent gone
    assert [t.taints for t in plan_nodes([untaint], slurm, None).taints] == [(other,)]


@pytest.mark.parametrize(
    ("reason", "undrain"),
    [
        (f"{names.BRIDGE_DRAIN_REASON_PREFIX} cordoned", True),
        (names.BRIDGE_DRAIN_REASON_PREFIX, True),
        # stricter than Slinky (which also lifts an empty reason): nobody can prove a drain
        # without a reason is ours, so an administrator's bare `scontrol update state=drain` stays
        ("", False),
        ("maint", False),
        ("slurm-bridge", False),
        (f" {names.BRIDGE_DRAIN_REASON_PREFIX} x", False),
    ],
)
def test_vector_23_undrain_only_our_drains(reason: str, undrain: bool) -> None:
    node = read_node(kube_node("kn1", slurm_name="n1", taint=True))
    actions = plan_nodes([node], {"n1": snode("n1", "IDLE", "DRAIN", reason=reason)}, None)
    assert actions.slurm == ([SlurmNodeChange("n1", NodeUpdate(state=("UNDRAIN",)))] if undrain else [])
    cordoned = read_node(kube_node("kn1", slurm_name="n1", taint=True, drain="slurm-bridge: x"))
    assert plan_nodes([cordoned], {"n1": snode("n1", "IDLE")}, None).slurm == [
        SlurmNodeChange("n1", NodeUpdate(state=("DRAIN",), reason="slurm-bridge: x"))
    ]


INTENT = {
    "name": "ext1",
    "cpus": 2,
    "real_memory": 512,
    "features": ["p1"],
    "topology": "topo-switch:s1",
    "node_conf": "NodeName=ext1 CPUs=2 RealMemory=512 State=External Feature=p1 Topology=topo-switch:s1",
}


def test_vector_24_registration_lifecycle() -> None:
    node = read_node(kube_node("ext1", taint=True, registration=INTENT))
    assert "could not validate partition(s) p1" in plan_nodes([node], {}, frozenset({"debug"})).errors[0]
    assert plan_nodes([node], {}, frozenset({"p1"})).creates == [CreateNode("ext1", INTENT["node_conf"])]
    same = snode("ext1", "IDLE", "EXTERNAL", cpus=2, real_memory=512, features=["p1"], topology="topo-switch:s1")
    assert plan_nodes([node], {"ext1": same}, frozenset({"p1"})).marks == [MarkRegistered(node, "ext1")]
    bigger = snode("ext1", "IDLE", "EXTERNAL", cpus=4, real_memory=512, features=["p1"], topology="topo-switch:s1")
    assert plan_nodes([node], {"ext1": bigger}, None).slurm[0].update.state == ("DRAIN",)
    drained = snode("ext1", "IDLE", "EXTERNAL", "DRAIN", cpus=4, real_memory=512, reason="slurm-bridge: x")
    assert plan_nodes([node], {"ext1": drained}, None).deletes == [DeleteNode("ext1")]
    gone = read_node(kube_node("ext1", taint=True, registered="ext1"))  # label removed: intent gone
    busy = snode("ext1", "ALLOCATED", "EXTERNAL", "DRAIN", reason="slurm-bridge: x")
    assert plan_nodes([gone], {"ext1": busy}, None).deletes == []  # wait until idle
    assert plan_nodes([gone], {"ext1": drained}, None).deletes == [DeleteNode("ext1")]
    hybrid = snode("ext1", "IDLE", "DRAIN", reason="slurm-bridge: x")
    assert plan_nodes([gone], {"ext1": hybrid}, None).deletes == []  # never delete a non-external node
    # The listing lacking it is no proof: the mark stays until Slurm said, asked by name, it has no such node.
    assert unproven_registered([gone], {}) == frozenset({"ext1"})
    assert plan_nodes([gone], {}, None).marks == []
    assert plan_nodes([gone], {}, None, gone=frozenset({"ext1"})).marks == [MarkRegistered(gone, None)]
    assert unproven_registered([gone], {"ext1": hybrid}) == frozenset()


def test_parse_taint_refuses_other_keys() -> None:
    assert bridge_nodes.parse_taint("other=x:NoExecute") is None
