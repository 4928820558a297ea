"""NodeSet hook scenarios over HTTP: scale, drain before delete, rolling update, DaemonSet mode.

Each step plays Metacontroller (observed children carry uid, owner and last-applied annotation)
and slurm_sync (drained / absent marks and SlurmNodeState* conditions) by hand, then checks what
the hook wants. Every child the hook emits is validated against the Kubernetes schemas.
"""

from __future__ import annotations

import json

import orjson
import pytest

from slinky_common import names
from tests.hooks.nodeset.builders import (
    children,
    condition,
    controller_cr,
    draining,
    node,
    nodeset,
    observed,
    post,
    reported,
    request,
    sync,
)
from tests.hooks.nodeset.fixtures import READY_AT
from tests.support.kube import validate_builtin


def observe_all(resp: dict, **state) -> list[dict]:
    return [observed(p, **state) for p in children(resp).values()]


# --- scale out, scale in, drain before delete ---------------------------------------------------


def test_scale_zero_to_three_to_one_keeps_the_busy_pod_until_its_node_is_gone(client):
    first = sync(client, request(nodeset(replicas=0)))
    assert children(first) == {} and first["status"]["replicas"] == 0

    up = sync(client, request(nodeset(replicas=3)))
    assert sorted(children(up)) == ["gpu-0", "gpu-1", "gpu-2"]
    assert draining(up) == {} and "resyncAfterSeconds" not in up
    pods = {p["metadata"]["name"]: p for p in children(up).values()}
    running = [observed(pods["gpu-0"]), observed(pods["gpu-1"]), observed(pods["gpu-2"], slurm=("Allocated",))]

    down = sync(client, request(nodeset(replicas=1), pods=running))
    # Nothing is deleted yet: both victims stay desired while the drain intent is published.
    assert sorted(children(down)) == ["gpu-0", "gpu-1", "gpu-2"]
    assert draining(down) == {"gpu-1": "scale-in to 1 replicas", "gpu-2": "scale-in to 1 replicas"}
    assert down["resyncAfterSeconds"] == 10
    assert condition(down, names.CONDITION_PODS_DRAINING)["status"] == "True"

    # slurm_sync drained gpu-1 (idle); gpu-2 still runs a job, so it is only draining.
    status = down["status"]
    step = [
        running[0],
        observed(pods["gpu-1"], slurm=("Idle", "Drain"), drained=True),
        observed(pods["gpu-2"], slurm=("Allocated", "Drain")),
    ]
    after = sync(client, request(nodeset(status=status, replicas=1), pods=step))
    # A scaled-in pod's Slurm node record goes first (slurm_sync deletes it): drained is not enough.
    assert sorted(children(after)) == ["gpu-0", "gpu-1", "gpu-2"]
    assert all(i[names.DRAIN_DELETE_NODE] is True for i in after["status"][names.STATUS_DRAINING_PODS])
    step[1] = observed(pods["gpu-1"], slurm=(), absent=True)
    after = sync(client, request(nodeset(status=status, replicas=1), pods=step))
    assert sorted(children(after)) == ["gpu-0", "gpu-2"]
    assert set(draining(after)) == {"gpu-1", "gpu-2"}

    # A drained mark that contradicts a busy Slurm state is not believed.
    stale = [running[0], observed(pods["gpu-2"], slurm=("Allocated", "Drain"), drained=True)]
    assert sorted(children(sync(client, request(nodeset(status=status, replicas=1), pods=stale)))) == ["gpu-0", "gpu-2"]

    done = [running[0], observed(pods["gpu-2"], slurm=(), absent=True)]
    final = sync(client, request(nodeset(status=after["status"], replicas=1), pods=done))
    assert sorted(children(final)) == ["gpu-0"]

    settled = sync(client, request(nodeset(status=final["status"], replicas=1), pods=[running[0]]))
    assert sorted(children(settled)) == ["gpu-0"] and draining(settled) == {}
    assert "resyncAfterSeconds" not in settled
    assert settled["status"]["replicas"] == 1 and settled["status"]["slurmIdle"] == 1


def test_a_pod_without_slurm_node_goes_only_when_slurm_sync_says_so(client):
    up = sync(client, request(nodeset(replicas=2)))
    pods = children(up)
    unmarked = [observed(pods["gpu-0"]), observed(pods["gpu-1"], slurm=())]
    assert sorted(children(sync(client, request(nodeset(replicas=1), pods=unmarked)))) == ["gpu-0", "gpu-1"]
    absent = [observed(pods["gpu-0"]), observed(pods["gpu-1"], slurm=(), absent=True)]
    assert sorted(children(sync(client, request(nodeset(replicas=1), pods=absent)))) == ["gpu-0"]


