"""The slurmrestd client against the real Slurm lab (hack/slurm/up.sh, Slurm 26.05).

Each test leaves the nodes it touched idle and undrained and cancels its jobs, so the tests run
in any order. Slurm's state lags its answers, so tests poll (``wait_for``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from slurm_sync.hostlist import expand_hostlist
from slurm_sync.slurm.client import SUPPORTED_VERSIONS, SlurmClient
from slurm_sync.slurm.errors import ESLURM_ALREADY_DONE, SlurmNotFound, SlurmRejected, SlurmUnsupported
from slurm_sync.slurm.types import GresLayout, Job, Node, NodeUpdate, SlurmVersion
from tests.fixtures.slurm import SlurmLab, wait_for

pytestmark = pytest.mark.slurm

LAB_NODES = {"n1", "n2", "n3", "n4"}
TEST_REASON = "slurm-operator: client test"


@pytest.fixture
def client(slurm_lab: SlurmLab) -> Iterator[SlurmClient]:
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30) as c:
        yield c


def restore(slurm_lab: SlurmLab, client: SlurmClient, name: str) -> None:
    """Lift any drain we left on ``name`` (with scontrol, so it works even if REST broke
    mid-test; it fails harmlessly on an undrained node) and wait until the node is usable."""
    slurm_lab.run("scontrol", "update", f"nodename={name}", "state=resume")
    wait_for(
        lambda: node_named(client, name),
        lambda n: n.state & {"DRAIN", "DOWN", "NOT_RESPONDING"} == set(),
        what=f"{name} back to service",
    )


def node_named(client: SlurmClient, name: str) -> Node:
    """One node, from the full listing (the client reads nodes only as the loops do: all at once)."""
    (node,) = [n for n in client.list_nodes().items if n.name == name]
    return node


def scancel(slurm_lab: SlurmLab, job_id: int) -> None:
    slurm_lab.run("scancel", str(job_id))


def sbatch_sleep(slurm_lab: SlurmLab, node: str, *options: str) -> int:
    done = slurm_lab.run("sbatch", "--wrap", "sleep 60", "-w", node, "-t", "5", "-o", "/dev/null", *options, check=True)
    match = re.search(r"Submitted batch job (\d+)", done.stdout)
    assert match, done.stdout + done.stderr
    return int(match.group(1))


def test_negotiates_the_newest_version_and_reports_slurm(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    offered = client.api.offered
    assert client.api.version == next(v for v in SUPPORTED_VERSIONS if v in offered)
    assert client.api.version == slurm_lab.api_version == "v0.0.45"
    result = client.ping()
    assert result.slurm_version >= SlurmVersion(26, 5, 0)
    assert str(result.slurm_version) == slurm_lab.version
    assert result.responding and all(c.pinged == "UP" and c.latency_us is not None for c in result.responding)
    assert any(c.primary for c in result.controllers)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_supported_version_reads_nodes_and_ping(slurm_lab: SlurmLab, version: str) -> None:
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, versions=(version,)) as client:
        assert client.api.version == version
        assert client.ping().responding
        assert {n.name for n in client.list_nodes().items} == LAB_NODES


def test_lists_nodes_with_their_states(client: SlurmClient) -> None:
    listing = client.list_nodes()
    assert not listing.unchanged and listing.last_update
    nodes = {n.name: n for n in listing.items}
    assert set(nodes) == LAB_NODES
    for node in nodes.values():
        assert node.base_state in {"IDLE", "MIXED", "ALLOCATED"}, node
        assert node.cpus and node.real_memory and node.partitions == ("debug",)
        assert node.name in node.features  # the lab gives each node a feature equal to its name


def test_update_time_costs_nothing_when_unchanged_and_a_drain_shows_as_one_change(
    client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    watch = client.node_watch()
    # settle: wait for a poll in which Slurm reports nothing changed
    wait_for(watch.poll, lambda snap: not snap.changed and not snap.removed, what="a quiet cluster")
    before = client.list_nodes(since=watch.poll().last_update)
    assert before.unchanged and before.items == ()
    try:
        client.update_node("n3", NodeUpdate(state=("DRAIN",), reason=TEST_REASON))
        raw = client.list_nodes(since=before.last_update)
        # Slurm answers any change with every node, which keeps the view complete
        assert not raw.unchanged and {n.name for n in raw.items} == LAB_NODES
        snap = watch.poll()
        assert snap.changed == {"n3"} and not snap.removed
        assert set(snap.items) == LAB_NODES and snap.items["n3"].drained
        assert not watch.poll().changed
    finally:
        restore(slurm_lab, client, "n3")


def test_drain_with_reason_then_resume(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    try:
        client.update_node("n3", NodeUpdate(state=("DRAIN",), reason=TEST_REASON))
        node = node_named(client, "n3")
        assert "DRAIN" in node.state and node.reason == TEST_REASON and node.reason_set_by_user
        assert node.drained and not node.draining
        client.update_node("n3", NodeUpdate(state=("RESUME",)))
        resumed = wait_for(lambda: node_named(client, "n3"), lambda n: "DRAIN" not in n.state, what="n3 resumed")
        assert resumed.reason == "" and not resumed.drained
    finally:
        restore(slurm_lab, client, "n3")


def test_comment_and_features_update(client: SlurmClient) -> None:
    before = node_named(client, "n1")
    comment = json.dumps({"namespace": "default", "podName": "slurm-worker-0"})
    try:
        client.update_node(
            "n1",
            NodeUpdate(
                comment=comment,
                features=(*before.features, "k8s/test"),
                features_act=(*before.active_features, "k8s/test"),
            ),
        )
        after = node_named(client, "n1")
        assert after.comment == comment
        assert "k8s/test" in after.features and "k8s/test" in after.active_features
    finally:
        client.update_node("n1", NodeUpdate(comment="", features=before.features, features_act=before.active_features))
    assert node_named(client, "n1").features == before.features


def test_a_busy_node_is_draining_not_drained_until_its_job_ends(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    job_id = sbatch_sleep(slurm_lab, "n2")
    try:
        job = wait_for(lambda: client.get_job(job_id), lambda j: "RUNNING" in j.state, what="job running")
        assert job.nodes == "n2" and not job.external and job.user_name == "root"
        assert job_id in {j.job_id for j in client.list_jobs().items}
        wait_for(lambda: node_named(client, "n2"), lambda n: n.busy, what="n2 busy")
        client.update_node("n2", NodeUpdate(state=("DRAIN",), reason=TEST_REASON))
        node = node_named(client, "n2")
        assert node.draining and not node.drained and node.base_state in {"MIXED", "ALLOCATED"}
        client.cancel_job(job_id)
        drained = wait_for(lambda: node_named(client, "n2"), lambda n: n.drained, what="n2 drained")
        assert not drained.busy and drained.reason == TEST_REASON
    finally:
        scancel(slurm_lab, job_id)
        restore(slurm_lab, client, "n2")


def test_external_job_submit_get_cancel(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    admin_comment = json.dumps({"pods": ["default/client-test"]})
    jobs = client.job_watch()
    wait_for(jobs.poll, lambda snap: not snap.changed and not snap.removed, what="no job changes")
    result = client.submit_external_job(
        {
            "name": "client-test-external",
            "partition": "debug",
            "required_nodes": ["n4"],
            "nodes": "1",
            "time_limit": {"set": True, "infinite": True},
            "current_working_directory": "/tmp",
            "admin_comment": admin_comment,
        }
    )
    try:
        job: Job = wait_for(
            lambda: client.get_job(result.job_id), lambda j: "RUNNING" in j.state, what="external job running"
        )
        assert job.external and job.admin_comment == admin_comment and job.nodes == "n4"
        assert job.name == "client-test-external"
        seen = jobs.poll()
        assert result.job_id in seen.changed and seen.items[result.job_id].external
        assert node_named(client, "n4").busy
        client.cancel_job(result.job_id)
        wait_for(lambda: client.get_job(result.job_id), lambda j: "CANCELLED" in j.state, what="job cancelled")
        with pytest.raises(SlurmRejected) as again:
            client.cancel_job(result.job_id)
        assert ESLURM_ALREADY_DONE in again.value.numbers
    finally:
        scancel(slurm_lab, result.job_id)


def test_job_update_sets_the_comment(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    done = slurm_lab.run("sbatch", "--hold", "--wrap", "true", "-o", "/dev/null", check=True)
    job_id = int(re.search(r"(\d+)", done.stdout).group(1))
    try:
        client.update_job(job_id, {"comment": "slurm-operator: updated"})
        assert client.get_job(job_id).comment == "slurm-operator: updated"
    finally:
        scancel(slurm_lab, job_id)


def test_invalid_requests_are_rejected_with_slurms_message(client: SlurmClient, slurm_lab: SlurmLab) -> None:
    with pytest.raises(SlurmRejected, match="Invalid partition name specified") as bad_partition:
        client.submit_external_job({"name": "x", "partition": "no-such-partition", "nodes": "1"})
    assert 2000 in bad_partition.value.numbers
    with pytest.raises(SlurmRejected, match="Invalid node state transition"):
        client.update_node("n1", NodeUpdate(state=("RESUME",)))  # n1 is not drained or down
    with pytest.raises(SlurmNotFound):
        client.get_job(99_999_999)
    with pytest.raises(SlurmNotFound):
        client.cancel_job(99_999_999)
    with pytest.raises(SlurmNotFound):
        client.delete_node("no-such-node")
    with pytest.raises(SlurmRejected) as info:
        client.get_job(99_999_999)
    assert slurm_lab.token not in f"{info.value} {info.value!r} {client!r}"


def test_reservation_create_list_delete(client: SlurmClient) -> None:
    name = "client-test-resv"
    start = int(time.time()) + 3600
    client.create_reservation(
        {
            "name": name,
            "node_list": ["n1"],
            "users": ["root"],
            "start_time": {"set": True, "number": start},
            "duration": {"set": True, "number": 10},
        }
    )
    try:
        (resv,) = [r for r in client.list_reservations().items if r.name == name]
        assert resv.node_list == "n1" and resv.start_time == start and resv.end_time == start + 600
    finally:
        client.delete_reservation(name)
    assert name not in {r.name for r in client.list_reservations().items}
    with pytest.raises(SlurmNotFound):
        client.delete_reservation(name)


# --- last in this file: their jobs end as they finish, a node change the quiet-cluster test above must not see


@pytest.mark.parametrize("version", ["v0.0.45", "v0.0.44"])
def test_job_layout_names_the_cores_and_gpus_a_job_holds_on_its_node(
    client: SlurmClient, slurm_lab: SlurmLab, version: str
) -> None:
    """GET resources/<job>: the abstract cores (bitmap) and GRES indexes, as `scontrol -d show job` shows them."""
    first = sbatch_sleep(slurm_lab, "n2", "-c", "1", "--gres=gpu:gpu.nvidia.com:1")
    job_id = sbatch_sleep(slurm_lab, "n2", "-c", "2", "--gres=gpu:gpu.nvidia.com:2")
    try:
        shown = wait_for(lambda: show_detail(slurm_lab, job_id), lambda s: "JobState=RUNNING" in s, what="job running")
        match = re.search(r"Nodes=n2 CPU_IDs=([0-9,-]+) .*GRES=gpu:gpu.nvidia.com:2\(IDX:([0-9,-]+)\)", shown)
        assert match, shown
        with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, versions=(version,)) as speaking:
            (layout,) = speaking.job_layout(job_id)
        assert (layout.node, layout.sockets, layout.cores_per_socket) == ("n2", 4, 1)  # CPUs=4: 4 sockets of 1 core
        bits = [i for i in range(8) if int(layout.core_bitmap, 16) >> i & 1]
        assert bits == [int(c) for c in expand_hostlist(f"[{match.group(1)}]")] and len(bits) == 2
        assert layout.gres == (GresLayout("gpu", "gpu.nvidia.com", 2, match.group(2)),)
        assert "0" not in expand_hostlist(f"[{match.group(2)}]")  # the first job's GPU is not this one's
    finally:
        scancel(slurm_lab, job_id)
        scancel(slurm_lab, first)
        # the next test wants a quiet cluster
        wait_for(lambda: node_named(client, "n2").state, lambda state: state == {"IDLE"}, what="n2 idle")


def test_v0_0_43_reports_no_job_layout(slurm_lab: SlurmLab) -> None:
    """Slurm 25.05's REST version has no GET resources/<job>: the client says so instead of asking."""
    with (
        SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, versions=("v0.0.43",)) as client,
        pytest.raises(SlurmUnsupported, match="does not report a job's resources per node"),
    ):
        client.job_layout(1)


def show_detail(slurm_lab: SlurmLab, job_id: int) -> str:
    return slurm_lab.run("scontrol", "-d", "show", "job", str(job_id), check=True).stdout
