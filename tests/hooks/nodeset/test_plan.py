"""Planning a NodeSet's worker pods (hooks/nodeset/plan.py): which to create, which to condemn and why, which to
report; a plan never drops a pod itself (docs/architecture.md §4.1)."""

from __future__ import annotations

from typing import Any

import pytest

from hooks.nodeset.observe import ObservedPod, format_time, observe_pod
from hooks.nodeset.plan import (
    Context,
    Plan,
    plan_daemonset,
    plan_finalize,
    plan_hold,
    plan_statefulset,
    scaled_max_unavailable,
)
from hooks.nodeset.pods import PodSlot
from hooks.nodeset.scheduling import Fit
from hooks.nodeset.spec import NodeSetSpec, parse_nodeset
from slinky_common import names, slurmstate
from tests.hooks.nodeset.fixtures import READY_AT, T0

READY = READY_AT  # the pods' Ready transition
UID = "uid-gpu"
NEW, OLD = "new", "old"


def spec(**fields: Any) -> NodeSetSpec:
    return parse_nodeset(
        {"metadata": {"name": "gpu", "namespace": "slurm"}, "spec": {"controllerRef": {"name": "slurm"}, **fields}}
    )


def ctx(
    draining: frozenset[str] = frozenset(),
    now: float | None = T0,
    maintenance: frozenset[str] = frozenset(),
    **fields: Any,
) -> Context:
    return Context(spec=spec(**fields), revision=NEW, draining=draining, now=now, maintenance=maintenance)


def pod(
    name: str,
    *,
    revision: str = NEW,
    slurm: tuple[str, ...] = ("IDLE",),
    phase: str = "Running",
    ready: bool = True,
    node: str | None = "node-a",
    hostname: str | None = None,
    mode: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    terminating: bool = False,
) -> ObservedPod:
    """A NodeSet `gpu` worker pod as observed (Ready since READY), with slurm_sync's state conditions."""
    pod_labels = {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: "gpu", names.LABEL_NODESET_REVISION: revision}
    if hostname is not None:
        pod_labels[names.LABEL_NODESET_POD_HOSTNAME] = hostname
    if mode is not None:
        pod_labels[names.LABEL_NODESET_SCALING_MODE] = mode
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "slurm",
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {**pod_labels, **(labels or {})},
        "annotations": dict(annotations or {}),
    }
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    conditions: list[dict[str, Any]] = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": format_time(READY)}
    ]
    conditions += [{"type": slurmstate.condition_type(s), "status": "True"} for s in slurm]
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": conditions},
    }
    return observe_pod(obj, "gpu", UID)


def pods(*ordinals: int, **state: Any) -> list[ObservedPod]:
    return [pod(f"gpu-{i}", **state) for i in ordinals]


def created(plan: Plan) -> list[str]:
    return [slot.name for slot in plan.create]


