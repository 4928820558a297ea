"""The loop's Kubernetes side against pytest-httpserver with the official client: every request
pinned (method, path, query, content type, body), and an unchanged cluster makes zero writes."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import PodState
from slurm_sync.slurm.errors import SlurmUnavailable
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET_OWNER,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    RecordedEvents,
    api_client,
    controller_pod,
    kube_node,
    node,
    nodeset,
    ping,
    pod,
    pvc,
    refused_url,
    running_job,
)
from tests.slurm_sync.operator.looprig import (
    COMMENT,
    IDLE_STATE,
    JSON_PATCH,
    MERGE,
    SMP,
    expect_patch,
    expect_reads,
    items,
    loop,
    run,
    settled_hash,
    steady_pod,
)


def test_unchanged_state_makes_zero_writes(server: HTTPServer) -> None:
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", comment=COMMENT)})
    expect_reads(
        server,
        [steady_pod()],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [kube_node()],
        [controller_pod("slurm-controller-0", active=True)],
    )
    metrics = Metrics()
    result = run(server, loop(server, slurm, metrics))
    assert result.ok and result.kube_writes == 0 and result.slurm_writes == 0
    assert [r.method for r, _ in server.log] == ["GET"] * 4
    assert slurm.updates == []
    assert metrics.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "pod", "verb": "patch"}) is None


def test_pod_conditions_are_a_strategic_merge_status_patch(server: HTTPServer) -> None:
    """New condition with a transition time, changed message only, stale one deleted by merge key."""
    observed = pod("gpu-0", states=("IDLE", "NOT_RESPONDING"), reason="old")
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", "DRAIN", reason="maint", comment=COMMENT)})
    drained = PodState(drained=True, absent=False, states=("SlurmNodeStateDrain", "SlurmNodeStateIdle"))
    expect_reads(
        server,
        [observed],
        [nodeset(observed=settled_hash(("gpu-0", drained)))],
        [kube_node()],
        [controller_pod("slurm-controller-0", active=True)],
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0",
        SMP,
        {"metadata": {"annotations": {names.ANNOTATION_DRAINED: "true"}}},
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0/status",
        SMP,
        {
            "status": {
                "conditions": [
                    {"type": "SlurmNodeStateIdle", "message": "maint"},
                    {"type": "SlurmNodeStateDrain", "status": "True", "message": "maint", "lastTransitionTime": NOW},
                    {"type": "SlurmNodeStateNotResponding", "$patch": "delete"},
                ]
            }
        },
    )
    result = run(server, loop(server, slurm))
    assert result.ok and result.kube_writes == 2
    assert slurm.updates == [], "an administrator's drain is neither changed nor lifted"


def test_busy_pod_gets_protect_label_and_nodeset_is_touched(server: HTTPServer) -> None:
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "ALLOCATED", comment=COMMENT)})
    allocated = PodState(drained=False, absent=False, states=("SlurmNodeStateAllocated",))
    expect_reads(server, [steady_pod()], [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))], [kube_node()], [])
    expect_patch(
        server, f"/api/v1/namespaces/{NS}/pods/gpu-0", SMP, {"metadata": {"labels": {names.LABEL_POD_PROTECT: "true"}}}
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0/status",
        SMP,
        {
            "status": {
                "conditions": [
                    {"type": "SlurmNodeStateAllocated", "status": "True", "message": "", "lastTransitionTime": NOW},
                    {"type": "SlurmNodeStateIdle", "$patch": "delete"},
                ]
            }
        },
    )
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {"metadata": {"annotations": {names.ANNOTATION_SLURM_OBSERVED: settled_hash(("gpu-0", allocated))}}},
    )
    metrics = Metrics()
    result = run(server, loop(server, slurm, metrics))
    assert result.ok and result.kube_writes == 3
    assert metrics.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "nodeset", "verb": "patch"}) == 1
    assert (
        metrics.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "pod_status", "verb": "patch"}) == 1
    )


def test_protection_off_removes_the_label_with_null(server: HTTPServer) -> None:
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "MIXED", comment=COMMENT)})
    mixed = PodState(drained=False, absent=False, states=("SlurmNodeStateMixed",))
    observed = pod("gpu-0", states=("MIXED",), labels={names.LABEL_POD_PROTECT: "true"})
    expect_reads(
        server, [observed], [nodeset(protect=False, observed=settled_hash(("gpu-0", mixed)))], [kube_node()], []
    )
    expect_patch(
        server, f"/api/v1/namespaces/{NS}/pods/gpu-0", SMP, {"metadata": {"labels": {names.LABEL_POD_PROTECT: None}}}
    )
    assert run(server, loop(server, slurm)).kube_writes == 1


def absence_loop(server: HTTPServer, slurm: FakeSlurm, clock: list[float]) -> OperatorLoop:
    """A loop whose clock the test moves, with absence confirmed 5 s after Slurm's first not-found."""
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,
        Kube(api_client(server.url_for("/"))),
        Metrics(),  # type: ignore[arg-type]
        events=RecordedEvents(),
        now=lambda: NOW,
        clock=lambda: clock[0],
        absence_confirm_seconds=5,
    )