def test_a_drained_pod_that_is_not_condemned_is_kept(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    marked = [observed(p, slurm=("Idle", "Drain"), drained=True) for p in pods.values()]
    resp = sync(client, request(nodeset(replicas=2), pods=marked))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"] and draining(resp) == {}


def test_scale_out_fills_the_lowest_free_ordinals(client):
    pods = children(sync(client, request(nodeset(replicas=4))))
    kept = [observed(pods["gpu-1"]), observed(pods["gpu-3"])]
    resp = sync(client, request(nodeset(replicas=4), pods=kept))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    resp = sync(client, request(nodeset(replicas=3), pods=kept))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-3"]


def test_ordinal_padding_names_pods_and_their_index_label(client):
    resp = sync(client, request(nodeset(replicas=2, ordinalPadding=3)))
    pod = children(resp)["gpu-001"]
    assert pod["metadata"]["labels"][names.LABEL_NODESET_POD_INDEX] == "001"
    assert pod["spec"]["hostname"] == "gpu-001"


def test_scale_to_zero_drains_then_removes_every_pod(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    zero = sync(client, request(nodeset(replicas=0), pods=[observed(p) for p in pods.values()]))
    assert sorted(children(zero)) == ["gpu-0", "gpu-1"]
    assert draining(zero) == {"gpu-0": "scale-in to 0 replicas", "gpu-1": "scale-in to 0 replicas"}
    marked = [observed(p, slurm=(), absent=True) for p in pods.values()]
    gone = sync(client, request(nodeset(status=zero["status"], replicas=0), pods=marked))
    assert children(gone) == {} and gone["status"]["desired"] == 0


def test_failed_pods_are_drained_and_replaced_under_their_own_name(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), observed(pods["gpu-1"], phase="Failed", ready=False, slurm=("Down",))]
    resp = sync(client, request(nodeset(replicas=2), pods=state))
    assert draining(resp) == {"gpu-1": "pod finished; replacing it"} and sorted(children(resp)) == ["gpu-0", "gpu-1"]
    state[1] = observed(pods["gpu-1"], phase="Failed", ready=False, slurm=("Down", "Drain"), drained=True)
    assert sorted(children(sync(client, request(nodeset(replicas=2), pods=state)))) == ["gpu-0"]
    recreated = sync(client, request(nodeset(replicas=2), pods=state[:1]))
    assert sorted(children(recreated)) == ["gpu-0", "gpu-1"]


def test_victim_order_prefers_not_ready_then_deletion_cost_then_cordon(client):
    pods = children(sync(client, request(nodeset(replicas=3))))
    state = [observed(pods["gpu-0"], ready=False), observed(pods["gpu-1"]), observed(pods["gpu-2"])]
    assert set(draining(sync(client, request(nodeset(replicas=2), pods=state)))) == {"gpu-0"}
    cheap = observed(pods["gpu-1"])
    cheap["metadata"]["annotations"][names.ANNOTATION_POD_DELETION_COST] = "-5"
    state = [observed(pods["gpu-0"]), cheap, observed(pods["gpu-2"])]
    assert set(draining(sync(client, request(nodeset(replicas=2), pods=state)))) == {"gpu-1"}
    cordoned = observed(pods["gpu-0"])
    cordoned["metadata"]["annotations"][names.ANNOTATION_POD_CORDON] = "true"
    state = [cordoned, observed(pods["gpu-1"]), observed(pods["gpu-2"])]
    assert set(draining(sync(client, request(nodeset(replicas=2), pods=state)))) == {"gpu-0"}
    asked = observed(pods["gpu-1"])  # a health checker's pod-cordon-requested counts as a cordon too
    asked["metadata"]["annotations"][names.ANNOTATION_POD_CORDON_REQUESTED] = "true"
    state = [observed(pods["gpu-0"]), asked, observed(pods["gpu-2"])]
    assert set(draining(sync(client, request(nodeset(replicas=2), pods=state)))) == {"gpu-1"}


def test_a_chosen_victim_stays_chosen_across_syncs(client):
    pods = children(sync(client, request(nodeset(replicas=3))))
    state = [observed(p) for p in pods.values()]
    first = sync(client, request(nodeset(replicas=2), pods=state))
    assert set(draining(first)) == {"gpu-2"}
    # Same state, intent published: the same victim, not a fresh choice.
    again = sync(client, request(nodeset(status=first["status"], replicas=2), pods=state))
    assert set(draining(again)) == {"gpu-2"}
    # A pod listed as draining (e.g. gpu-0 after a restart of slurm_sync) keeps precedence over ordinals.
    status = {**first["status"], names.STATUS_DRAINING_PODS: [{"name": "gpu-0", "reason": "scale-in to 2 replicas"}]}
    assert set(draining(sync(client, request(nodeset(status=status, replicas=2), pods=state)))) == {"gpu-0"}


# --- rolling update -----------------------------------------------------------------------------


def test_rolling_update_with_half_unavailable_condemns_exactly_one_more_old_pod(client):
    old = children(sync(client, request(nodeset(replicas=4, slurmd={"image": "slurmd:1"}))))
    spec = {
        "replicas": 4,
        "slurmd": {"image": "slurmd:2"},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}},
    }
    # pod-0 was already replaced and its new pod is not ready yet; pods 1-3 are old and ready.
    new0 = children(sync(client, request(nodeset(**spec), pods=[observed(old[f"gpu-{i}"]) for i in (1, 2, 3)])))[
        "gpu-0"
    ]
    revision = new0["metadata"]["labels"][names.LABEL_NODESET_REVISION]
    assert old["gpu-1"]["metadata"]["labels"][names.LABEL_NODESET_REVISION] != revision
    state = [observed(new0, ready=False), *(observed(old[f"gpu-{i}"]) for i in (1, 2, 3))]
    resp = sync(client, request(nodeset(**spec), pods=state))
    assert draining(resp) == {"gpu-3": f"rolling update to revision {revision}"}
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert resp["status"]["nodeSetHash"] == revision and resp["status"]["updatedReplicas"] == 1
    # Kept old pods are returned exactly as last applied (pods are never changed in place).
    assert children(resp)["gpu-1"] == old["gpu-1"]

    state[0] = observed(new0)
    ready = sync(client, request(nodeset(status=resp["status"], **spec), pods=state))
    assert set(draining(ready)) == {"gpu-2", "gpu-3"}


