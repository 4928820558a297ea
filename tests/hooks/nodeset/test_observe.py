"""Reading observed NodeSet pods (hooks/nodeset/observe.py): every shape is read without raising, what cannot be
read keeps the pod alive, busy evidence always wins over slurm_sync's marks, and the victim order."""

from __future__ import annotations

from typing import Any

import pytest

from hooks.nodeset.observe import (
    ObservedPod,
    format_time,
    observe_pod,
    parse_time,
    still_wanted,
    victim_order,
)
from slinky_common import names, slurmstate
from tests.hooks.nodeset.fixtures import READY_AT, T0

READY = READY_AT  # the pods' Ready transition
UID = "uid-gpu"
EPOCH = "41"  # the epoch of the intent the pods' drained marks answer, unless a test says otherwise
DEADLINE = names.ANNOTATION_POD_DEADLINE


def pod_obj(
    name: str = "gpu-0",
    *,
    slurm: tuple[str, ...] = ("IDLE",),
    phase: str | None = "Running",
    ready: bool = True,
    node: str | None = "node-a",
    labels: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    terminating: bool = False,
    owner_uid: str | None = UID,
) -> dict[str, Any]:
    """A NodeSet `gpu` worker pod as observed, with kubelet and slurm_sync state."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "slurm",
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: "gpu", **(labels or {})},
        "annotations": dict(annotations or {}),
    }
    if owner_uid is not None:
        meta["ownerReferences"] = [{"kind": "NodeSet", "name": "gpu", "uid": owner_uid, "controller": True}]
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    conditions: list[dict[str, Any]] = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": format_time(READY)}
    ]
    conditions += [{"type": slurmstate.condition_type(s), "status": "True"} for s in slurm]
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}
    if node is not None:
        obj["spec"]["nodeName"] = node
    if phase is not None:
        obj["status"] = {"phase": phase, "conditions": conditions}
    return obj


def pod(name: str = "gpu-0", **state: Any) -> ObservedPod:
    return observe_pod(pod_obj(name, **state), "gpu", UID)


# --- observe_pod -------------------------------------------------------------------------------------


def test_a_worker_pod_is_read_field_by_field() -> None:
    obj = pod_obj(
        slurm=("IDLE", "DRAIN"),
        labels={names.LABEL_NODESET_SCALING_MODE: "StatefulSet", names.LABEL_NODESET_REVISION: "abc"},
        annotations={
            names.ANNOTATION_DRAINED: "41",
            names.ANNOTATION_REGISTRATION_HASH: "h1",
        },
    )
    obj["spec"]["volumes"] = [{"name": "ssh", "configMap": {"name": "gpu-ssh"}}, {"name": "tmp", "emptyDir": {}}]
    p = observe_pod(obj, "gpu", UID)
    assert (p.name, p.namespace, p.ours, p.scaling_mode, p.revision) == ("gpu-0", "slurm", True, "StatefulSet", "abc")
    assert (p.node_name, p.phase, p.ready, p.terminating) == ("node-a", "Running", True, False)
    assert (p.drained_mark, p.absent_mark, p.marked, p.registration) == ("41", False, "drained", "h1")
    assert p.slurm_states == frozenset({"IDLE", "DRAIN"})
    assert (p.slurm_base, p.slurm_drain, p.protected, p.busy) == ("IDLE", True, False, False)
    assert p.config_maps == ("gpu-ssh",)
    assert p.kept is not None and p.obj is obj
    assert p.ready_since == READY and p.created == parse_time("2025-01-01T00:00:00Z")
    assert p.healthy


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": None, "spec": None, "status": None},
        {"metadata": [], "spec": "x", "status": 3},
        {"metadata": {"name": "gpu-0", "labels": {}, "ownerReferences": [None, "y"]}},
        {"metadata": {"name": "gpu-0"}, "status": {"phase": ["Running"], "conditions": "Ready"}},
        {"metadata": {"name": "gpu-0"}, "status": {"conditions": [None, 1, "Ready", {"type": "Ready"}]}},
        {"metadata": {"name": "gpu-0"}, "spec": {"volumes": [None, {"configMap": None}, {"configMap": {"name": 3}}]}},
    ],
)
def test_a_pod_of_any_shape_is_read_without_raising_and_kept_alive(obj: dict[str, Any]) -> None:
    p = observe_pod(obj, "gpu", UID)
    assert (p.phase, p.ready, p.terminating, p.healthy) == ("Unknown", False, False, False)
    assert (p.drained_mark, p.absent_mark, p.marked) == (None, False, None)
    assert (p.slurm_states, p.slurm_base, p.slurm_drain) == (frozenset(), None, False)
    assert (p.ours, p.config_maps, p.node_name, p.deletion_cost, p.pinned_node) == (False, (), None, 0, None)
    assert p.removable(T0, EPOCH) is False


def test_a_pod_without_a_name_has_nothing_kept() -> None:
    p = observe_pod({"metadata": {"namespace": "slurm"}}, "gpu", UID)
    assert (p.name, p.kept, p.hostname) == ("", None, "")


@pytest.mark.parametrize(("phase", "read"), [("Pending", "Pending"), ("Failed", "Failed"), ("Weird", "Unknown")])
def test_an_unknown_phase_reads_as_unknown(phase: str, read: str) -> None:
    assert pod(phase=phase).phase == read


def test_only_slurm_state_conditions_that_hold_count_and_the_first_ready_condition_wins() -> None:
    obj = pod_obj(slurm=("MIXED",))
    obj["status"]["conditions"] += [
        {"type": slurmstate.condition_type("ALLOCATED"), "status": "False"},
        {"type": slurmstate.condition_type("NOT_RESPONDING"), "status": "Unknown"},
        {"type": "SlurmNodeStateSomethingNew", "status": "True"},
        {"type": "Ready", "status": "False"},
    ]
    p = observe_pod(obj, "gpu", UID)
    assert p.slurm_states == frozenset({"MIXED"}) and p.slurm_base == "MIXED"
    assert p.ready is True


def test_a_drain_being_lifted_is_no_drain_in_force() -> None:
    assert pod(slurm=("IDLE", "DRAIN", "UNDRAIN")).slurm_drain is False


@pytest.mark.parametrize(("value", "marked"), [("true", True), ("True", False), ("yes", False), ("", False)])
def test_the_absent_mark_needs_the_exact_value_true(value: str, marked: bool) -> None:
    assert pod(annotations={names.ANNOTATION_SLURM_NODE_ABSENT: value}).absent_mark is marked


@pytest.mark.parametrize(("value", "epoch"), [("41", "41"), ("true", "true"), ("", None), (41, None)])
def test_the_drained_mark_is_read_as_the_epoch_it_carries(value: object, epoch: str | None) -> None:
    assert pod(annotations={names.ANNOTATION_DRAINED: value}).drained_mark == epoch


@pytest.mark.parametrize(("mark", "removable"), [(EPOCH, True), ("39", False), ("true", False)])
def test_a_drained_mark_lets_the_pod_go_only_for_the_intent_of_its_epoch(mark: str, removable: bool) -> None:
    """A mark left from an earlier intent (or one without an epoch) is not enough: slurm_sync may be lifting that
    drain, having seen the earlier intent withdrawn (model/drain.pml, -DNO_EPOCH)."""
    p = pod(slurm=("IDLE", "DRAIN"), annotations={names.ANNOTATION_DRAINED: mark})
    assert p.removable(T0, EPOCH) is removable


def test_the_absent_mark_is_named_before_the_drained_one() -> None:
    both = pod(annotations={names.ANNOTATION_DRAINED: "true", names.ANNOTATION_SLURM_NODE_ABSENT: "true"})
    assert both.marked == "absent"


@pytest.mark.parametrize(
    ("value", "protected"), [(None, False), ("false", False), ("true", True), ("", True), ("1", True)]
)
def test_pod_protect_counts_unless_it_is_explicitly_false(value: str | None, protected: bool) -> None:
    labels = {} if value is None else {names.LABEL_POD_PROTECT: value}
    assert pod(labels=labels).protected is protected


@pytest.mark.parametrize(
    ("labels", "owner_uid", "parent_uid", "ours"),
    [
        ({}, UID, UID, True),
        ({}, None, UID, True),  # adopted by label, no controller yet
        ({}, "uid-other", UID, False),
        ({}, "uid-other", "", True),  # no parent uid to compare with
        ({names.LABEL_INSTANCE: "cpu"}, UID, UID, False),
        ({names.LABEL_NAME: "slurmctld"}, UID, UID, False),
    ],
)
def test_a_pod_is_ours_with_our_worker_labels_and_no_other_controller(
    labels: dict[str, str], owner_uid: str | None, parent_uid: str, ours: bool
) -> None:
    obj = pod_obj(labels=labels, owner_uid=owner_uid)
    assert observe_pod(obj, "gpu", parent_uid).ours is ours


def test_an_owner_that_is_not_the_controller_does_not_make_a_pod_foreign() -> None:
    obj = pod_obj()
    obj["metadata"]["ownerReferences"].append({"kind": "Thing", "uid": "uid-other"})
    obj["metadata"]["ownerReferences"].append({"kind": "Thing", "uid": "uid-other", "controller": "true"})
    assert observe_pod(obj, "gpu", UID).ours is True


def test_the_hostname_is_the_label_else_the_spec_hostname_else_the_name() -> None:
    labelled = pod_obj(labels={names.LABEL_NODESET_POD_HOSTNAME: "node-a"})
    labelled["spec"]["hostname"] = "spec-host"
    assert observe_pod(labelled, "gpu", UID).hostname == "node-a"
    spec_only = pod_obj()
    spec_only["spec"]["hostname"] = "spec-host"
    assert observe_pod(spec_only, "gpu", UID).hostname == "spec-host"
    assert pod("gpu-7").hostname == "gpu-7"


def affinity(fields: Any) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": fields}}}


@pytest.mark.parametrize(
    ("aff", "pinned"),
    [
        (affinity([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]), "node-b"),
        (affinity([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]), None),
        (affinity([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}]), None),
        (affinity([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]), None),
        (affinity("not a list"), None),
        (affinity([None]), None),
        ({"nodeAffinity": None}, None),
        ({"podAffinity": {}}, None),
        ("not an object", None),
    ],
)
def test_the_pinned_node_is_a_single_required_metadata_name_match(aff: Any, pinned: str | None) -> None:
    obj = pod_obj()
    obj["spec"]["affinity"] = aff
    assert observe_pod(obj, "gpu", UID).pinned_node == pinned


@pytest.mark.parametrize(
    ("value", "cost"),
    [("-5", -5), (" 7 ", 7), ("2147483647", 2**31 - 1), ("-2147483648", -(2**31)), ("2147483648", 0)],
)
def test_the_deletion_cost_is_an_int32(value: str, cost: int) -> None:
    assert pod(annotations={names.ANNOTATION_POD_DELETION_COST: value}).deletion_cost == cost


@pytest.mark.parametrize("value", ["abc", "1.5", "+3", "", "12345678901", 5])
def test_an_unreadable_deletion_cost_is_zero(value: Any) -> None:
    assert pod(annotations={names.ANNOTATION_POD_DELETION_COST: value}).deletion_cost == 0


@pytest.mark.parametrize(
    "annotations", [{names.ANNOTATION_POD_CORDON: "true"}, {names.ANNOTATION_POD_CORDON_REQUESTED: "true"}]
)
def test_either_cordon_annotation_asks_for_a_drain(annotations: dict[str, str]) -> None:
    assert pod(annotations=annotations).pod_cordon is True


def test_a_cordon_annotation_other_than_true_asks_for_nothing() -> None:
    assert pod(annotations={names.ANNOTATION_POD_CORDON: "yes"}).pod_cordon is False


def test_ready_since_is_known_only_while_ready() -> None:
    assert pod(ready=True).ready_since == READY
    assert pod(ready=False).ready_since is None


@pytest.mark.parametrize(
    ("state", "healthy"),
    [
        ({}, True),
        ({"ready": False}, False),
        ({"phase": "Pending"}, False),
        ({"terminating": True}, False),
    ],
)
def test_healthy_is_running_ready_and_not_terminating(state: dict[str, Any], healthy: bool) -> None:
    assert pod(**state).healthy is healthy


@pytest.mark.parametrize(("phase", "finished"), [("Failed", True), ("Succeeded", True), ("Running", False)])
def test_a_pod_that_ended_is_finished(phase: str, finished: bool) -> None:
    assert pod(phase=phase).finished is finished


# --- busy evidence -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "evidence"),
    [
        ({"slurm": ("ALLOCATED",)}, "Slurm state ALLOCATED"),
        ({"slurm": ("MIXED", "COMPLETING", "DRAIN")}, "Slurm state COMPLETING+MIXED"),
        ({"labels": {names.LABEL_POD_PROTECT: "true"}}, f"label {names.LABEL_POD_PROTECT}"),
        ({"annotations": {DEADLINE: "next tuesday"}}, f"unreadable {DEADLINE}"),
        ({"annotations": {DEADLINE: format_time(T0 + 1)}}, f"{DEADLINE} {format_time(T0 + 1)} not passed"),
    ],
)
def test_each_kind_of_busy_evidence_is_named(state: dict[str, Any], evidence: str) -> None:
    assert pod(**state).busy_evidence(T0) == evidence


def test_a_busy_slurm_state_is_named_before_the_label_and_the_deadline() -> None:
    p = pod(
        slurm=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"}, annotations={DEADLINE: format_time(T0 + 60)}
    )
    assert p.busy_evidence(T0) == "Slurm state ALLOCATED"


def test_a_deadline_is_evidence_until_the_clock_reaches_it() -> None:
    p = pod(annotations={DEADLINE: format_time(T0)})
    assert p.needs_clock is True
    assert p.busy_evidence(T0 - 1) is not None
    assert p.busy_evidence(T0) is None
    assert p.busy_evidence(None) == f"{DEADLINE} {format_time(T0)} not passed", "an unread clock passes no deadline"


def test_an_empty_or_missing_deadline_is_no_evidence_and_needs_no_clock() -> None:
    for p in (pod(), pod(annotations={DEADLINE: ""})):
        assert (p.deadline, p.deadline_unreadable, p.needs_clock, p.busy_evidence(None)) == (None, False, False, None)


def test_an_unreadable_deadline_needs_no_clock_but_holds_the_pod() -> None:
    p = pod(annotations={DEADLINE: 17, names.ANNOTATION_DRAINED: EPOCH})
    assert (p.deadline_unreadable, p.needs_clock, p.removable(None, EPOCH)) == (True, False, False)


@pytest.mark.parametrize("mark", [names.ANNOTATION_DRAINED, names.ANNOTATION_SLURM_NODE_ABSENT])
@pytest.mark.parametrize(
    "evidence",
    [
        {"slurm": ("COMPLETING", "DRAIN")},
        {"labels": {names.LABEL_POD_PROTECT: "maybe"}},
        {"annotations": {DEADLINE: format_time(T0 + 3600)}},
    ],
)
def test_busy_evidence_wins_over_either_mark(mark: str, evidence: dict[str, Any]) -> None:
    state = dict(evidence)
    value = EPOCH if mark == names.ANNOTATION_DRAINED else "true"
    p = pod(annotations={mark: value, **state.pop("annotations", {})}, **state)
    assert p.marked is not None and p.removable(T0, EPOCH) is False


def test_a_pod_is_removable_only_when_marked_and_idle() -> None:
    assert pod(slurm=("IDLE", "DRAIN"), annotations={names.ANNOTATION_DRAINED: EPOCH}).removable(T0, EPOCH) is True
    assert pod(slurm=(), annotations={names.ANNOTATION_SLURM_NODE_ABSENT: "true"}).removable(T0, EPOCH) is True
    assert pod(slurm=("IDLE", "DRAIN")).removable(T0, EPOCH) is False, "Slurm's drain alone is not slurm_sync's mark"


# --- still_wanted --------------------------------------------------------------------------------


def names_of(pods: list[ObservedPod]) -> list[str]:
    return [p.name for p in pods]


def test_still_wanted_leaves_out_only_condemned_pods_that_may_go() -> None:
    drained = {names.ANNOTATION_DRAINED: EPOCH}
    pods = [
        pod("gpu-0", annotations=drained),  # marked but not condemned
        pod("gpu-1", slurm=("IDLE", "DRAIN"), annotations=drained),  # condemned, drained: goes
        pod("gpu-2", slurm=("ALLOCATED", "DRAIN"), annotations=drained),  # condemned, busy: stays
        pod("gpu-3"),  # condemned, not marked yet: stays
    ]
    epochs = {"gpu-1": EPOCH, "gpu-2": EPOCH, "gpu-3": EPOCH}
    assert names_of(still_wanted(pods, epochs, T0)) == ["gpu-0", "gpu-2", "gpu-3"]
    assert names_of(still_wanted(pods, {**epochs, "gpu-1": "42"}, T0)) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_a_pod_whose_record_must_go_needs_the_absent_mark() -> None:
    drained = pod("gpu-1", slurm=("IDLE", "DRAIN"), annotations={names.ANNOTATION_DRAINED: EPOCH})
    absent = pod("gpu-2", slurm=(), annotations={names.ANNOTATION_SLURM_NODE_ABSENT: "true"})
    epochs = {"gpu-1": EPOCH, "gpu-2": EPOCH}
    assert names_of(still_wanted([drained, absent], epochs, T0, frozenset({"gpu-1", "gpu-2"}))) == ["gpu-1"]
    assert names_of(still_wanted([drained, absent], epochs, T0)) == []


def test_a_pod_without_a_name_is_never_wanted() -> None:
    nameless = observe_pod({"metadata": {}}, "gpu", UID)
    assert names_of(still_wanted([nameless, pod("gpu-0")], {}, T0)) == ["gpu-0"]


# --- victim_order --------------------------------------------------------------------------------


def first_victim(*pods: tuple[ObservedPod, int | None], draining: frozenset[str] = frozenset()) -> str:
    return min(pods, key=lambda m: victim_order(m[0], m[1], draining))[0].name


@pytest.mark.parametrize(
    ("cheaper", "dearer"),
    [
        ({"node": None, "phase": "Pending"}, {"phase": "Pending"}),
        ({"phase": "Pending", "ready": False}, {"phase": "Unknown", "ready": False}),
        ({"phase": "Unknown", "ready": False}, {"phase": "Running", "ready": False}),
        ({"ready": False}, {}),
        ({"annotations": {names.ANNOTATION_POD_DELETION_COST: "-1"}}, {}),
        ({}, {"annotations": {names.ANNOTATION_POD_DELETION_COST: "1"}}),
        ({}, {"annotations": {DEADLINE: format_time(T0)}}),
        ({"annotations": {DEADLINE: format_time(T0)}}, {"annotations": {DEADLINE: format_time(T0 + 1)}}),
        ({"annotations": {names.ANNOTATION_POD_CORDON: "true"}}, {}),
        ({"annotations": {names.ANNOTATION_DRAINED: "true"}}, {}),
    ],
)
def test_the_cheaper_victim_sorts_first_whatever_its_ordinal(cheaper: dict[str, Any], dearer: dict[str, Any]) -> None:
    """Each criterion beats every later one: the cheaper pod has the lower ordinal and the name sorting last."""
    assert first_victim((pod("gpu-z", **cheaper), 0), (pod("gpu-a", **dearer), 9)) == "gpu-z"


def test_a_pod_listed_as_draining_counts_as_cordoned() -> None:
    assert first_victim((pod("gpu-1"), 1), (pod("gpu-0"), 0), draining=frozenset({"gpu-0"})) == "gpu-0"


def test_among_equals_the_highest_ordinal_goes_first() -> None:
    assert first_victim((pod("gpu-0"), 0), (pod("gpu-2"), 2), (pod("gpu-1"), 1)) == "gpu-2"


def test_then_the_most_recently_ready_then_the_newest_then_the_name() -> None:
    later = pod_obj("gpu-b")
    later["status"]["conditions"][0]["lastTransitionTime"] = format_time(READY + 1)
    assert first_victim((pod("gpu-a"), None), (observe_pod(later, "gpu", UID), None)) == "gpu-b"
    newer = pod_obj("gpu-b")
    newer["metadata"]["creationTimestamp"] = "2025-01-01T00:00:01Z"
    assert first_victim((pod("gpu-a"), None), (observe_pod(newer, "gpu", UID), None)) == "gpu-b"
    assert first_victim((pod("gpu-b"), None), (pod("gpu-a"), None)) == "gpu-a"


# --- time ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2025-01-01T00:01:00Z", 1735689660.0),
        ("2025-01-01T01:01:00+01:00", 1735689660.0),
        ("2025-01-01T00:01:00.5Z", 1735689660.5),
    ],
)
def test_parse_time_reads_rfc3339(text: str, epoch: float) -> None:
    assert parse_time(text) == epoch


@pytest.mark.parametrize("value", [None, "", "soon", "2025-13-01T00:00:00Z", 1735689660, ["2025-01-01T00:00:00Z"]])
def test_parse_time_of_anything_else_is_none(value: Any) -> None:
    assert parse_time(value) is None


def test_a_readable_deadline_past_year_9999_still_reads_as_evidence() -> None:
    """ "9999-12-31T23:59:59-10:00" parses to an instant in year 10000 UTC, which has no RFC 3339 UTC form: still
    busy evidence, and the message says it is beyond what can be printed (it once failed the whole sync, a 500)."""
    p = pod(annotations={DEADLINE: "9999-12-31T23:59:59-10:00", names.ANNOTATION_DRAINED: EPOCH})
    assert p.deadline is not None
    assert p.busy_evidence(T0) == f"{names.ANNOTATION_POD_DEADLINE} after 9999-12-31T23:59:59Z not passed"
    assert p.removable(T0, EPOCH) is False


def test_format_time_is_whole_seconds_utc() -> None:
    assert format_time(1735689660.9) == "2025-01-01T00:01:00Z"
    assert parse_time(format_time(T0)) == T0