def test_absent_node_marks_pod_and_clears_conditions_once_slurm_said_so_twice(server: HTTPServer) -> None:
    """Absence is proven: Slurm's not-found for the node by name, again on a later pass after the delay."""
    slurm = FakeSlurm({"other": node("other", "IDLE")})
    clock = [100.0]
    looper = absence_loop(server, slurm, clock)
    absent = PodState(drained=False, absent=True, states=())
    observed = pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_DRAINED: "true"})
    as_is = PodState(drained=True, absent=False, states=("SlurmNodeStateIdle",))
    for _ in range(2):  # asked once; then asked again too soon: nothing written
        expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", as_is)))], [kube_node()], [])
        result = run(server, looper)
        assert result.kube_writes == 0 and result.ready
    clock[0] += 5
    expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", absent)))], [kube_node()], [])
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0",
        SMP,
        {"metadata": {"annotations": {names.ANNOTATION_DRAINED: None, names.ANNOTATION_SLURM_NODE_ABSENT: "true"}}},
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0/status",
        SMP,
        {"status": {"conditions": [{"type": "SlurmNodeStateIdle", "$patch": "delete"}]}},
    )
    assert run(server, looper).kube_writes == 2
    assert slurm.asked == ["gpu-0"] * 3


def test_a_node_the_listing_omits_but_slurm_has_gets_no_write(server: HTTPServer) -> None:
    busy = node("gpu-0", "ALLOCATED", comment=COMMENT)
    slurm = FakeSlurm({"gpu-0": busy, **{f"x{i}": node(f"x{i}", "IDLE") for i in range(9)}}, unlisted={"gpu-0"})
    observed = pod("gpu-0", states=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"})
    state = PodState(drained=False, absent=False, states=("SlurmNodeStateAllocated",))
    looper = loop(server, slurm)
    for _ in range(3):
        expect_reads(
            server,
            [observed],
            [nodeset(observed=settled_hash(("gpu-0", state)), intents={"gpu-0": "scale-in"})],
            [kube_node()],
            [],
        )
        result = run(server, looper)
        assert result.kube_writes == 0 and result.slurm_writes == 0 and result.ready
    assert slurm.asked == ["gpu-0"] * 3 and slurm.updates == []


def test_an_empty_listing_after_a_full_one_is_a_fault(server: HTTPServer, caplog: pytest.LogCaptureFixture) -> None:
    """Finding 1: one `200 {"nodes": []}` once marked every pod absent and unprotected a busy one."""
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "ALLOCATED", comment=COMMENT), "gpu-1": node("gpu-1", "IDLE")})
    observed = pod("gpu-0", states=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"})
    state = PodState(drained=False, absent=False, states=("SlurmNodeStateAllocated",))
    looper = loop(server, slurm)
    expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", state)))], [kube_node()], [])
    assert run(server, looper).ready
    slurm.unlisted = {"gpu-0", "gpu-1"}
    for _ in range(3):
        expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", state)))], [kube_node()], [])
        result = run(server, looper)
        assert result.kube_writes == 0 and result.slurm_writes == 0
        assert not result.ready and any(
            "lacks 2 of the 2 nodes it had, yet Slurm still has node gpu-0" in r for r in result.unready
        )
    assert "a wrong listing, nothing written" in caplog.text
    slurm.unlisted = set()  # the fault clears: back by itself
    expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", state)))], [kube_node()], [])
    assert run(server, looper).ready


def test_a_node_said_gone_twice_that_the_job_listing_shows_busy_is_never_absent(server: HTTPServer) -> None:
    """Issue 24: an empty node listing and a not-found for each node, pass after pass, while the job
    listing of the same passes shows a job on the node: busy evidence wins. No mark, no label or condition
    removed; the contradiction named in readiness; both listings read whole on the next pass."""
    slurm = FakeSlurm({"other": node("other", "IDLE")}, jobs={7: running_job(7, "gpu-0")})
    clock = [100.0]
    looper = absence_loop(server, slurm, clock)
    observed = pod("gpu-0", states=("ALLOCATED",), labels={names.LABEL_POD_PROTECT: "true"})
    state = PodState(drained=False, absent=False, states=("SlurmNodeStateAllocated",))
    for _ in range(3):  # long enough apart for Slurm's not-found to confirm an absence
        expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", state)))], [kube_node()], [])
        result = run(server, looper)
        clock[0] += 10
        assert result.kube_writes == 0 and result.slurm_writes == 0 and not result.ready
        assert result.unready == (
            "node gpu-0: missing from Slurm's node listing, yet its job listing shows job(s) 7 running there: "
            "contradicting answers, nothing written for it",
        )
    assert slurm.relists == 3 and slurm.updates == []


def test_nodes_that_really_left_slurm_are_accepted_once_slurm_confirms_each(server: HTTPServer) -> None:
    slurm = FakeSlurm({f"x{i}": node(f"x{i}", "IDLE") for i in range(4)})
    looper = loop(server, slurm)
    expect_reads(server, [], [], None, [])
    assert run(server, looper).ready
    slurm.nodes = {"x0": slurm.nodes["x0"]}  # an administrator deleted three node records
    expect_reads(server, [], [], None, [])
    assert run(server, looper).ready and sorted(slurm.asked) == ["x1", "x2", "x3"]


def test_slurm_down_makes_no_pod_write(server: HTTPServer) -> None:
    """Fail closed: marks stay as they are (unknown is not false), nothing else is written."""
    slurm = FakeSlurm({}, fail=SlurmUnavailable("connection refused"))
    observed = pod("gpu-0", states=("IDLE", "DRAIN"), annotations={names.ANNOTATION_DRAINED: "true"})
    state = PodState(drained=True, absent=False, states=("SlurmNodeStateDrain", "SlurmNodeStateIdle"))
    expect_reads(
        server,
        [observed],
        [nodeset(observed=settled_hash(("gpu-0", state)))],
        [kube_node()],
        [controller_pod("slurm-controller-0", active=True)],
    )
    metrics = Metrics()
    result = run(server, loop(server, slurm, metrics))
    assert not result.slurm_ok and not result.ok and result.kube_writes == 0
    labels = {"cluster": CLUSTER, "kind": "unavailable"}
    errors = metrics.registry.get_sample_value("slurm_sync_slurm_errors_total", labels)
    assert errors == 2  # nodes, ping
    assert metrics.registry.get_sample_value("slurm_sync_cluster_up", {"cluster": CLUSTER}) == 0


def test_conflict_is_retried_from_a_fresh_read(server: HTTPServer) -> None:
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", "DRAIN", reason="maint", comment=COMMENT)})
    drained = PodState(drained=True, absent=False, states=("SlurmNodeStateDrain", "SlurmNodeStateIdle"))
    expect_reads(
        server,
        [pod("gpu-0", states=("IDLE",), reason="maint")],
        [nodeset(observed=settled_hash(("gpu-0", drained)))],
        [kube_node()],
        [],
    )
    mark = {"metadata": {"annotations": {names.ANNOTATION_DRAINED: "true"}}}
    expect_patch(server, f"/api/v1/namespaces/{NS}/pods/gpu-0", SMP, mark, status=409)
    # meanwhile someone else wrote the drained mark: the fresh plan sends only the Drain condition
    fresh = pod("gpu-0", states=("IDLE",), reason="maint", annotations={names.ANNOTATION_DRAINED: "true"})
    server.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods/gpu-0", "GET").respond_with_json(fresh)
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0/status",
        SMP,
        {
            "status": {
                "conditions": [
                    {"type": "SlurmNodeStateDrain", "status": "True", "message": "maint", "lastTransitionTime": NOW}
                ]
            }
        },
    )
    result = run(server, loop(server, slurm))
    assert result.ok and result.kube_writes == 1