def kube_node(
    name: str, taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
    if annotations:
        node["metadata"]["annotations"] = annotations
    if taints:
        node["spec"] = {"taints": taints}
    return node


# --- Plan ----------------------------------------------------------------------------------------


def test_condemn_keeps_the_first_reason_and_skips_terminating_pods() -> None:
    plan = Plan()
    plan.condemn([pod("gpu-0"), pod("gpu-1", terminating=True)], "first", delete_node=True)
    plan.condemn([pod("gpu-0")], "second")
    assert plan.condemned == {"gpu-0": "first"}
    assert plan.delete_node == {"gpu-0"}


def test_a_stale_registration_asks_for_the_record_to_go_first() -> None:
    def registered(name: str, value: str | None) -> ObservedPod:
        return pod(name, annotations={names.ANNOTATION_REGISTRATION_HASH: value} if value is not None else None)

    observed = [registered("gpu-0", "old"), registered("gpu-1", "now"), registered("gpu-2", None)]
    observed.append(registered("gpu-3", "old"))
    plan = Plan()
    plan.condemn(observed[:3], "rolling update")
    plan.delete_stale_records(observed, "now")
    assert plan.delete_node == {"gpu-0"}, "same hash, no hash (unknown) and not condemned keep their record"


# --- Context -------------------------------------------------------------------------------------


def test_without_min_ready_seconds_a_healthy_pod_is_available_at_once() -> None:
    c = ctx(now=None)
    assert c.available(pod("gpu-0")) is True
    assert c.available(pod("gpu-0", ready=False)) is False
    assert c.seconds_until_available([pod("gpu-0")]) is None


def test_min_ready_seconds_counts_from_the_ready_transition_by_the_hooks_clock() -> None:
    c = ctx(minReadySeconds=60, now=READY + 59.5)
    assert c.available(pod("gpu-0")) is False
    assert c.seconds_until_available([pod("gpu-0"), pod("gpu-1", ready=False)]) == 1
    assert ctx(minReadySeconds=60, now=READY + 60).available(pod("gpu-0")) is True
    assert ctx(minReadySeconds=60, now=READY + 60).seconds_until_available([pod("gpu-0")]) is None
    assert ctx(minReadySeconds=90, now=READY + 10.5).seconds_until_available([pod("gpu-0")]) == 80


def test_without_a_clock_or_a_ready_time_min_ready_seconds_is_never_reached() -> None:
    assert ctx(minReadySeconds=60, now=None).available(pod("gpu-0")) is False
    assert ctx(minReadySeconds=60, now=None).seconds_until_available([pod("gpu-0")]) is None
    unknown = pod("gpu-0")
    unknown.ready_condition.pop("lastTransitionTime")
    assert ctx(minReadySeconds=60).available(unknown) is False


@pytest.mark.parametrize(
    ("value", "total", "scaled"),
    [(2, 5, 2), ("25%", 5, 2), ("25%", 4, 1), ("1%", 10, 1), (0, 4, 1), ("100%", 3, 3), (3, 0, 0), ("50%", 0, 0)],
)
def test_max_unavailable_rounds_a_percentage_up_and_is_at_least_one(value: int | str, total: int, scaled: int) -> None:
    assert scaled_max_unavailable(value, total) == scaled


# --- StatefulSet mode ----------------------------------------------------------------------------


def test_statefulset_creates_the_lowest_free_ordinals() -> None:
    plan = plan_statefulset(ctx(replicas=4), pods(0, 2), {}, {})
    assert (created(plan), plan.desired, plan.condemned, plan.unexpected) == (["gpu-1", "gpu-3"], 4, {}, {})
    assert [slot.ordinal for slot in plan.create] == [1, 3]


def test_statefulset_names_follow_the_ordinal_padding_and_the_template_hostname() -> None:
    plan = plan_statefulset(ctx(replicas=2, ordinalPadding=3, template={"spec": {"hostname": "n"}}), [], {}, {})
    assert plan.create == [PodSlot("gpu-000", "n000", 0), PodSlot("gpu-001", "n001", 1)]


def test_scale_in_condemns_the_highest_ordinals_and_their_slurm_records() -> None:
    plan = plan_statefulset(ctx(replicas=1), pods(0, 1, 2), {}, {})
    assert plan.condemned == {"gpu-1": "scale-in to 1 replicas", "gpu-2": "scale-in to 1 replicas"}
    assert plan.delete_node == {"gpu-1", "gpu-2"} and plan.create == []


def test_scale_in_takes_the_cheapest_victim_first() -> None:
    observed = [pod("gpu-0", ready=False), *pods(1, 2)]
    assert plan_statefulset(ctx(replicas=2), observed, {}, {}).condemned == {"gpu-0": "scale-in to 2 replicas"}


def test_scale_in_keeps_a_victim_already_draining() -> None:
    plan = plan_statefulset(ctx(replicas=2, draining=frozenset({"gpu-0"})), pods(0, 1, 2), {}, {})
    assert list(plan.condemned) == ["gpu-0"]


def test_scale_in_counts_a_terminating_pod_as_the_first_to_go() -> None:
    observed = [pod("gpu-0", terminating=True), *pods(1, 2)]
    plan = plan_statefulset(ctx(replicas=2), observed, {}, {})
    assert (plan.condemned, plan.create) == ({}, [])


def test_a_terminating_pod_holds_its_ordinal_until_it_is_gone() -> None:
    plan = plan_statefulset(ctx(replicas=2), [pod("gpu-0", terminating=True)], {}, {})
    assert created(plan) == ["gpu-1"]


def test_a_finished_pod_is_condemned_and_replaced_under_its_own_name_only_once_gone() -> None:
    plan = plan_statefulset(ctx(replicas=2), [pod("gpu-0", phase="Failed"), pod("gpu-1", phase="Succeeded")], {}, {})
    assert plan.condemned == {"gpu-0": "pod finished; replacing it", "gpu-1": "pod finished; replacing it"}
    assert plan.create == [] and plan.delete_node == set()


def test_foreign_and_misnamed_pods_are_reported_never_condemned_or_counted() -> None:
    foreign = pod("gpu-0", labels={names.LABEL_INSTANCE: "cpu"})
    misnamed = pod("gpu-node-a")
    plan = plan_statefulset(ctx(replicas=1), [foreign, misnamed], {}, {})
    assert plan.unexpected == {
        "gpu-0": "not a worker pod of this NodeSet (labels or owner differ)",
        "gpu-node-a": "name does not follow gpu-<ordinal>",
    }
    assert plan.condemned == {}
    assert created(plan) == ["gpu-1"], "ordinal 0 is taken by the foreign pod's name"


def test_a_pod_of_the_other_scaling_mode_is_condemned() -> None:
    plan = plan_statefulset(ctx(replicas=1), [pod("gpu-node-a", mode="DaemonSet")], {}, {})
    assert plan.condemned == {"gpu-node-a": "scaling mode changed to StatefulSet"}
    assert created(plan) == ["gpu-0"]


def test_a_second_pod_of_an_ordinal_is_reported_and_condemned_the_canonical_one_kept() -> None:
    plan = plan_statefulset(ctx(replicas=2), [pod("gpu-01"), pod("gpu-1"), pod("gpu-0")], {}, {})
    assert plan.unexpected == {"gpu-01": "duplicate of ordinal 1 (gpu-1)"}
    assert plan.condemned == {"gpu-01": "duplicate of ordinal 1"}
    assert plan.create == []


@pytest.mark.parametrize(
    ("pin", "fits", "pinned"),
    [
        (True, {"node-a": Fit(True, True)}, "node-a"),
        (True, {"node-a": Fit(False, True)}, None),
        (True, {}, None),
        (False, {"node-a": Fit(True, True)}, None),
    ],
)
def test_pin_to_node_pins_an_ordinal_to_its_first_node_while_it_fits(
    pin: bool, fits: dict[str, Fit], pinned: str | None
) -> None:
    plan = plan_statefulset(ctx(replicas=2, pinToNode=pin), [], {"0": "node-a"}, fits)
    assert [slot.pin_node for slot in plan.create] == [pinned, None]


# --- RollingUpdate -------------------------------------------------------------------------------


def test_rolling_update_replaces_one_healthy_old_pod_at_a_time() -> None:
    plan = plan_statefulset(ctx(replicas=3), pods(0, 1, 2, revision=OLD), {}, {})
    assert plan.condemned == {"gpu-2": "rolling update to revision new"}
    assert plan.delete_node == set(), "a rolling update keeps the record (only a changed registration drops it)"


def test_rolling_update_condemns_every_unhealthy_old_pod_and_spends_the_budget_on_it() -> None:
    observed = [pod("gpu-0", revision=OLD, ready=False), *pods(1, 2, revision=OLD)]
    assert list(plan_statefulset(ctx(replicas=3), observed, {}, {}).condemned) == ["gpu-0"]


def test_rolling_update_leaves_new_pods_alone_and_counts_a_missing_pod_against_the_budget() -> None:
    observed = [pod("gpu-0", revision=OLD), pod("gpu-1")]
    plan = plan_statefulset(ctx(replicas=3), observed, {}, {})
    assert (plan.condemned, created(plan)) == ({}, ["gpu-2"])


def test_rolling_update_spends_a_percentage_budget() -> None:
    plan = plan_statefulset(
        ctx(replicas=4, updateStrategy={"rollingUpdate": {"maxUnavailable": "50%"}}),
        pods(0, 1, 2, 3, revision=OLD),
        {},
        {},
    )
    assert sorted(plan.condemned) == ["gpu-2", "gpu-3"]


def test_rolling_update_waits_for_min_ready_seconds() -> None:
    observed = [pod("gpu-0", revision=OLD), pod("gpu-1")]
    assert plan_statefulset(ctx(replicas=2, minReadySeconds=3600), observed, {}, {}).condemned == {}
    assert list(plan_statefulset(ctx(replicas=2, minReadySeconds=60), observed, {}, {}).condemned) == ["gpu-0"]


def test_on_delete_condemns_no_old_pod() -> None:
    plan = plan_statefulset(ctx(replicas=2, updateStrategy={"type": "OnDelete"}), pods(0, 1, revision=OLD), {}, {})
    assert (plan.condemned, plan.create) == ({}, [])


# --- ScheduledUpdate -----------------------------------------------------------------------------


SCHEDULED = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2025-01-01T01:00:00Z", "duration": "1h"}}


def test_scheduled_update_condemns_old_pods_in_our_maintenance_reservation() -> None:
    observed = [
        pod("gpu-0", revision=OLD, slurm=("IDLE", "MAINTENANCE")),  # in the window: goes
        pod("gpu-1", revision=OLD, slurm=("IDLE",)),  # reservation names it, Slurm does not: stays
        pod("gpu-2", revision=OLD, slurm=("IDLE", "MAINTENANCE")),  # not in our reservation: stays
        pod("gpu-3", slurm=("IDLE", "MAINTENANCE")),  # already new: stays
    ]
    c = ctx(replicas=4, updateStrategy=SCHEDULED, maintenance=frozenset({"gpu-0", "gpu-1", "gpu-3"}))
    plan = plan_statefulset(c, observed, {}, {})
    assert plan.condemned == {"gpu-0": "scheduled update to revision new in maintenance reservation"}


# --- DaemonSet mode ------------------------------------------------------------------------------


def ds(**fields: Any) -> Context:
    return ctx(scalingMode="DaemonSet", **fields)


def ds_pod(node: str, hostname: str | None = None, **state: Any) -> ObservedPod:
    host = hostname or node
    return pod(f"gpu-{host}", node=node, hostname=host, mode="DaemonSet", **state)


def test_daemonset_creates_one_pod_per_fitting_node() -> None:
    taint = [{"key": "gpu", "effect": "NoSchedule"}]
    nodes = [kube_node("node-b"), kube_node("node-a"), kube_node("node-c", taint)]
    plan = plan_daemonset(ds(), [], nodes, {})
    assert plan.create == [
        PodSlot("gpu-node-a", "node-a", node="node-a", pin_node="node-a"),
        PodSlot("gpu-node-b", "node-b", node="node-b", pin_node="node-b"),
    ]
    assert (plan.desired, plan.condemned) == (2, {})


def test_daemonset_keeps_the_pod_of_a_node_that_serves_it() -> None:
    plan = plan_daemonset(ds(), [ds_pod("node-a")], [kube_node("node-a")], {})
    assert (plan.create, plan.condemned, plan.unexpected, plan.desired) == ([], {}, {}, 1)


def test_daemonset_condemns_the_pod_of_a_node_that_left() -> None:
    plan = plan_daemonset(ds(), [ds_pod("node-a"), ds_pod("node-b")], [kube_node("node-a")], {})
    assert (plan.condemned, plan.desired) == ({"gpu-node-b": "node node-b is gone"}, 1)


def test_daemonset_without_any_node_listed_condemns_nothing() -> None:
    plan = plan_daemonset(ds(), [ds_pod("node-a", revision=OLD), ds_pod("node-b")], [], {})
    assert (plan.create, plan.condemned, plan.desired) == ([], {}, 0)


def test_daemonset_condemns_a_pod_whose_node_stopped_tolerating_it() -> None:
    evict = [{"key": "gpu", "effect": "NoExecute"}]
    plan = plan_daemonset(ds(), [ds_pod("node-a")], [kube_node("node-a", evict)], {})
    assert (plan.condemned, plan.desired) == ({"gpu-node-a": "node node-a no longer matches the NodeSet"}, 0)


def test_daemonset_keeps_the_pod_of_a_cordoned_node_and_creates_none_there() -> None:
    cordoned = kube_node("node-a")
    cordoned["spec"] = {"unschedulable": True}
    assert plan_daemonset(ds(), [ds_pod("node-a")], [cordoned], {}).desired == 1
    empty = plan_daemonset(ds(), [], [cordoned], {})
    assert (empty.create, empty.desired) == ([], 0)


def test_daemonset_reports_a_pod_without_a_node() -> None:
    plan = plan_daemonset(ds(), [pod("gpu-x", node=None, mode="DaemonSet")], [kube_node("node-a")], {})
    assert plan.unexpected == {"gpu-x": "DaemonSet-mode pod without a node"}
    assert "gpu-x" not in plan.condemned


def test_daemonset_condemns_the_pod_of_a_node_whose_hostname_changed_and_waits_to_replace_it() -> None:
    renamed = kube_node("node-a", annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "big-a"})
    plan = plan_daemonset(ds(), [ds_pod("node-a")], [renamed], {})
    assert plan.condemned == {"gpu-node-a": "hostname of node node-a changed to big-a"}
    assert plan.create == [], "the new pod waits for the node's old pod to go"


