"""Node-derived steps through the loop and the official client against pytest-httpserver: the exact
pod annotation patch for topology, the Slurm updates for topology and features, cordon reasons from
Node conditions (and the flag that selects them), and defunct-node pruning that deletes only after a
NotFound for the pod -- every request pinned, and nothing written once settled."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync import __main__ as cli
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.slurm.errors import SlurmError, SlurmErrorDetail, SlurmRejected, SlurmUnavailable
from slurm_sync.slurm.types import Node, NodeUpdate, parse_node
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    RecordedEvents,
    api_client,
    controller_pod,
    nodeset,
    pod,
)
from tests.slurm_sync.operator.looprig import COMMENT, IDLE_STATE, SMP, expect_patch, expect_reads, run, settled_hash

TOPO = "topo-switch:s2,topo-block:b2"
PRUNE_COMMENT = (
    f'{{"namespace":"{NS}","podName":"gpu-k9","node":"k9","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'
)


TOPOLOGY_REFUSED = SlurmRejected(
    "Requested topology configuration is not available",
    status=422,
    errors=(SlurmErrorDetail("", 2178, "Requested topology configuration is not available", ""),),
)


@dataclass
class DeletingSlurm(FakeSlurm):
    deleted: list[str] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)
    attempts: list[tuple[str, NodeUpdate]] = field(default_factory=list)  # refused ones included
    refusal: SlurmError = TOPOLOGY_REFUSED

    def update_node(self, name: str, update: NodeUpdate) -> None:
        self.attempts.append((name, update))
        if update.topology_str is not None and "topology" in self.refuse:
            raise self.refusal
        if update.comment is not None and "comment" in self.refuse:
            raise self.refusal
        super().update_node(name, update)

    def delete_node(self, name: str) -> None:
        self.deleted.append(name)


@dataclass
class NormalisingSlurm(DeletingSlurm):
    """A topology plugin that stores topology_str and reports it in its own form."""

    def update_node(self, name: str, update: NodeUpdate) -> None:
        super().update_node(name, update)
        if update.topology_str is not None:
            normal = "/".join(sorted(p.split(":", 1)[1] for p in update.topology_str.split(",")))
            self.nodes[name] = replace(self.nodes[name], topology=normal)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def delete_node(self, name: str) -> None:
        self.deleted.append(name)


def snode(
    name: str,
    *state: str,
    comment: str = COMMENT,
    features: tuple[str, ...] = ("gpu",),
    topology: str = "",
    reason: str = "",
) -> Node:
    return parse_node(
        {
            "name": name,
            "state": list(state),
            "comment": comment,
            "features": list(features),
            "active_features": list(features),
            "topology": topology,
            "reason": reason,
        }
    )


def knode(
    name: str = "k1",
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": conditions or []},
    }


def looper(
    server: HTTPServer, slurm: FakeSlurm, propagated: tuple[str, ...] = (), clock: Clock | None = None
) -> OperatorLoop:
    metrics = Metrics()
    kube = Kube(api_client(server.url_for("/")), metrics.count_kube_write)
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,
        kube,
        metrics,
        events=RecordedEvents(),  # type: ignore[arg-type]
        now=lambda: NOW,
        propagated_conditions=propagated,
        clock=clock or Clock(),
    )


def test_topology_is_one_annotation_patch_and_one_slurm_update_then_nothing(httpserver: HTTPServer) -> None:
    annotated = knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO, names.ANNOTATION_FEATURES_SPEC: "a100,nvlink"})
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=("gpu", "k8s/stale", "admin"))})
    settled = nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [settled],
        [annotated],
        [controller_pod("slurm-controller-0", active=True)],
    )
    expect_patch(
        httpserver,
        f"/api/v1/namespaces/{NS}/pods/gpu-0",
        SMP,
        {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}},
    )
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.kube_writes == 1 and result.slurm_writes == 2
    assert slurm.updates == [
        (
            "gpu-0",
            NodeUpdate(
                features=("gpu", "admin", "k8s/a100", "k8s/nvlink"),
                features_act=("gpu", "admin", "k8s/a100", "k8s/nvlink"),
            ),
        ),
        ("gpu-0", NodeUpdate(topology_str=TOPO)),
    ]
    # settled on both sides: reads only
    httpserver.clear()
    slurm.nodes["gpu-0"] = snode("gpu-0", "IDLE", features=("gpu", "admin", "k8s/a100", "k8s/nvlink"), topology=TOPO)
    slurm.updates.clear()
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})],
        [settled],
        [annotated],
        [controller_pod("slurm-controller-0", active=True)],
    )
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.kube_writes == 0 and result.slurm_writes == 0 and slurm.updates == []


def test_a_refused_topology_update_is_reported_and_the_rest_still_happens(httpserver: HTTPServer) -> None:
    """Slurm without a topology plugin that takes updates (topology/flat) refuses topology_str:
    logged and counted (by Slurm's error number), not a pass error, and readiness names it while it
    lasts; the other writes happen."""
    annotated = knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=("gpu", "k8s/stale"))}, refuse={"topology"})
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [annotated],
        [],
    )
    expect_patch(
        httpserver,
        f"/api/v1/namespaces/{NS}/pods/gpu-0",
        SMP,
        {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}},
    )
    loop = looper(httpserver, slurm)
    result = run(httpserver, loop)
    assert result.ok and result.slurm_writes == 1
    assert not result.ready and result.unready == (
        "update node gpu-0 (topology_str): refused by Slurm: Requested topology configuration is not available",
    )
    assert slurm.updates == [("gpu-0", NodeUpdate(features=("gpu",), features_act=("gpu",)))]
    assert slurm.attempts[-1] == ("gpu-0", NodeUpdate(topology_str=TOPO))
    assert refused_count(loop, "2178") == 1


def refused_count(loop: OperatorLoop, reason: str, action: str = "topology_str") -> float | None:
    return loop.metrics.registry.get_sample_value(
        "slurm_sync_slurm_refused_updates_total", {"cluster": CLUSTER, "action": action, "reason": reason}
    )


def topology_pass(server: HTTPServer, loop: OperatorLoop, spec: str = TOPO) -> Any:
    """One pass where only the topology can be written (the pod already carries the spec)."""
    server.clear()
    expect_reads(
        server,
        [pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_TOPOLOGY_SPEC: spec})],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: spec})],
        [],
    )
    return run(server, loop)


def test_a_refused_update_is_not_resent_until_it_or_slurm_changes_or_the_backoff_ends(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=())}, refuse={"topology"})
    clock = Clock()
    loop = looper(httpserver, slurm, clock=clock)
    sent = NodeUpdate(topology_str=TOPO)
    first = topology_pass(httpserver, loop)
    assert first.ok and slurm.attempts == [("gpu-0", sent)]
    assert not first.ready and first.unready[0].startswith("update node gpu-0 (topology_str): refused by Slurm: ")
    # the next passes: the same refused update is not sent again, and readiness still says so
    for _ in range(3):
        clock.now += 10
        result = topology_pass(httpserver, loop)
        assert result.ok and result.unready == first.unready
    assert slurm.attempts == [("gpu-0", sent)]
    # after the backoff it is tried again (and the refusal is not counted twice)
    clock.now += 60
    assert topology_pass(httpserver, loop).ok and len(slurm.attempts) == 2
    assert refused_count(loop, "2178") == 1
    assert (
        loop.metrics.registry.get_sample_value(
            "slurm_sync_slurm_errors_total", {"cluster": CLUSTER, "kind": "rejected"}
        )
        == 2
    )
    # the backoff doubles (120 s now) ...
    clock.now += 100
    assert topology_pass(httpserver, loop).ok and len(slurm.attempts) == 2
    # ... and is capped at 10 minutes however often Slurm refuses
    for _ in range(6):
        clock.now += 3600
        topology_pass(httpserver, loop)
    count = len(slurm.attempts)
    clock.now += 599
    topology_pass(httpserver, loop)
    assert len(slurm.attempts) == count
    clock.now += 2
    topology_pass(httpserver, loop)
    assert len(slurm.attempts) == count + 1
    # Slurm's value changes (an administrator set one): sent again at once, reported anew
    slurm.attempts.clear()
    slurm.nodes["gpu-0"] = replace(slurm.nodes["gpu-0"], topology="topo-switch:s1")
    assert topology_pass(httpserver, loop).ok and slurm.attempts == [("gpu-0", sent)]
    assert refused_count(loop, "2178") == 2
    # the desired value changes: sent at once
    other = "topo-switch:s9,topo-block:b9"
    assert topology_pass(httpserver, loop, other).ok and slurm.attempts[-1] == ("gpu-0", NodeUpdate(topology_str=other))
    # accepted at last: written, and the refusal is forgotten
    slurm.refuse.clear()
    clock.now += 600
    result = topology_pass(httpserver, loop, other)
    assert result.ok and result.slurm_writes == 1 and slurm.updates == [("gpu-0", NodeUpdate(topology_str=other))]
    assert result.ready
    assert loop._refused == {}


def test_refusals_about_our_credentials_fail_every_pass(httpserver: HTTPServer) -> None:
    """Not a refusal of the update: Slurm will not let us in. A pass error each pass, as before."""
    slurm = DeletingSlurm(
        {"gpu-0": snode("gpu-0", "IDLE", features=())},
        refuse={"topology"},
        refusal=SlurmRejected("forbidden", status=403),
    )
    loop = looper(httpserver, slurm)
    for _ in range(2):
        result = topology_pass(httpserver, loop)
        assert not result.ok and not result.ready and any("topology_str" in e for e in result.errors)
        assert result.unready == ("update node gpu-0 (topology_str): forbidden",)
    assert len(slurm.attempts) == 2


def test_a_normalised_topology_is_not_sent_again(httpserver: HTTPServer) -> None:
    """A topology plugin reports the spec in its own form: compared with what was last applied."""
    slurm = NormalisingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=())})
    loop = looper(httpserver, slurm)
    assert topology_pass(httpserver, loop).slurm_writes == 1
    assert slurm.nodes["gpu-0"].topology == "b2/s2"
    for _ in range(2):
        result = topology_pass(httpserver, loop)
        assert result.ok and result.slurm_writes == 0
    assert slurm.attempts == [("gpu-0", NodeUpdate(topology_str=TOPO))]
    # a changed annotation is sent
    other = "topo-switch:s9,topo-block:b9"
    assert topology_pass(httpserver, loop, other).slurm_writes == 1
    assert topology_pass(httpserver, loop, other).slurm_writes == 0
    # after a restart only Slurm's value is known: sent once more, then settled again
    restarted = looper(httpserver, slurm)
    assert topology_pass(httpserver, restarted, other).slurm_writes == 1
    assert topology_pass(httpserver, restarted, other).slurm_writes == 0


MOVED_COMMENT = COMMENT.replace('"node":"k1"', '"node":"k0"')


@pytest.mark.parametrize("failure", [TOPOLOGY_REFUSED, SlurmUnavailable("timed out")], ids=["refused", "unavailable"])
def test_idle_after_a_move_needs_the_comment_update_to_succeed(httpserver: HTTPServer, failure: SlurmError) -> None:
    slurm = DeletingSlurm(
        {"gpu-0": snode("gpu-0", "IDLE", comment=MOVED_COMMENT, features=())}, refuse={"comment"}, refusal=failure
    )
    clock = Clock()
    loop = looper(httpserver, slurm, clock=clock)
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [knode()],
        [],
    )
    run(httpserver, loop)
    assert slurm.attempts == [("gpu-0", NodeUpdate(comment=COMMENT))] and slurm.updates == []
    # the next pass (the refused comment not re-sent yet): still no IDLE
    httpserver.clear()
    clock.now += 1
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [knode()],
        [],
    )
    run(httpserver, loop)
    assert NodeUpdate(state=("IDLE",)) not in [u for _, u in slurm.attempts]
    # the comment goes through: the IDLE follows it in the same pass
    slurm.refuse.clear()
    clock.now += 600
    httpserver.clear()
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [knode()],
        [],
    )
    run(httpserver, loop)
    assert slurm.updates == [("gpu-0", NodeUpdate(comment=COMMENT)), ("gpu-0", NodeUpdate(state=("IDLE",)))]


def test_propagated_conditions_become_the_drain_reason(httpserver: HTTPServer) -> None:
    cordoned = knode(
        unschedulable=True,
        conditions=[
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"},
            {"type": "GpuHealthy", "status": "True", "reason": "XidError", "message": "xid 79"},
        ],
    )
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=())})
    expect_reads(
        httpserver,
        [pod("gpu-0", states=("IDLE",))],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [cordoned],
        [],
    )
    run(httpserver, looper(httpserver, slurm, propagated=("GpuHealthy",)))
    assert slurm.updates == [("gpu-0", NodeUpdate(state=("DRAIN",), reason="slurm-operator: (XidError: xid 79)"))]


def test_the_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.parse_args([]).propagated_node_conditions == ""
    monkeypatch.setenv("SLURM_SYNC_PROPAGATED_NODE_CONDITIONS", "GpuHealthy, MemoryPressure")
    args = cli.parse_args([])
    assert args.propagated_node_conditions == "GpuHealthy, MemoryPressure"
    captured = {}
    monkeypatch.setattr(
        cli, "Service", lambda cfg, *a: captured.setdefault("cfg", cfg) and (_ for _ in ()).throw(SystemExit(0))
    )
    monkeypatch.setattr(cli, "kube_client", lambda _: None)
    monkeypatch.setattr(cli, "Kube", lambda *a: None)
    with pytest.raises(SystemExit):
        cli.main(["--once", "--no-leader-elect"])
    assert captured["cfg"].propagated_node_conditions == ("GpuHealthy", "MemoryPressure")


# --- defunct nodes ----------------------------------------------------------------------------


def ds_nodeset() -> dict[str, Any]:
    obj = nodeset(observed=settled_hash())
    obj["spec"].update(scalingMode="DaemonSet", pruneSlurmNodeRecords="NodeNotFound")
    return obj


def expect_pod_get(server: HTTPServer, status: int, body: dict[str, Any] | None = None) -> None:
    if body is None:
        body = (
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            if status == 404
            else pod("gpu-k9")
        )
    server.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods/gpu-k9", "GET").respond_with_json(body, status=status)


def test_defunct_node_is_deleted_after_its_pod_answers_not_found(httpserver: HTTPServer) -> None:
    """No pod of the NodeSet is left, yet the Nodes are listed (the gate asks for them)."""
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    expect_pod_get(httpserver, 404)
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.slurm_writes == 1 and result.kube_writes == 0
    assert slurm.deleted == ["k9"]


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, None),
        (404, {"message": "no route"}),
        (500, {"kind": "Status", "code": 500}),
        (403, {"kind": "Status", "code": 403}),
    ],
    ids=["pod-exists", "bare-404", "server-error", "forbidden"],
)
def test_defunct_node_is_kept_unless_the_pod_is_surely_gone(
    httpserver: HTTPServer, status: int, body: dict[str, Any] | None
) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    expect_pod_get(httpserver, status, body)
    result = run(httpserver, looper(httpserver, slurm))
    assert slurm.deleted == [] and result.slurm_writes == 0
    assert result.ok == (status == 200)


def test_a_failed_node_listing_deletes_nothing(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    httpserver.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods", "GET").respond_with_json({"items": []})
    httpserver.expect_ordered_request(
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets", "GET"
    ).respond_with_json({"items": [ds_nodeset()]})
    httpserver.expect_ordered_request("/api/v1/nodes", "GET").respond_with_json(
        {"kind": "Status", "code": 500}, status=500
    )
    result = run(httpserver, looper(httpserver, slurm))
    assert not result.read_ok and slurm.deleted == []


def test_a_failed_slurm_listing_deletes_nothing(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm(
        {"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)},
        fail=SlurmRejected("HTTP 200 with errors", status=200),
    )
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    result = run(httpserver, looper(httpserver, slurm))
    assert not result.slurm_ok and slurm.deleted == []


def test_a_node_that_still_maps_is_not_even_checked(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1"), knode("k9")], [])
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and slurm.deleted == [] and len(httpserver.log) == 4
