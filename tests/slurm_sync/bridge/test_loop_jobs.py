"""The bridge loop against the real Slurm 26.05 lab and the fake apiserver: submit, label, bind,
cancel, delete, adoption after a crash, fail closed, node drains, and the cost of one pod.

The lab is shared: jobs are confined to n1/n2 (the lab's nodes carry their name as a feature),
every job is cancelled and every node resumed in ``finally`` blocks. Kubernetes nodes are named
``kn1``..``kn4`` and map to Slurm's n1..n4 by the slurm-nodename label (vector 15).
"""

from __future__ import annotations

import re

import httpx
import pytest

from slinky_common import names
from slurm_sync.passes import FOLLOW_UP
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.slurm_sync.bridge.labrig import (
    ON_N1_N2,
    Rig,
    add,
    events,
)
from tests.slurm_sync.bridgekube import BNS, OUR_TAINT, bridge_pod, job_body, kube_node

pytestmark = pytest.mark.slurm


def test_pod_is_submitted_once_labelled_bound_and_its_deletion_cancels_the_job(rig: Rig) -> None:
    """Vectors 13 (label, finalizer), 14 (annotation and binding), 15 (node name label), 26, 27."""
    add(rig, bridge_pod("p1", None, job_body([f"{BNS}/p1"], **ON_N1_N2)))
    loop = rig.loop()
    first = loop.run_pass()
    assert first.ok and first.follow_up == FOLLOW_UP  # the job most often starts at once: look again soon
    job_id = rig.job_id("p1")
    shown = rig.show(job_id)
    assert f'AdminComment={{"pods":["{BNS}/p1"]}}' in shown and "BatchFlag=0" in shown
    assert "EXTERNAL_JOB" in loop.slurm.get_job(job_id).flags
    submitted = f"Submitted Slurm job {job_id} for Pod/{BNS}/p1; the pod is bound to a node when Slurm starts it."
    assert events(rig) == [("Normal", "SlurmJobSubmitted", "p1", submitted)]
    label = rig.kube.writes_to("/pods/p1")[-1]
    assert label[0] == "PATCH" and label[2] == "application/strategic-merge-patch+json"
    assert label[3]["metadata"]["labels"] == {names.LABEL_SLURM_JOB_ID: str(job_id)}
    assert label[3]["metadata"]["finalizers"] == [names.FINALIZER_SCHEDULER]
    assert label[3]["metadata"]["resourceVersion"] == "5"
    again = loop.run_pass()
    assert again.ok and rig.requests.count("POST /slurm/v0.0.45/job/submit") == 1  # once
    assert again.follow_up is None  # nothing written to Slurm: the usual interval
    node = re.search(r"\n\s+NodeList=(n\d)", rig.wait_running(job_id)).group(1)  # type: ignore[union-attr]
    before = len(rig.kube.writes)
    assert loop.run_pass().ok
    annotate, binding, bound = rig.kube.writes[before:]
    assert annotate[3] == {"metadata": {"annotations": {names.ANNOTATION_SLURM_NODE: f"k{node}"}}}
    assert binding[:3] == ("POST", f"/api/v1/namespaces/{BNS}/pods/p1/binding", "application/json")
    assert binding[3] == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p1", "namespace": BNS, "uid": "uid-p1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": f"k{node}"},
    }
    bound_note = f"Bound to node k{node}: Slurm started job {job_id} on its node {node}."
    assert events(rig, before) == [("Normal", "PodBound", "p1", bound_note)]
    assert bound[3]["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": BNS, "name": "p1", "uid": "uid-p1"}
    before = len(rig.kube.writes)
    assert loop.run_pass().ok and rig.kube.writes[before:] == []  # settled
    # kubectl delete: the finalizer holds the pod; the kubelet reports it terminal
    httpx.delete(f"{rig.url}api/v1/namespaces/{BNS}/pods/p1")
    rig.kube.pod("p1")["status"]["phase"] = "Failed"
    deleting = rig.kube.pod("p1")["metadata"]["resourceVersion"]  # what the releasing pass reads
    assert loop.run_pass().ok
    assert "JobState=CANCELLED" in rig.show(job_id)
    assert [e[:3] for e in events(rig, before)] == [("Normal", "SlurmJobCancelled", "p1")]
    release = rig.kube.writes[-1]
    assert release[3] == {
        "metadata": {
            "resourceVersion": deleting,  # guarded: refused (409) if the pod changed
            "annotations": {names.ANNOTATION_JOB_RELEASED: str(job_id)},
            "$deleteFromPrimitiveList/finalizers": [names.FINALIZER_SCHEDULER],  # finalizers merge as a set
        }
    }
    assert ("pods", BNS, "p1") not in rig.kube.objects  # finalizer gone: the apiserver removed it