def test_active_controller_label_follows_ping(server: HTTPServer) -> None:
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", comment=COMMENT)})
    slurm.pings = ping(("slurm-controller-0", False, False), ("slurm-controller-1", True, True))
    expect_reads(
        server,
        [steady_pod()],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [kube_node()],
        [controller_pod("slurm-controller-0", active=True), controller_pod("slurm-controller-1")],
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/slurm-controller-0",
        SMP,
        {"metadata": {"labels": {names.LABEL_ACTIVE_CONTROLLER: None}}},
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/slurm-controller-1",
        SMP,
        {"metadata": {"labels": {names.LABEL_ACTIVE_CONTROLLER: "true"}}},
    )
    assert run(server, loop(server, slurm)).kube_writes == 2


def test_pod_write_failure_blocks_the_undrain(server: HTTPServer) -> None:
    """The drained mark must be gone before our drain is lifted; if clearing it fails, no UNDRAIN."""
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", "DRAIN", reason="slurm-operator: scale-in", comment=COMMENT)})
    observed = pod(
        "gpu-0",
        states=("IDLE", "DRAIN"),
        reason="slurm-operator: scale-in",
        annotations={names.ANNOTATION_DRAINED: "true"},
    )
    state = PodState(drained=True, absent=False, states=("SlurmNodeStateDrain", "SlurmNodeStateIdle"))
    expect_reads(server, [observed], [nodeset(observed=settled_hash(("gpu-0", state)))], [kube_node()], [])
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/pods/gpu-0",
        SMP,
        {"metadata": {"annotations": {names.ANNOTATION_DRAINED: None}}},
        status=500,
    )
    result = run(server, loop(server, slurm))
    assert not result.ok and slurm.updates == []
    assert result.ready  # a refused write fails the pass (and `--once`), yet everything could be read