def test_rolling_update_condemns_unhealthy_old_pods_outside_the_budget(client):
    old = children(sync(client, request(nodeset(replicas=4, slurmd={"image": "slurmd:1"}))))
    spec = {"replicas": 4, "slurmd": {"image": "slurmd:2"}, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}}
    state = [observed(old["gpu-0"], ready=False), *(observed(old[f"gpu-{i}"]) for i in (1, 2, 3))]
    assert set(draining(sync(client, request(nodeset(**spec), pods=state)))) == {"gpu-0"}
    healthy = [observed(p) for p in old.values()]
    assert set(draining(sync(client, request(nodeset(**spec), pods=healthy)))) == {"gpu-3"}


def test_on_delete_leaves_old_pods_alone(client):
    old = children(sync(client, request(nodeset(replicas=2, slurmd={"image": "slurmd:1"}))))
    spec = {"replicas": 2, "slurmd": {"image": "slurmd:2"}, "updateStrategy": {"type": "OnDelete"}}
    resp = sync(client, request(nodeset(**spec), pods=[observed(p) for p in old.values()]))
    assert draining(resp) == {} and children(resp) == old
    # A pod the user deleted comes back from the new template.
    resp = sync(client, request(nodeset(**spec), pods=[observed(old["gpu-0"])]))
    assert children(resp)["gpu-1"]["spec"]["containers"][0]["image"] == "slurmd:2"


def test_min_ready_seconds_counts_availability_by_the_clock_and_calls_back_when_it_is_reached(client, clock):
    pods = children(sync(client, request(nodeset(replicas=1))))
    pod = observed(pods["gpu-0"])  # Ready since READY_AT
    body = request(nodeset(replicas=1, minReadySeconds=90), pods=[pod])
    clock.now = READY_AT + 10
    early = sync(client, body)
    assert early["status"]["availableReplicas"] == 0 and early["status"]["unavailableReplicas"] == 1
    assert early["resyncAfterSeconds"] == 80, "Metacontroller is asked back exactly when the pod becomes available"
    # A plain resync of the same request before the threshold: same status, the wait counts down.
    clock.now = READY_AT + 89.5
    later = sync(client, body)
    assert later["status"] == early["status"] and later["children"] == early["children"]
    assert later["resyncAfterSeconds"] == 1
    clock.now = READY_AT + 90
    reached = sync(client, body)
    assert reached["status"]["availableReplicas"] == 1 and "resyncAfterSeconds" not in reached