def test_group_of_two_pods_gets_one_two_node_job_and_distinct_nodes(rig: Rig) -> None:
    group = f"Job.batch/{BNS}/gang"
    body = job_body([f"{BNS}/g0", f"{BNS}/g1"], **ON_N1_N2)
    add(rig, bridge_pod("g0", group, body), bridge_pod("g1", group, body))
    loop = rig.loop()
    assert loop.run_pass().ok
    job_id = rig.job_id("g0")
    assert rig.job_id("g1") == job_id
    assert "NumNodes=2" in rig.wait_running(job_id)
    assert loop.run_pass().ok
    bound = {rig.kube.pod(p)["spec"]["nodeName"] for p in ("g0", "g1")}
    assert bound == {"kn1", "kn2"}
    assert rig.requests.count("POST /slurm/v0.0.45/job/submit") == 1


def test_scancel_deletes_the_bound_pod_never_an_unbound_one(rig: Rig) -> None:
    """Vector 25 on the real Slurm."""
    add(rig, bridge_pod("p2", None, job_body([f"{BNS}/p2"], **ON_N1_N2)))
    loop = rig.loop()
    assert loop.run_pass().ok
    job_id = rig.job_id("p2")
    rig.wait_running(job_id)
    assert loop.run_pass().ok and rig.kube.pod("p2")["spec"]["nodeName"]
    # an unbound pod of another job that Slurm cancels is left alone
    add(rig, bridge_pod("p3", None, job_body([f"{BNS}/p3"], **ON_N1_N2, hold=True)))
    assert loop.run_pass().ok
    other = rig.job_id("p3")
    rig.lab.run("scancel", str(job_id), str(other), check=True)
    before = len(rig.kube.writes)
    assert loop.run_pass().ok
    deletes = [w for w in rig.kube.writes[before:] if w[0] == "DELETE"]
    assert [(w[1], w[3]["preconditions"]) for w in deletes] == [
        (f"/api/v1/namespaces/{BNS}/pods/p2", {"uid": "uid-p2"})
    ]
    assert "deletionTimestamp" not in rig.kube.pod("p3")["metadata"]


def test_restart_between_submit_and_label_adopts_the_job(rig: Rig) -> None:
    add(rig, bridge_pod("p4", None, job_body([f"{BNS}/p4"], **ON_N1_N2, hold=True)))
    rig.kube.failing.add(f"PATCH /api/v1/namespaces/{BNS}/pods/p4")
    crashed = rig.loop()
    for _ in range(2):  # submits once, the label write fails; the same process remembers the job
        assert any("label pod" in e for e in crashed.run_pass().errors)
    assert names.LABEL_SLURM_JOB_ID not in rig.kube.pod("p4")["metadata"]["labels"]
    rig.kube.failing.clear()
    submitted = rig.requests.count("POST /slurm/v0.0.45/job/submit")
    restarted = rig.loop()
    assert restarted.run_pass().ok
    assert rig.requests.count("POST /slurm/v0.0.45/job/submit") == submitted == 1
    job_id = rig.job_id("p4")
    assert f'"{BNS}/p4"' in rig.show(job_id)