def test_unreadable_kubernetes_makes_the_pass_unready(server: HTTPServer) -> None:
    server.expect_request(f"/api/v1/namespaces/{NS}/pods", method="GET").respond_with_data("boom", status=500)
    result = run(server, loop(server, FakeSlurm({})))
    assert (result.ready, result.read_ok, result.slurm_ok) == (False, False, True)


PVC_SELECTOR = {"labelSelector": f"{names.LABEL_INSTANCE}=gpu,{names.LABEL_NAME}=slurmd"}
OTHER_OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": "uid-keeper"}


def test_deleted_nodeset_with_retain_releases_its_pvcs_by_a_guarded_json_patch(server: HTTPServer) -> None:
    """whenDeleted: Retain (the default): only our ownerReference goes, and only if the list is as read."""
    slurm = FakeSlurm({})
    claims = [pvc("data-gpu-0", NODESET_OWNER), pvc("data-gpu-1", OTHER_OWNER, NODESET_OWNER), pvc("data-gpu-2")]
    expect_reads(server, [], [nodeset(observed=settled_hash(), deleting=True)], None, [])
    server.expect_ordered_request(
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims", "GET", query_string=PVC_SELECTOR
    ).respond_with_json(items(*claims))
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-gpu-0",
        JSON_PATCH,
        [
            {"op": "test", "path": "/metadata/ownerReferences", "value": [NODESET_OWNER]},
            {"op": "remove", "path": "/metadata/ownerReferences"},
        ],
    )
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-gpu-1",
        JSON_PATCH,
        [
            {"op": "test", "path": "/metadata/ownerReferences", "value": [OTHER_OWNER, NODESET_OWNER]},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": [OTHER_OWNER]},
        ],
    )
    metrics = Metrics()
    result = run(server, loop(server, slurm, metrics))
    assert result.ok and result.kube_writes == 2
    assert metrics.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "pvc", "verb": "patch"}) == 2


def test_a_changed_owner_list_is_left_for_the_next_pass(server: HTTPServer) -> None:
    """422: the test op failed because someone changed ownerReferences since the list; not an error."""
    expect_reads(server, [], [nodeset(observed=settled_hash(), deleting=True, when_deleted="Retain")], None, [])
    server.expect_ordered_request(
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims", "GET", query_string=PVC_SELECTOR
    ).respond_with_json(items(pvc("data-gpu-0", NODESET_OWNER)))
    expect_patch(
        server,
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-gpu-0",
        JSON_PATCH,
        [
            {"op": "test", "path": "/metadata/ownerReferences", "value": [NODESET_OWNER]},
            {"op": "remove", "path": "/metadata/ownerReferences"},
        ],
        status=422,
    )
    result = run(server, loop(server, FakeSlurm({})))
    assert result.ok and result.kube_writes == 0