def test_rolling_update_with_min_ready_seconds_advances_on_a_plain_resync(client, clock):
    """The new pod's readiness ages with the clock, not with the request: the rollout cannot stall."""
    old = children(sync(client, request(nodeset(replicas=2, slurmd={"image": "slurmd:1"}))))
    spec = {
        "replicas": 2,
        "minReadySeconds": 120,
        "slurmd": {"image": "slurmd:2"},
        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}},
    }
    new0 = children(sync(client, request(nodeset(**spec), pods=[observed(old["gpu-1"])])))["gpu-0"]
    body = request(nodeset(**spec), pods=[observed(new0), observed(old["gpu-1"])])
    clock.now = READY_AT + 30
    waiting = sync(client, body)
    assert draining(waiting) == {} and waiting["resyncAfterSeconds"] == 90
    clock.now = READY_AT + 120
    assert set(draining(sync(client, body))) == {"gpu-1"}


def test_the_clock_is_read_only_when_min_ready_seconds_is_set(client, clock):
    pods = children(sync(client, request(nodeset(replicas=2))))
    sync(client, request(nodeset(replicas=2), pods=[observed(p) for p in pods.values()]))
    assert clock.reads == 0
    sync(client, request(nodeset(replicas=2, minReadySeconds=5), pods=[observed(p) for p in pods.values()]))
    assert clock.reads == 1


# --- DaemonSet mode -----------------------------------------------------------------------------


def test_daemonset_mode_follows_matching_nodes_as_they_come_and_go(client):
    spec = {"scalingMode": "DaemonSet", "template": {"spec": {"nodeSelector": {"slurm": "yes"}}}}
    fleet = [
        node("node-a", {"slurm": "yes"}),
        node("node-b.example.com", {"slurm": "yes"}),
        node("node-c", {"slurm": "no"}),
        node("node-d", {"slurm": "yes"}, taints=[{"key": "gpu", "effect": "NoSchedule"}]),
        node("node-e", {"slurm": "yes"}, annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "slinky-e"}),
    ]
    resp = sync(client, request(nodeset(**spec), nodes=fleet))
    pods = children(resp)
    assert sorted(pods) == ["gpu-node-a", "gpu-node-b", "gpu-slinky-e"]
    assert resp["status"]["desired"] == 3
    pin = pods["gpu-node-b"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pin["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b.example.com"]}]}
    ]
    assert pods["gpu-slinky-e"]["spec"]["hostname"] == "slinky-e"
    assert pods["gpu-node-a"]["metadata"]["labels"][names.LABEL_NODESET_SCALING_MODE] == "DaemonSet"
    assert names.LABEL_NODESET_POD_INDEX not in pods["gpu-node-a"]["metadata"]["labels"]

    running = [
        observed(pods["gpu-node-a"], node_name="node-a"),
        observed(pods["gpu-node-b"], node_name="node-b.example.com"),
    ]
    running.append(observed(pods["gpu-slinky-e"], node_name="node-e"))
    # node-b leaves, node-f joins, node-e is cordoned (its pod stays: cordon means drain in Slurm).
    later = [
        fleet[0],
        node(
            "node-e", {"slurm": "yes"}, unschedulable=True, annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "slinky-e"}
        ),
    ]
    later.append(node("node-f", {"slurm": "yes"}))
    resp = sync(client, request(nodeset(**spec), pods=running, nodes=later))
    assert sorted(children(resp)) == ["gpu-node-a", "gpu-node-b", "gpu-node-f", "gpu-slinky-e"]
    assert draining(resp) == {"gpu-node-b": "node node-b.example.com is gone"}
    # node-a loses the label: its pod is drained too; node-b's pod is gone once drained.
    running[1] = observed(pods["gpu-node-b"], node_name="node-b.example.com", slurm=("Down", "Drain"), drained=True)
    later[0] = node("node-a", {"slurm": "no"})
    resp = sync(client, request(nodeset(**spec), pods=running, nodes=later))
    assert sorted(children(resp)) == ["gpu-node-a", "gpu-node-f", "gpu-slinky-e"]
    assert draining(resp)["gpu-node-a"] == "node node-a no longer matches the NodeSet"


