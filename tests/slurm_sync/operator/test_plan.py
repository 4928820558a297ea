"""The pure plan: fail closed on every Slurm error, cordon reasons, whose drains we lift, and
writes only on change."""

from __future__ import annotations

import dataclasses

import pytest

from slinky_common import names
from slurm_sync.metrics import Metrics
from slurm_sync.operator import plan
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import Tally
from slurm_sync.operator.view import ClusterView, read_nodeset
from slurm_sync.slurm.errors import SlurmMalformed, SlurmNotFound, SlurmRejected, SlurmUnavailable
from slurm_sync.slurm.types import NodeUpdate
from tests.slurm_sync.kubefixtures import NODESET_UID, NOW, NS, FakeSlurm, kube_node, node, nodeset, ping, pod
from tests.slurm_sync.operator.planviews import cluster

OUR = "slurm-operator: scale-in to 1 replicas"


def plan_one(c: ClusterView, *slurm_nodes) -> plan.PodPlan:
    view = SlurmView({n.name: n for n in slurm_nodes}, ping(("c0", True, True)))
    return plan.plan_pod(c.pods[0], c, view, NOW)


def updates(p: plan.PodPlan) -> list[NodeUpdate]:
    return [a.update for a in p.slurm]


COMMENT = f'{{"namespace":"{NS}","podName":"gpu-0","node":"k1","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'


# --- fail closed -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        SlurmUnavailable("connect: connection refused"),
        SlurmUnavailable("GET /nodes: timed out (ReadTimeout)"),
        SlurmUnavailable("HTTP 503", status=503),
        SlurmMalformed("HTTP 200 body is not a JSON object"),
        SlurmRejected("HTTP 200: errors", status=200),
        SlurmNotFound("HTTP 404", status=404),
    ],
    ids=["refused", "timeout", "5xx", "garbage", "200-with-errors", "not-found"],
)
def test_every_listing_error_plans_nothing(error: Exception) -> None:
    """No mark set or cleared, no drain or undrain, no condition removed: unknown is not false."""
    pods = [
        pod("gpu-0", states=("IDLE", "DRAIN"), reason=OUR, annotations={names.ANNOTATION_DRAINED: "true"}),
        pod("gpu-1", annotations={names.ANNOTATION_SLURM_NODE_ABSENT: "true"}),
        pod("gpu-2", states=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"}),
    ]
    c = cluster(*pods, intents={"gpu-2": "scale-in"})
    loop = OperatorLoop("slurm", NS, "slurm", FakeSlurm({}, fail=error), None, Metrics())  # type: ignore[arg-type]
    view = loop.read_slurm(Tally())
    assert view == SlurmView(None, None)
    pod_plans = [plan.plan_pod(p, c, view, NOW) for p in c.pods]
    assert [(p.patches, p.slurm) for p in pod_plans] == [((), ())] * len(pods)
    assert plan.controller_patches(c.controller_pods, view.ping) == ()
    assert [p.state for p in pod_plans] == [plan.observed_state(p) for p in c.pods]
    assert plan.nodeset_touches(c, {p.pod.name: p.state for p in pod_plans}) == plan.nodeset_touches(
        c, {p.name: plan.observed_state(p) for p in c.pods}
    )


def test_a_listing_without_the_node_is_no_reason_to_write() -> None:
    """An omission is not evidence: a busy pod keeps its conditions and protection, gets no absent mark."""
    busy = pod("gpu-0", states=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"})
    p = plan_one(cluster(busy, intents={"gpu-0": "scale-in"}), node("other", "IDLE"))
    assert (p.patches, p.slurm, p.state) == ((), (), plan.observed_state(p.pod))


def test_a_node_proven_absent_marks_the_pod() -> None:
    c = cluster(pod("gpu-0"))
    view = SlurmView({"other": node("other", "IDLE")}, ping(("c0", True, True)), absent=frozenset({"gpu-0"}))
    p = plan.plan_pod(c.pods[0], c, view, NOW)
    assert p.state.absent and p.patches[0].body == {
        "metadata": {"annotations": {names.ANNOTATION_SLURM_NODE_ABSENT: "true"}}
    }


# --- cordon reasons --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("kernel upgrade", "kernel upgrade"),
        ("  line1\nline2\r\tend  ", "line1 line2  end"),
        ("bell\x07 and\x00nul\x1b[31m", "bell andnul[31m"),
        ("del\x7fchar", "delchar"),
        ("x" * 300, "x" * 256),
        ("é" * 300, "é" * 256),
        ("\n\t\r", ""),
    ],
)
def test_sanitize_reason(raw: str, clean: str) -> None:
    assert plan.sanitize_reason(raw) == clean