def test_daemonset_keeps_one_pod_per_node_preferring_the_expected_name() -> None:
    extra = pod("gpu-extra", node="node-a", hostname="node-a", mode="DaemonSet")
    plan = plan_daemonset(ds(), [extra, ds_pod("node-a")], [kube_node("node-a")], {})
    assert plan.condemned == {"gpu-extra": "another pod already serves node node-a"}


def test_daemonset_rolling_update_counts_against_the_number_of_nodes() -> None:
    nodes = [kube_node(n) for n in ("node-a", "node-b", "node-c")]
    observed = [ds_pod(n["metadata"]["name"], revision=OLD) for n in nodes]
    plan = plan_daemonset(ds(), observed, nodes, {})
    assert plan.condemned == {"gpu-node-a": "rolling update to revision new"}, "no ordinal: equals go by name"


def test_daemonset_condemns_a_finished_pod_and_a_statefulset_pod() -> None:
    observed = [ds_pod("node-a", phase="Failed"), pod("gpu-0", mode="StatefulSet")]
    plan = plan_daemonset(ds(), observed, [kube_node("node-a")], {})
    assert plan.condemned == {"gpu-0": "scaling mode changed to DaemonSet", "gpu-node-a": "pod finished; replacing it"}


# --- finalize and hold ---------------------------------------------------------------------------


def test_finalize_condemns_every_pod_not_already_terminating() -> None:
    plan = plan_finalize(
        [pod("gpu-0"), pod("stray", labels={names.LABEL_INSTANCE: "cpu"}), pod("gpu-1", terminating=True)]
    )
    assert plan.condemned == {"gpu-0": "NodeSet deleted", "stray": "NodeSet deleted"}
    assert (plan.create, plan.delete_node) == ([], set())


def test_hold_keeps_the_published_intents_of_the_pods_still_there() -> None:
    published = {"gpu-1": "scale-in to 1 replicas", "gpu-9": "scale-in to 1 replicas"}
    plan = plan_hold(pods(0, 1), published)
    assert plan.condemned == {"gpu-1": "scale-in to 1 replicas"}
    assert (plan.create, plan.desired) == ([], 0)