def test_daemonset_mode_without_any_node_listed_condemns_nothing(client):
    spec = {"scalingMode": "DaemonSet"}
    pods = children(sync(client, request(nodeset(**spec), nodes=[node("node-a")])))
    resp = sync(client, request(nodeset(**spec), pods=[observed(p) for p in pods.values()], nodes=[]))
    assert draining(resp) == {} and sorted(children(resp)) == ["gpu-node-a"]


def test_switching_scaling_mode_condemns_the_other_mode_pods(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    resp = sync(
        client, request(nodeset(scalingMode="DaemonSet"), pods=[observed(pods["gpu-0"])], nodes=[node("node-a")])
    )
    assert draining(resp) == {"gpu-0": "scaling mode changed to DaemonSet"}
    assert sorted(children(resp)) == ["gpu-0", "gpu-node-a"]


def test_daemonset_toleration_and_required_affinity_decide_placement(client):
    spec = {
        "scalingMode": "DaemonSet",
        "template": {
            "spec": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                            ]
                        }
                    }
                },
            }
        },
    }
    fleet = [
        node("node-a", {"zone": "z1"}, taints=[{"key": "gpu", "effect": "NoSchedule"}]),
        node("node-b", {"zone": "z2"}),
        node("node-c", {"zone": "z1"}, taints=[{"key": "maint", "effect": "NoExecute"}]),
    ]
    pods = children(sync(client, request(nodeset(**spec), nodes=fleet)))
    assert sorted(pods) == ["gpu-node-a"]
    terms = pods["gpu-node-a"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}],
        }
    ]
    tolerations = pods["gpu-node-a"]["spec"]["tolerations"]
    assert {"key": names.TAINT_NODESET_WORKER, "operator": "Equal", "effect": "NoExecute"} in tolerations


# --- finalize -----------------------------------------------------------------------------------


def test_deleting_the_nodeset_drains_every_pod_before_finalizing(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), observed(pods["gpu-1"], slurm=("Allocated",))]
    resp = post(client, "/nodeset/finalize", request(nodeset(replicas=2), pods=state, finalizing=True))
    assert resp["finalized"] is False and sorted(children(resp)) == ["gpu-0", "gpu-1"]
    assert draining(resp) == {"gpu-0": "NodeSet deleted", "gpu-1": "NodeSet deleted"}
    assert resp["resyncAfterSeconds"] == 10
    state[0] = observed(pods["gpu-0"], slurm=("Idle", "Drain"), drained=True)
    resp = post(client, "/nodeset/finalize", request(nodeset(replicas=2), pods=state, finalizing=True))
    assert resp["finalized"] is False and sorted(children(resp)) == ["gpu-1"]
    state[1] = observed(pods["gpu-1"], slurm=("Idle", "Drain"), drained=True)
    resp = post(client, "/nodeset/finalize", request(nodeset(replicas=2), pods=state, finalizing=True))
    assert resp["finalized"] is False and children(resp) == {}
    resp = post(client, "/nodeset/finalize", request(nodeset(replicas=2), finalizing=True))
    assert resp["finalized"] is False
    assert condition(resp, names.CONDITION_DELETION_BLOCKED)["reason"] == "WaitingForReport"
    resp = post(client, "/nodeset/finalize", request(reported(nodeset(replicas=2)), finalizing=True))
    assert resp["finalized"] is True and resp["children"] == []