def test_cordoned_node_drains_with_its_sanitized_annotation() -> None:
    c = cluster(
        pod("gpu-0", states=("IDLE",)), nodes=[kube_node(unschedulable=True, cordon_reason="disk\nfailing\x00!")]
    )
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason="slurm-operator: disk failing!")
    ]


def test_cordoned_node_without_annotation_gets_the_default_reason() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)), nodes=[kube_node(unschedulable=True, cordon_reason="\n")])
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment=COMMENT))) == [
        NodeUpdate(
            state=("DRAIN",), reason=f"slurm-operator: Node (k1) was cordoned, Pod ({NS}/gpu-0) must be cordoned"
        )
    ]


def test_pod_cordon_annotation_drains() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON: "true"}))
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason=f"slurm-operator: Pod ({NS}/gpu-0) was cordoned")
    ]


REQUESTED = f"slurm-operator: Pod ({NS}/gpu-0) cordon requested ({names.ANNOTATION_POD_CORDON_REQUESTED})"


def test_a_requested_cordon_drains_under_its_own_reason_and_is_lifted_when_the_annotation_goes() -> None:
    """Slinky 1.3.0's pod-cordon-requested: a health checker's ask, drained as pod-cordon is; the reason,
    shown on the pod as the Drain condition's message, names the annotation."""
    asked = cluster(pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON_REQUESTED: "true"}))
    assert updates(plan_one(asked, node("gpu-0", "IDLE", comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason=REQUESTED)
    ]
    drained = plan_one(asked, node("gpu-0", "IDLE", "DRAIN", reason=REQUESTED, comment=COMMENT))
    assert updates(drained) == [] and drained.state.drained
    shown = next(p.body for p in drained.patches if p.subresource == "status")["status"]["conditions"]
    assert {"type": "SlurmNodeStateDrain", "message": REQUESTED} in [
        {k: c[k] for k in ("type", "message")} for c in shown if "message" in c
    ]
    for value in ("false", "", "True"):  # only "true" asks, as for pod-cordon
        other = cluster(pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON_REQUESTED: value}))
        assert updates(plan_one(other, node("gpu-0", "IDLE", comment=COMMENT))) == []
    gone = cluster(pod("gpu-0", states=("IDLE", "DRAIN")))
    assert updates(plan_one(gone, node("gpu-0", "IDLE", "DRAIN", reason=REQUESTED, comment=COMMENT))) == [
        NodeUpdate(state=("UNDRAIN",))
    ]


def test_pod_cordon_and_a_requested_cordon_together_drain_once_under_pod_cordons_reason() -> None:
    both = {names.ANNOTATION_POD_CORDON: "true", names.ANNOTATION_POD_CORDON_REQUESTED: "true"}
    c = cluster(pod("gpu-0", states=("IDLE",), annotations=both))
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason=f"slurm-operator: Pod ({NS}/gpu-0) was cordoned")
    ]
    # the administrator's pod-cordon lifted, the health checker's ask still stands: drained on, under its reason
    asked = cluster(pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON_REQUESTED: "true"}))
    cordoned = f"slurm-operator: Pod ({NS}/gpu-0) was cordoned"
    assert updates(plan_one(asked, node("gpu-0", "IDLE", "DRAIN", reason=cordoned, comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason=REQUESTED)
    ]


# --- drains: ours and theirs -----------------------------------------------------------------


def test_intent_drains_once_with_our_prefix() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)), intents={"gpu-0": "scale-in to 1 replicas"})
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment=COMMENT))) == [NodeUpdate(state=("DRAIN",), reason=OUR)]
    # already drained with the same reason: nothing to send; the pod is marked drained
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT))
    assert updates(p) == [] and p.state.drained


def test_busy_drain_is_not_marked_drained() -> None:
    c = cluster(pod("gpu-0", states=("ALLOCATED",)), intents={"gpu-0": "scale-in to 1 replicas"})
    p = plan_one(c, node("gpu-0", "ALLOCATED", "DRAIN", reason=OUR, comment=COMMENT))
    assert not p.state.drained and updates(p) == []
    assert names.ANNOTATION_DRAINED not in str([x.body for x in p.patches])