def test_slurmrestd_errors_change_nothing(rig: Rig) -> None:
    add(rig, bridge_pod("p5", None, job_body([f"{BNS}/p5"], **ON_N1_N2)))
    good = rig.loop()
    assert good.run_pass().ok
    job_id = rig.job_id("p5")
    rig.wait_running(job_id)
    rig.kube.pod("p5")["status"]["phase"] = "Succeeded"  # would cancel the job, if Slurm could be asked
    add(rig, bridge_pod("p6", None, job_body([f"{BNS}/p6"], **ON_N1_N2)))  # would be submitted
    before = len(rig.kube.writes)
    for broken in (rig.loop(slurm_url="http://127.0.0.1:9"), rig.loop(token="not-a-jwt")):
        result = broken.run_pass()
        assert not result.ok
        assert rig.kube.writes[before:] == []
    assert "JobState=RUNNING" in rig.show(job_id)
    assert names.LABEL_SLURM_JOB_ID not in rig.kube.pod("p6")["metadata"]["labels"]


def test_cordon_drains_uncordon_undrains_and_an_administrators_drain_survives(rig: Rig) -> None:
    """Vectors 22 (taint only where the Slurm node exists) and 23 (drain ownership)."""
    kube = rig.kube
    kube.objects[("nodes", "", "kn2")] = kube_node(
        "kn2", slurm_name="n2", taint=True, drain="slurm-bridge: Corresponding Kubernetes node (kn2) is unschedulable"
    )
    kube.objects[("nodes", "", "kn1")] = kube_node("kn1", slurm_name="n1", taint=True)
    kube.objects[("nodes", "", "kube-0")] = kube_node("kube-0", taint=True)  # no Slurm node of that name
    loop = rig.loop()
    try:
        rig.lab.run("scontrol", "update", "nodename=n1", "state=drain", "reason=maint", check=True)
        assert loop.run_pass().ok
        assert (
            "Reason=slurm-bridge: Corresponding Kubernetes node (kn2) is unschedulable"
            in rig.lab.run("scontrol", "show", "node", "n2").stdout
        )
        taints = {w[1]: (w[2], w[3]) for w in kube.writes if w[1].startswith("/api/v1/nodes/")}
        assert taints == {
            p: (
                "application/strategic-merge-patch+json",
                {"metadata": {"resourceVersion": "3"}, "spec": {"taints": [OUR_TAINT]}},
            )
            for p in ("/api/v1/nodes/kn1", "/api/v1/nodes/kn2")
        }
        # uncordon both: ours is lifted, the administrator's stays
        for name in ("kn1", "kn2"):
            kube.objects[("nodes", "", name)]["metadata"]["annotations"].pop(names.ANNOTATION_DRAIN_INTENT, None)
        assert loop.run_pass().ok
        n2 = wait_for(
            lambda: rig.lab.run("scontrol", "show", "node", "n2").stdout,
            lambda s: "DRAIN" not in s,
            what="n2 undrained",
        )
        assert "slurm-bridge" not in n2
        assert "Reason=maint" in rig.lab.run("scontrol", "show", "node", "n1").stdout
    finally:
        for n in ("n1", "n2"):
            rig.lab.run("scontrol", "update", f"nodename={n}", "state=resume")