@pytest.mark.parametrize("state", [{"deleting": True, "when_deleted": "Delete"}, {"deleting": False}])
def test_pvcs_are_not_even_read_unless_a_retaining_nodeset_is_deleted(
    server: HTTPServer, state: dict[str, Any]
) -> None:
    expect_reads(server, [], [nodeset(observed=settled_hash(), **state)], None, [])
    result = run(server, loop(server, FakeSlurm({})))
    assert result.ok and [r.method for r, _ in server.log] == ["GET"] * 3


def test_the_guarded_patch_refuses_a_concurrent_owner_change() -> None:
    """The fake apiserver applies RFC 6902 as the real one: a failed test op changes nothing."""
    from slurm_sync.operator.plan import claim_release_patch
    from tests.slurm_sync.fakekube import _json_patch

    claim = pvc("data-gpu-0", NODESET_OWNER)
    ops = claim_release_patch(claim, NODESET_UID)
    assert ops is not None and claim_release_patch(claim, "another-uid") is None
    raced = pvc("data-gpu-0", NODESET_OWNER, OTHER_OWNER)
    assert _json_patch(raced, ops) is False and len(raced["metadata"]["ownerReferences"]) == 2
    assert _json_patch(claim, ops) is True and "ownerReferences" not in claim["metadata"]


class _GcSpyKube:
    """Reads that record whether automatic garbage collection was on (and can fail)."""

    same_dicts = False  # fresh listings, as the API server's

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.seen: list[bool] = []

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        self.seen.append(gc.isenabled())
        if self.fail:
            raise self.fail
        return []

    change_marks = Kube.change_marks  # this reader cannot tell what changed: no pass drains before its listing
    changes_since = Kube.changes_since

    def list_custom(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        return []


def test_a_pass_pauses_the_collector_and_restores_it() -> None:
    """Parsing 5,000 pods' JSON with the collector on cost 60% of a pass (`make bench`)."""
    kube = _GcSpyKube()
    looper = OperatorLoop(CLUSTER, NS, CLUSTER, FakeSlurm({}), kube, Metrics())  # type: ignore[arg-type]
    assert gc.isenabled()
    assert looper.run_pass().ok
    assert kube.seen == [False, False] and gc.isenabled()

    kube.fail = RuntimeError("boom")  # a failed read ends the pass unready, with the collector back on
    assert not looper.run_pass().ready and gc.isenabled()
    kube.fail = None

    def crash(*args: object) -> None:
        raise RuntimeError("a bug")

    looper._execute = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        looper.run_pass()
    assert gc.isenabled(), "an exception must not leave the collector off"
    del looper._execute

    gc.disable()  # someone else paused it: we leave it as we found it
    try:
        looper.run_pass()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_releasing_retained_pvcs_is_idempotent_against_a_stateful_apiserver(httpserver: HTTPServer) -> None:
    """Against the stateful fake: the first pass orphans our PVCs, the next one writes nothing."""
    from tests.slurm_sync.fakekube import FakeKube

    kube = FakeKube()
    kube.add("nodesets", nodeset(observed=settled_hash(), deleting=True))
    kube.add("persistentvolumeclaims", pvc("data-gpu-0", NODESET_OWNER))
    kube.add("persistentvolumeclaims", pvc("data-gpu-1", OTHER_OWNER, NODESET_OWNER))
    kube.install(httpserver)
    looper = loop(httpserver, FakeSlurm({}))
    assert looper.run_pass().kube_writes == 2
    assert "ownerReferences" not in kube.get("persistentvolumeclaims", NS, "data-gpu-0")["metadata"]
    assert kube.get("persistentvolumeclaims", NS, "data-gpu-1")["metadata"]["ownerReferences"] == [OTHER_OWNER]
    assert looper.run_pass().kube_writes == 0 and len(kube.writes) == 2


def test_an_unreachable_apiserver_fails_the_pass_without_a_write() -> None:
    """Not an ApiException (urllib3's MaxRetryError): the pass ends unready, Slurm is not touched."""
    slurm = FakeSlurm({"gpu-0": node("gpu-0", "IDLE", "DRAIN", reason="slurm-operator: scale-in")})
    metrics = Metrics()
    looper = OperatorLoop(CLUSTER, NS, CLUSTER, slurm, Kube(api_client(refused_url())), metrics)  # type: ignore[arg-type]
    result = looper.run_pass()
    assert (result.ready, result.read_ok, result.slurm_ok) == (False, False, True)
    assert result.kube_writes == result.slurm_writes == 0 and slurm.updates == []
    assert any("reading Kubernetes objects" in e for e in result.errors)