def test_a_dead_node_releases_its_condemned_pod_without_touching_slurms_reason() -> None:
    """DOWN with Slurm's own reason: no job can run there, so the pod may go; the reason stays Slurm's."""
    c = cluster(pod("gpu-0", states=("DOWN", "NOT_RESPONDING")), intents={"gpu-0": "scale-in to 1 replicas"})
    p = plan_one(c, node("gpu-0", "DOWN", "NOT_RESPONDING", reason="Not responding", comment=COMMENT))
    assert p.state.drained and updates(p) == []
    # jobs still completing on it: not yet
    p = plan_one(c, node("gpu-0", "DOWN", "COMPLETING", "NOT_RESPONDING", reason="Not responding", comment=COMMENT))
    assert not p.state.drained


def test_a_powered_down_node_releases_its_condemned_pod_without_a_drain() -> None:
    """Slurm powered the node down (an elastic NodeSet, §4.9): nothing runs there and this pod's slurmd can never
    run a job there again, so no DRAIN is sent (it would outlive the pod and keep Slurm from powering the node up)."""
    c = cluster(pod("gpu-0", states=("IDLE",)), intents={"gpu-0": "Slurm powered its node down"})
    for power in ("POWERED_DOWN", "POWERING_DOWN"):
        p = plan_one(c, node("gpu-0", "IDLE", "CLOUD", power, comment=COMMENT))
        assert p.state.drained and updates(p) == [], power
    # given a job while powered down: busy wins, and the drain is sent as for any node
    p = plan_one(c, node("gpu-0", "ALLOCATED", "CLOUD", "POWERED_DOWN", comment=COMMENT))
    assert not p.state.drained and [u.state for u in updates(p)] == [("DRAIN",)]


def test_changed_intent_reason_redrains_but_never_over_an_administrators_reason() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)), intents={"gpu-0": "NodeSet deleted"})
    assert updates(plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT))) == [
        NodeUpdate(state=("DRAIN",), reason="slurm-operator: NodeSet deleted")
    ]
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason="maint", comment=COMMENT))
    assert updates(p) == [] and p.state.drained  # drained by someone: good enough to delete the pod


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        (("IDLE", "DRAIN"), OUR, [NodeUpdate(state=("UNDRAIN",))]),
        (("IDLE", "DRAIN"), "maint", []),  # an administrator's drain
        (("IDLE", "DRAIN"), "", []),
        (("IDLE", "DRAIN", "UNDRAIN"), OUR, []),  # already being lifted
        (("DOWN",), "slurm-operator: Pod is terminating", [NodeUpdate(state=("RESUME",))]),
        (("DOWN", "NOT_RESPONDING"), "slurm-operator: Pod is terminating", []),
        (("DOWN", "NOT_RESPONDING"), "Not responding", []),
        (("IDLE",), "", []),
    ],
)
def test_undrain_only_our_drains_without_intent(
    state: tuple[str, ...], reason: str, expected: list[NodeUpdate]
) -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)))
    assert updates(plan_one(c, node("gpu-0", *state, reason=reason, comment=COMMENT))) == expected


def test_lifting_our_drain_clears_the_drained_mark_in_the_same_pass() -> None:
    c = cluster(pod("gpu-0", states=("IDLE", "DRAIN"), reason=OUR, annotations={names.ANNOTATION_DRAINED: "true"}))
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT))
    assert [a.lifts_drain for a in p.slurm] == [True]
    assert p.patches == (
        plan.PodPatch(NS, "gpu-0", "", {"metadata": {"annotations": {names.ANNOTATION_DRAINED: None}}}),
    )


def test_terminating_pod_is_neither_drained_nor_undrained() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",), terminating=True), intents={"gpu-0": "x"})
    assert (
        updates(plan_one(c, node("gpu-0", "DOWN", reason="slurm-operator: Pod is terminating", comment=COMMENT))) == []
    )


# --- writes only on change -------------------------------------------------------------------


def test_settled_pod_plans_nothing() -> None:
    c = cluster(pod("gpu-0", states=("IDLE", "DRAIN"), reason="maint", annotations={names.ANNOTATION_DRAINED: "true"}))
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason="maint", comment=COMMENT))
    assert p.patches == () and p.slurm == ()


def test_comment_is_written_only_when_it_differs_and_the_pod_runs() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)))
    assert updates(plan_one(c, node("gpu-0", "IDLE", comment='{"old":1}'))) == [NodeUpdate(comment=COMMENT)]
    pending = cluster(pod("gpu-0", states=("IDLE",), phase="Pending"))
    assert updates(plan_one(pending, node("gpu-0", "IDLE"))) == []