def test_external_node_registration_is_checked_and_sent_to_new_node(rig: Rig) -> None:
    """Vector 24 (Slurm side), end to end on the lab (MaxNodeCount leaves room for dynamic nodes):
    an unknown partition sends nothing; a known one registers the node as EXTERNAL through
    POST new/node, the node is marked registered and tainted; removing the intent drains the
    Slurm node and deletes it once idle, and the mark goes."""
    conf = (
        "NodeName=ext1 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 CPUs=2 RealMemory=512 State=External Feature=debug"
    )
    intent = {"name": "ext1", "cpus": 2, "real_memory": 512, "features": ["nope"], "topology": "", "node_conf": conf}
    kube = rig.kube
    kube.objects[("nodes", "", "ext1")] = kube_node("ext1", taint=True, registration=intent)
    loop = rig.loop()
    try:
        result = loop.run_pass()
        assert any("could not validate partition(s) nope" in e for e in result.errors) and result.ready
        assert not any("new/node" in r for r in rig.requests)
        kube.objects[("nodes", "", "ext1")] = kube_node(
            "ext1", taint=True, registration={**intent, "features": ["debug"]}
        )
        assert loop.run_pass().ok
        assert rig.requests.count("POST /slurm/v0.0.45/new/node/") == 1
        shown = rig.lab.run("scontrol", "show", "node", "ext1", check=True).stdout
        assert "EXTERNAL" in shown and "AvailableFeatures=debug" in shown and "CPUTot=2" in shown
        assert loop.run_pass().ok
        node = kube.objects[("nodes", "", "ext1")]
        assert node["metadata"]["annotations"][names.ANNOTATION_EXTERNAL_NODE_REGISTERED] == "ext1"
        assert node["spec"]["taints"] == [OUR_TAINT]
        before = len(kube.writes)
        assert (
            loop.run_pass().ok
            and kube.writes[before:] == []
            and rig.requests.count("POST /slurm/v0.0.45/new/node/") == 1
        )
        # the label goes: the node hook withdraws the intent, the registered mark stays until we confirm
        node["metadata"]["annotations"].pop(names.ANNOTATION_EXTERNAL_NODE_INTENT)
        assert loop.run_pass().ok
        assert (
            "Reason=slurm-bridge: removing external node ext1" in rig.lab.run("scontrol", "show", "node", "ext1").stdout
        )
        assert loop.run_pass().ok
        gone = rig.lab.run("scontrol", "show", "node", "ext1")
        assert gone.returncode != 0 or "not found" in (gone.stdout + gone.stderr)
        assert loop.run_pass().ok
        assert (
            names.ANNOTATION_EXTERNAL_NODE_REGISTERED
            not in kube.objects[("nodes", "", "ext1")]["metadata"]["annotations"]
        )
    finally:
        rig.lab.run("scontrol", "delete", "nodename=ext1")


def _sbatch_held(lab: SlurmLab, count: int) -> list[int]:
    out = lab.run(
        "sh",
        "-c",
        f"for i in $(seq {count}); do sbatch --hold -o /dev/null -p debug --wrap true; done",
        check=True,
        timeout=300,
    ).stdout
    return [int(i) for i in re.findall(r"Submitted batch job (\d+)", out)]


@pytest.mark.parametrize("unrelated", [10, 200])
def test_scheduling_one_pod_costs_the_same_requests_with_many_jobs(rig: Rig, unrelated: int) -> None:
    """The same Slurm requests (bar job ids) for the submitting and the binding pass, 10 or 200 jobs queued."""
    held = _sbatch_held(rig.lab, unrelated)
    try:
        pod = f"c{unrelated}"
        add(rig, bridge_pod(pod, None, job_body([f"{BNS}/{pod}"], **ON_N1_N2)))
        loop = rig.loop()
        assert loop.run_pass().ok
        submit_pass = list(rig.requests)
        rig.requests.clear()
        rig.wait_running(rig.job_id(pod))
        assert loop.run_pass().ok and rig.kube.pod(pod)["spec"]["nodeName"]
        cost = (
            tuple(re.sub(r"\d+$", "<id>", r) for r in submit_pass),
            tuple(re.sub(r"\d+$", "<id>", r) for r in rig.requests),
        )
        COSTS[unrelated] = cost
        assert len(cost[0]) <= 5 and len(cost[1]) <= 2
        if len(COSTS) == 2:
            assert COSTS[10] == COSTS[200]
    finally:
        for chunk in range(0, len(held), 100):
            rig.lab.run("scancel", *map(str, held[chunk : chunk + 100]))


COSTS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