def test_finalize_without_the_controller_releases_idle_pods_at_once(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    resp = post(
        client,
        "/nodeset/finalize",
        request(nodeset(replicas=1), pods=[observed(pods["gpu-0"])], controller=None, finalizing=True),
    )
    assert resp["finalized"] is True and resp["children"] == []
    deleting = controller_cr()
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    resp = post(
        client,
        "/nodeset/finalize",
        request(nodeset(replicas=1), pods=[observed(pods["gpu-0"])], controller=deleting, finalizing=True),
    )
    assert resp["finalized"] is True


# --- bad input ----------------------------------------------------------------------------------


def test_foreign_pods_are_kept_reported_and_not_counted(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    foreign = observed(pods["gpu-0"])
    foreign["metadata"]["name"] = "gpu-7"
    foreign["metadata"]["labels"][names.LABEL_INSTANCE] = "cpu"
    del foreign["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]
    resp = sync(client, request(nodeset(replicas=1), pods=[observed(pods["gpu-0"]), foreign]))
    assert sorted(children(resp)) == ["gpu-0", "gpu-7"] and draining(resp) == {}
    kept = children(resp)["gpu-7"]
    assert "uid" not in kept["metadata"] and "status" not in kept and "resourceVersion" not in kept["metadata"]
    assert condition(resp, names.CONDITION_UNEXPECTED_PODS)["status"] == "True"
    assert "gpu-7" in condition(resp, names.CONDITION_UNEXPECTED_PODS)["message"]
    assert resp["status"]["replicas"] == 1


def test_pods_without_status_or_with_unknown_phase_are_never_dropped(client):
    pods = children(sync(client, request(nodeset(replicas=3))))
    weird = [
        observed(pods["gpu-0"], phase=None, node_name=None),
        observed(pods["gpu-1"], phase="Exploded"),
        observed(pods["gpu-2"]),
    ]
    resp = sync(client, request(nodeset(replicas=1), pods=weird))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-2"]
    # The pod without status (unassigned, phase unknown) is the cheapest victim.
    assert set(draining(resp)) == {"gpu-0", "gpu-1"}


def test_duplicate_ordinals_keep_both_and_condemn_the_extra(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    twin = observed(pods["gpu-0"])
    twin["metadata"]["name"] = "gpu-00"
    del twin["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]
    resp = sync(client, request(nodeset(replicas=1), pods=[observed(pods["gpu-0"]), twin]))
    assert sorted(children(resp)) == ["gpu-0", "gpu-00"]
    assert draining(resp) == {"gpu-00": "duplicate of ordinal 0"}
    assert "gpu-00" in condition(resp, names.CONDITION_UNEXPECTED_PODS)["message"]


def test_missing_controller_keeps_every_child_and_creates_nothing(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    parent = nodeset(
        replicas=3, status={names.STATUS_DRAINING_PODS: [{"name": "gpu-0", "reason": "scale-in to 0 replicas"}]}
    )
    marked = observed(pods["gpu-0"], slurm=("Idle", "Drain"), drained=True)
    resp = sync(client, request(parent, pods=[marked], controller=None))
    assert list(children(resp)) == ["gpu-0"] and children(resp)["gpu-0"] == pods["gpu-0"]
    assert draining(resp) == {"gpu-0": "scale-in to 0 replicas"}
    cond = condition(resp, names.CONDITION_CONTROLLER_RESOLVED)
    assert cond["status"] == "False" and cond["reason"] == "ControllerNotFound"


INVALID = [
    ({"replicas": -1}, "spec.replicas"),
    ({"replicas": "3"}, "spec.replicas"),
    ({"scalingMode": "Deployment"}, "spec.scalingMode"),
    (
        {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}},
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    (
        {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "half"}}},
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    ({"updateStrategy": {"type": "Sometimes"}}, "spec.updateStrategy.type"),
    ({"controllerRef": {}}, "spec.controllerRef.name"),
    ({"ssh": {"enabled": True}}, "spec.ssh.sssdConfRef.name"),
    ({"volumeClaimTemplates": [{"spec": {}}]}, "spec.volumeClaimTemplates[0].metadata.name"),
    ({"template": {"spec": {"tolerations": {}}}}, "spec.template.spec.tolerations"),
    ({"ordinalPadding": 99}, "spec.ordinalPadding"),
    (
        {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep"}},
        "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
    ),
]
CLAIM = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def invalid_parent(spec: dict, status: dict | None = None) -> dict:
    parent = nodeset(status=status, replicas=2, volumeClaimTemplates=[CLAIM])
    parent["spec"].update(spec)
    return parent


def running_nodeset(client) -> tuple[dict, list[dict], list[dict]]:
    """A 2-pod NodeSet with PVCs as Metacontroller shows it, gpu-1 draining for a scale-in."""
    first = sync(client, request(nodeset(replicas=2, volumeClaimTemplates=[CLAIM])))
    pods = [observed(p) for p in children(first).values()]
    pvcs = [observed(c) for c in children(first, "PersistentVolumeClaim").values()]
    down = sync(client, request(nodeset(replicas=1, volumeClaimTemplates=[CLAIM]), pods=pods, pvcs=pvcs))
    assert draining(down) == {"gpu-1": "scale-in to 1 replicas"}
    return down["status"], pods, pvcs


@pytest.mark.parametrize(("spec", "field"), INVALID)
def test_invalid_spec_keeps_every_child_and_the_status_and_names_the_field(client, spec, field):
    status, pods, pvcs = running_nodeset(client)
    # gpu-1's Slurm node is gone meanwhile: with the spec unusable, nothing is deleted all the same.
    applied = json.loads(pods[1]["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED])
    pods[1] = observed(applied, slurm=(), absent=True)
    resp = post(client, "/nodeset/sync", request(invalid_parent(spec, status), pods=pods, pvcs=pvcs), nodeset())
    last_applied = {
        json.loads(c["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED])["metadata"]["name"]: c
        for c in pods + pvcs
    }
    assert {c["metadata"]["name"] for c in resp["children"]} == set(last_applied)
    for child in resp["children"]:
        assert child == json.loads(
            last_applied[child["metadata"]["name"]]["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]
        )
    invalid = condition(resp, names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and field in invalid["message"]
    assert draining(resp) == {"gpu-1": "scale-in to 1 replicas"}, "drains in flight stay published"
    assert {k: v for k, v in resp["status"].items() if k != "conditions"} == {
        k: v for k, v in status.items() if k != "conditions"
    }
    assert resp["resyncAfterSeconds"] == 30
    # Fixed: the condition goes, the pod whose Slurm node is gone goes.
    fixed = sync(
        client, request(nodeset(status=resp["status"], replicas=1, volumeClaimTemplates=[CLAIM]), pods=pods, pvcs=pvcs)
    )
    assert names.CONDITION_INVALID_SPEC not in {c["type"] for c in fixed["status"]["conditions"]}
    assert sorted(children(fixed)) == ["gpu-0"]


@pytest.mark.parametrize(("spec", "field"), INVALID)
def test_customize_with_an_invalid_spec_asks_for_what_the_valid_fields_name(client, spec, field):
    parent = invalid_parent({**spec, "scalingMode": spec.get("scalingMode", "DaemonSet")})
    resp = post(client, "/nodeset/customize", {"controller": {}, "parent": parent}, nodeset())
    resources = [r["resource"] for r in resp["relatedResources"]]
    assert ("controllers" in resources) == (field != "spec.controllerRef.name")
    assert ("nodes" in resources) == (field not in ("spec.scalingMode", "spec.template.spec.tolerations"))


@pytest.mark.parametrize(("spec", "field"), INVALID)
def test_finalize_with_an_invalid_spec_still_drains_and_deletes(client, spec, field):
    status, pods, pvcs = running_nodeset(client)
    parent = invalid_parent(spec, status)
    resp = post(client, "/nodeset/finalize", request(parent, pods=pods, pvcs=pvcs, finalizing=True), nodeset())
    assert field in condition(resp, names.CONDITION_INVALID_SPEC)["message"]
    if field == "spec.controllerRef.name":  # no Controller can be found: nothing to drain through
        assert children(resp) == {} and resp["finalized"] is False
        message = condition(resp, names.CONDITION_INVALID_SPEC)["message"]
        assert "released" in message and "drained before" not in message, message
        assert sorted(children(resp, "PersistentVolumeClaim")) == ["data-gpu-0", "data-gpu-1"], (
            "whenDeleted defaults to Retain"
        )
        return
    assert draining(resp) == {"gpu-0": "NodeSet deleted", "gpu-1": "NodeSet deleted"} and resp["finalized"] is False
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"] and sorted(children(resp, "PersistentVolumeClaim")) == [
        "data-gpu-0",
        "data-gpu-1",
    ]
    drained = [
        observed(
            json.loads(p["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]),
            slurm=("Idle", "Drain"),
            drained=True,
        )
        for p in pods
    ]
    resp = post(
        client,
        "/nodeset/finalize",
        request(invalid_parent(spec, resp["status"]), pods=drained, pvcs=pvcs, finalizing=True),
        nodeset(),
    )
    assert children(resp) == {} and resp["finalized"] is False
    # whenDeleted is read leniently: only an explicit Delete deletes; otherwise the PVCs wait for slurm_sync.
    assert sorted(children(resp, "PersistentVolumeClaim")) == ["data-gpu-0", "data-gpu-1"]
    clear = reported(invalid_parent(spec, resp["status"]))
    resp = post(client, "/nodeset/finalize", request(clear, finalizing=True), nodeset())
    assert resp["finalized"] is True and resp["children"] == []


def test_a_request_that_is_not_a_hook_request_is_still_a_400(client):
    body = request(nodeset(replicas=1))
    body["children"] = ["not", "a", "map"]
    resp = client.post("/nodeset/sync", data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 400 and "children" in resp.get_json()["error"]
    del body["parent"]["metadata"]["name"]
    resp = client.post(
        "/nodeset/finalize", data=orjson.dumps({**body, "children": {}}), content_type="application/json"
    )
    assert resp.status_code == 400


# --- names --------------------------------------------------------------------------------------


def named(name: str, **spec) -> dict:
    parent = nodeset(**spec)
    parent["metadata"]["name"] = name
    return parent


def long_request(parent: dict, **kwargs) -> dict:
    body = request(parent, **kwargs)
    body["controller"] = {}
    return body


def post_unvalidated(client, path: str, body: dict) -> dict:
    """For parents the CRD itself would refuse (names over its bound): the hook must still answer sanely."""
    resp = client.post(path, data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    for child in resp.get_json()["children"]:
        assert validate_builtin(child) == [], child["metadata"]["name"]
    return resp.get_json()


def test_pod_names_and_hostnames_stay_within_63_characters(client):
    name = "n" * 61  # "<name>-9" is 63 characters, "<name>-10" would be 64
    ok = post_unvalidated(client, "/nodeset/sync", request(named(name, replicas=10)))
    assert len(children(ok)) == 10 and names.CONDITION_INVALID_SPEC not in {
        c["type"] for c in ok["status"]["conditions"]
    }
    over = post_unvalidated(client, "/nodeset/sync", request(named(name, replicas=11)))
    assert children(over) == {}
    message = condition(over, names.CONDITION_INVALID_SPEC)["message"]
    assert "metadata.name" in message and f"{name}-10" in message
    too_long = post_unvalidated(client, "/nodeset/sync", request(named("n" * 64, replicas=1)))
    assert "metadata.name" in condition(too_long, names.CONDITION_INVALID_SPEC)["message"]
    upper = sync(client, request(nodeset(replicas=1, template={"spec": {"hostname": "GPU-"}})))
    assert (
        children(upper) == {}
        and "spec.template.spec.hostname" in condition(upper, names.CONDITION_INVALID_SPEC)["message"]
    )


def test_a_daemonset_pod_name_over_63_characters_is_reported_not_sent(client):
    long_node = "k" * 60
    resp = sync(client, request(nodeset(scalingMode="DaemonSet"), nodes=[node(long_node)]))
    assert children(resp) == {}
    message = condition(resp, names.CONDITION_INVALID_SPEC)["message"]
    assert long_node in message and names.ANNOTATION_HOSTNAME_OVERRIDE in message
    short = node(long_node, annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "k1"})
    assert sorted(children(sync(client, request(nodeset(scalingMode="DaemonSet"), nodes=[short])))) == ["gpu-k1"]


# --- determinism and fixed point ----------------------------------------------------------------


@pytest.mark.parametrize("min_ready", [0, 600])
def test_same_request_gives_the_same_bytes(client, min_ready):
    """With minReadySeconds the clock is read, and pinned here: same request, same instant, same bytes."""
    pods = children(sync(client, request(nodeset(replicas=3))))
    body = orjson.dumps(
        request(nodeset(replicas=2, minReadySeconds=min_ready), pods=[observed(p) for p in pods.values()])
    )
    answers = {client.post("/nodeset/sync", data=body, content_type="application/json").data for _ in range(3)}
    assert len(answers) == 1


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": 3},
        {
            "replicas": 2,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        },
        {"replicas": 2, "ssh": {"enabled": True, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}},
        {"scalingMode": "DaemonSet"},
        {"replicas": 2, "minReadySeconds": 30, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}},
    ],
)
def test_desired_fed_back_as_observed_is_a_fixed_point(client, spec):
    fleet = [node("node-a"), node("node-b")]
    first = sync(client, request(nodeset(**spec), nodes=fleet))
    kinds = {"Pod": [], "PersistentVolumeClaim": [], "ConfigMap": []}
    for child in first["children"]:
        kinds[child["kind"]].append(observed(child))
    second = sync(
        client,
        request(
            nodeset(status=first["status"], **spec),
            pods=kinds["Pod"],
            pvcs=kinds["PersistentVolumeClaim"],
            configmaps=kinds["ConfigMap"],
            nodes=fleet,
        ),
    )
    assert second["children"] == first["children"]
    assert second["status"][names.STATUS_DRAINING_PODS] == []