def test_nodeset_touch_only_when_hook_inputs_change() -> None:
    c = cluster(pod("gpu-0", states=("IDLE",)))
    states = {"gpu-0": plan.observed_state(c.pods[0])}
    touch = plan.nodeset_touches(c, states)
    assert len(touch) == 1
    touched = cluster(pod("gpu-0", states=("IDLE",)))
    ns = read_nodeset(nodeset(observed=touch[0].value))
    touched = ClusterView(NS, "slurm", touched.pods, {"gpu": ns}, touched.kube_nodes, ())
    assert plan.nodeset_touches(touched, states) == ()
    drained = {"gpu-0": plan.PodState(drained=True, absent=False, states=("SlurmNodeStateIdle",))}
    assert len(plan.nodeset_touches(touched, drained)) == 1


def test_active_controller_keeps_labels_when_no_answer() -> None:
    from slurm_sync.operator.view import ControllerPodView

    pods = [ControllerPodView(NS, "c-0", "c-0", True), ControllerPodView(NS, "c-1", "c-1", False)]
    assert plan.controller_patches(pods, None) == ()
    assert plan.controller_patches(pods, ping(("c-0", False, True), ("c-1", False, False))) == ()
    assert plan.controller_patches(pods, ping(("c-0", True, True), ("c-1", True, False))) == ()
    moved = plan.controller_patches(pods, ping(("c-0", False, True), ("c-1", True, False)))
    assert [(p.name, p.body["metadata"]["labels"][names.LABEL_ACTIVE_CONTROLLER]) for p in moved] == [
        ("c-0", None),
        ("c-1", "true"),
    ]


# --- the drained mark's epoch (docs/architecture.md §4.1) -------------------------------------


def with_epoch(c: ClusterView, epoch: str) -> ClusterView:
    """``c`` with its NodeSet's drain intents published with ``epoch``, as the NodeSet hook publishes them."""
    obj = nodeset({p: r for p, r in c.nodesets["gpu"].intents.items()})
    for item in obj["status"][names.STATUS_DRAINING_PODS]:
        item[names.DRAIN_EPOCH] = epoch
    ns = read_nodeset(obj)
    return dataclasses.replace(c, nodesets={ns.name: ns})


def drained_patch(p: plan.PodPlan) -> object:
    meta = next((x.body["metadata"] for x in p.patches if not x.subresource), {})
    return meta.get("annotations", {}).get(names.ANNOTATION_DRAINED, "-")


def test_the_drained_mark_carries_the_epoch_of_the_intent_it_answers() -> None:
    c = with_epoch(cluster(pod("gpu-0", states=("IDLE",)), intents={"gpu-0": "scale-in to 1 replicas"}), "57")
    assert c.nodesets["gpu"].epochs == {"gpu-0": "57"}
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT))
    assert (p.state.drained, drained_patch(p)) == ("57", "57")


def test_a_mark_left_from_an_earlier_intent_is_rewritten_for_the_current_one() -> None:
    stale = pod("gpu-0", states=("IDLE", "DRAIN"), reason=OUR, annotations={names.ANNOTATION_DRAINED: "40"})
    c = with_epoch(cluster(stale, intents={"gpu-0": "scale-in to 1 replicas"}), "57")
    p = plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT))
    assert (p.state.drained, drained_patch(p)) == ("57", "57")


def test_a_drain_without_an_epoch_gets_the_plain_mark() -> None:
    """A cordon's drain, or an intent published before intents carried an epoch: "true", which lets no
    condemned pod go (the hook waits for the mark of its intent)."""
    cordoned = pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_POD_CORDON: "true"})
    reason = f"slurm-operator: Pod ({NS}/gpu-0) was cordoned"
    p = plan_one(cluster(cordoned), node("gpu-0", "IDLE", "DRAIN", reason=reason, comment=COMMENT))
    assert (p.state.drained, drained_patch(p)) == (names.DRAINED_NO_EPOCH, names.DRAINED_NO_EPOCH)
    c = cluster(pod("gpu-0", states=("IDLE",)), intents={"gpu-0": "scale-in to 1 replicas"})
    assert plan_one(c, node("gpu-0", "IDLE", "DRAIN", reason=OUR, comment=COMMENT)).state.drained == "true"
