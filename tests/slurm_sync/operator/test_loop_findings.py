"""Issue 10's operator findings against the real Slurm 26.05 lab, a wrong answer injected between
slurm_sync and the real slurmrestd only where Slurm itself would never give it: an empty node
listing kills no job, a slurmrestd of another cluster gets no write, and readiness names failing
writes. The lab is shared: only n3/n4 are touched and restored."""

from __future__ import annotations

import copy

import httpx
import pytest

from slinky_common import names
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.slurm_sync.inject import Injector, answer, slurm_meta
from tests.slurm_sync.kubefixtures import NS, nodeset, pod
from tests.slurm_sync.servicerig import Rig, sbatch

pytestmark = pytest.mark.slurm
REASON = "slurm-operator: scale-in to 1 replicas"


def inject(rig: Rig) -> Injector:
    """Put an injector between the (first) cluster's client and the real slurmrestd."""
    injector = Injector()
    handle = rig.service.clusters.handles[f"{NS}/slurm"]
    handle.client._http._transport = injector
    return injector


def job_state(lab: SlurmLab, job: int) -> str:
    return lab.run("squeue", "-h", "-j", str(job), "-o", "%T", check=True).stdout.strip()


def test_an_empty_node_listing_kills_no_job(rig: Rig) -> None:
    """Finding 1: one `200 {"nodes": []}` used to mark every pod absent and unprotect a busy one."""
    job = sbatch(rig.lab, "n3")
    try:
        wait_for(lambda: job_state(rig.lab, job), lambda s: s == "RUNNING", what="job running on n3")
        rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
        for _ in range(2):
            assert rig.service.run_pass()
        wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 draining")
        assert rig.service.run_pass()
        assert rig.pod("gpu-n3")["metadata"]["labels"].get(names.LABEL_POD_PROTECT) == "true"
        busy = copy.deepcopy(rig.pod("gpu-n3"))
        injector = inject(rig)
        empty = {
            "nodes": [],
            "last_update": {"set": True, "infinite": False, "number": 4_000_000_000},
            "errors": [],
            "warnings": [],
            "meta": slurm_meta(rig.service.clusters.handles[f"{NS}/slurm"].client.cluster or ""),
        }
        injector.rules.append(answer("GET", "/nodes/", 200, empty))
        before = len(rig.kube.writes)
        for _ in range(3):
            assert not rig.service.run_pass()
            ready, why = rig.service.health.ready()
            assert not ready and "the node listing lacks 4 of the 4 nodes it had, yet Slurm still has node" in why
        assert rig.object_writes(before) == []
        (event,) = rig.events(before)  # three passes, one Warning on the Controller (rate-limited)
        assert event[:4] == ("Warning", "SlurmUnreadable", "Controller", "slurm") and "a wrong listing" in event[4]
        assert rig.pod("gpu-n3") == busy  # protection, conditions, no absent mark: all as they were
        assert injector.writes() == []
        assert job_state(rig.lab, job) == "RUNNING"
        injector.rules.clear()  # the fault clears: back by itself
        assert rig.service.run_pass() and rig.service.health.ready() == (True, "ok")
        assert names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations("gpu-n3")
        assert job_state(rig.lab, job) == "RUNNING"
    finally:
        rig.lab.run("scancel", str(job))


def add_second_controller(rig: Rig, cluster_name: str) -> None:
    """Controller `other` (Slurm cluster `cluster_name`) reached through the same --slurm-url, with
    a NodeSet pod on the lab's n3 and a drain intent for it."""
    controller = copy.deepcopy(rig.kube.get("controllers", NS, "slurm"))
    controller["metadata"].update(name="other", uid="uid-controller-other")
    controller["spec"]["clusterName"] = cluster_name
    rig.kube.add("controllers", controller)
    other_set = nodeset({"b-n3": "scale-in to 0 replicas"})
    other_set["metadata"].update(name="gpu-b", uid="uid-nodeset-b")
    other_set["spec"]["controllerRef"]["name"] = "other"
    rig.kube.add("nodesets", other_set)
    other_pod = pod("b-n3", "n3")
    other_pod["metadata"]["labels"][names.LABEL_CLUSTER] = "other"
    other_pod["metadata"]["ownerReferences"][0].update(name="gpu-b", uid="uid-nodeset-b")
    rig.kube.add("pods", other_pod)


def test_a_slurmrestd_of_another_cluster_gets_no_write_and_says_so(rig: Rig) -> None:
    """Finding 4: with --slurm-url and two Controllers, B's scale-in drained A's node n3."""
    add_second_controller(rig, "cluster-b")
    for _ in range(2):
        rig.service.run_pass()
    out = rig.slurm_node("n3")
    assert "DRAIN" not in out and "scale-in to 0" not in out and "b-n3" not in out
    assert '"podName":"gpu-n3"' in out  # cluster A's own comment on its node, never B's
    assert names.ANNOTATION_DRAINED not in (rig.pod("b-n3")["metadata"].get("annotations") or {})
    assert not any("/pods/b-n3" in w[1] for w in rig.kube.writes)
    ready, why = rig.service.health.ready()
    assert (
        not ready
        and f"{NS}/other: Slurm cluster cluster-b: " in why
        and "not 'cluster-b'; nothing is written there" in why
    )
    assert f"{NS}/slurm" not in why  # the right cluster is served as before
    events = [w for w in rig.kube.writes if w[0] == "POST" and "/events" in w[1]]
    assert len(events) == 1  # rate-limited: two passes, one Event
    (event,) = [body for *_, body in events]
    assert event["regarding"] == {
        "apiVersion": names.API_VERSION,
        "kind": "Controller",
        "namespace": NS,
        "name": "other",
        "uid": "uid-controller-other",
    }
    assert event["type"] == "Warning" and event["reason"] == "WrongSlurmCluster" and "cluster-b" in event["note"]


def test_readiness_names_the_cluster_and_the_failing_write(rig: Rig) -> None:
    """Finding 5: with every POST answering 503, /readyz said 200 while no drain could happen."""
    assert rig.service.run_pass()
    injector = inject(rig)
    injector.rules.append(
        lambda request: (
            httpx.Response(503, text="<html>503 Service Unavailable</html>") if request.method == "POST" else None
        )
    )
    rig.set_intents({"gpu-n4": "scale-in to 1 replicas"})
    assert not rig.service.run_pass()
    ready, why = rig.service.health.ready()
    assert not ready and why.startswith(f"failing: {NS}/slurm: Slurm cluster ")
    assert "update node n4 (DRAIN): POST " in why and "HTTP 503" in why
    assert "DRAIN" not in rig.slurm_node("n4")
    injector.rules.clear()
    assert rig.service.run_pass() and rig.service.health.ready() == (True, "ok")
    wait_for(lambda: rig.slurm_node("n4"), lambda s: f"Reason={REASON}" in s, what="n4 drained once Slurm takes writes")
