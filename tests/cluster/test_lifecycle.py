"""No job lost across a NodeSet's lifecycle on the cluster lab (tests/cluster/lifecycle.py says what is
checked after every step). The scenarios of Slinky's lifecycle bugs first, then a seeded random run for
each seed of `seeds()`: CI's fixed list, so a red CI is a regression and not a new seed's luck, each run
as far as its seed once failed and ten operations more; `make soak` draws new seeds and runs
`LIFECYCLE_OPS` operations (default 100) of each. A seed that fails a soak joins CI_SEEDS once what it
found is fixed."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

import pytest

from slinky_common import names
from tests.cluster.lifecycle import NODESET, PARTITION, Lifecycle, drained_by_us
from tests.cluster.plugin import NAMESPACE, SUMMARIES, ClusterLab, eventually, ready
from tests.cluster.seeds import seeded_runs

pytestmark = pytest.mark.cluster


# Seeds that once failed, each with the step it failed at, added once the fault it found was fixed; CI runs
# each to that step and ten more (a fixed list: a red CI is a regression; `make soak` explores).
CI_SEEDS = {
    652146: 41,  # a name missing while the lab rewrote hosts files in place (issue 40: the lab's DNS since)
}
SOAK_OPERATIONS = 100


def seeds() -> list[tuple[int, int]]:
    """(seed, operations) of each seeded run (tests/cluster/seeds.py, prefix LIFECYCLE): CI_SEEDS, each to its
    failing step and ten more; `make soak` draws new ones of LIFECYCLE_OPS (100) operations."""
    return seeded_runs("LIFECYCLE", {seed: failed_at + 10 for seed, failed_at in CI_SEEDS.items()}, SOAK_OPERATIONS)


SEEDS = seeds()


@pytest.fixture
def life(cluster_lab: ClusterLab, request: pytest.FixtureRequest) -> Iterator[Lifecycle]:
    """The scenarios run from the first seed; the seeded runs from each (indirect parametrization)."""
    seed = getattr(request, "param", SEEDS[0])[0]
    life = Lifecycle(cluster_lab, seed)
    try:
        life.start()
        yield life
    finally:
        if life.done:
            SUMMARIES.append(f"{request.node.name}: {life.summary()}")
        life.delete()


def test_rolling_updates_with_jobs_running_leave_no_node_drained(life: Lifecycle) -> None:
    """Slinky #249: a rolling update left a node drained for good and never created the replacement pod,
    3 updates out of 3. Here: three updates in a row, each with a two-node job running through it."""
    rng = random.Random(life.seed)
    for features in ("life,blue", "life,green", "life"):
        job = life.slurm("sbatch", "--parsable", "-p", PARTITION, "-N2", "-t", "5", "--chdir=/tmp", "-o",
                         "/dev/null", "--wrap", "sleep 15").strip()  # fmt: skip
        life.jobs[job] = "-N2 sleep 15"
        life.wait_running(job)
        old = {p["metadata"]["uid"] for p in life.pods()}
        started = time.monotonic()
        life.shape.features = features
        life.apply()
        life.settle("rolling update", started)
        assert not old & {p["metadata"]["uid"] for p in life.pods()}, "a pod of the old revision is left"
        life.done.append(f"rolling update to Features={features} over job {job}")
    life.submit(rng)
    life.finish()


def test_max_unavailable_counts_a_broken_pod(life: Lifecycle) -> None:
    """Slinky #229: pods that were already broken did not count against maxUnavailable (43 condemnations
    in under 3 minutes, 1 of 3 nodes in service). Here: 3 pods, one's slurmd down and kept down; during
    the rolling update that follows, never more than maxUnavailable (1) pod out of service."""
    life.scale(3)
    life.settle("scale", time.monotonic())
    broken = life.pods()[0]["metadata"]["name"]
    hold = life.lab.kill(broken, "slurmd", hold=True)
    try:
        eventually(f"{broken} not ready", lambda: not any(ready(p) and p["metadata"]["name"] == broken
                                                          for p in life.pods()), timeout=120)  # fmt: skip
        life.shape.cpu, life.shape.memory = "1", "2Gi"
        life.apply()
        worst, deadline = 0, time.monotonic() + 240
        while time.monotonic() < deadline and life.unsettled():
            worst = max(worst, out_of_service(life))
            time.sleep(0.5)
        assert worst >= 1, "the broken pod was never seen out of service: nothing was measured"
        assert worst <= 1, f"{worst} pods out of service at once with maxUnavailable 1"
    finally:
        (hold / "hold").unlink(missing_ok=True)
    life.settle("rolling update", time.monotonic())
    life.done.append("rolling update over a broken pod")


def out_of_service(life: Lifecycle) -> int:
    """Pods not serving jobs: not ready, being deleted, or whose node the operator drains."""
    pods = life.lab.get("pods", "-l", f"app.kubernetes.io/instance={NODESET}")["items"]
    nodes = life.nodes()
    count = 0
    for pod in pods:
        node = nodes.get(pod["spec"].get("hostname", ""), {})
        drained = drained_by_us(node)
        count += bool(pod["metadata"].get("deletionTimestamp") or not ready(pod) or drained)
    return count


def test_a_pod_deleted_above_a_gap_leaves_no_node_record_behind(life: Lifecycle) -> None:
    """A scale-in that took a middle pod leaves a free ordinal; the highest pod deleted by hand is replaced
    at that lower ordinal, under another name, and its old Slurm node record (DOWN by its preStop) must go
    (docs/architecture.md §4.1, a leftover record) with an Event on the NodeSet saying why."""
    life.scale(3)
    life.settle("scale", time.monotonic())
    key = names.ANNOTATION_POD_DELETION_COST
    life.lab.kubectl("annotate", "-n", NAMESPACE, "pod", f"{NODESET}-1", f"{key}=-100", "--overwrite")
    life.scale(2)  # the cheapest pod goes: ordinals 0 and 2 are left
    life.settle("scale", time.monotonic())
    assert sorted(p["metadata"]["name"] for p in life.pods()) == [f"{NODESET}-0", f"{NODESET}-2"]
    started = time.monotonic()
    life.lab.kubectl("delete", "-n", NAMESPACE, "pod", f"{NODESET}-2", "--wait=false")
    life.settle("delete pod", started)  # waits until no node record of the partition is without a pod
    assert sorted(p["metadata"]["name"] for p in life.pods()) == [f"{NODESET}-0", f"{NODESET}-1"]
    assert "life-2" not in life.nodes()
    notes = [e.get("note", "") for e in life.lab.get("events.events.k8s.io")["items"]
             if e.get("reason") == "SlurmNodeDeleted" and e["regarding"].get("name") == NODESET]  # fmt: skip
    assert any("life-2" in n and "is gone without a scale-in" in n for n in notes), notes
    life.done.append("delete the pod above a free ordinal")


def test_deleting_a_nodeset_with_running_and_pending_jobs(life: Lifecycle) -> None:
    """Slinky #138: deleting a NodeSet crash-looped slurmctld. Here: slurmctld keeps running, the running
    job completes, the pending one is reported with its deadline and the deletion waits for it; the
    test's own scancel (a documented end) lets the deletion finish."""
    running = life.slurm("sbatch", "--parsable", "-p", PARTITION, "-N1", "-t", "5", "--chdir=/tmp", "-o",
                         "/dev/null", "--wrap", "sleep 20").strip()  # fmt: skip
    pending = life.slurm("sbatch", "--parsable", "-p", PARTITION, "-N1", "-H", "-t", "5", "--chdir=/tmp", "-o",
                         "/dev/null", "--wrap", "true").strip()  # fmt: skip
    life.jobs.update({running: "-N1 sleep 20", pending: "held"})
    life.wait_running(running)
    life.lab.kubectl("delete", "-n", NAMESPACE, "nodeset", NODESET, "--wait=false")
    report = eventually("the deletion report naming the pending job", lambda: deletion_report(life), timeout=60)
    assert report["pendingJobs"] == [int(pending)] and report["cancelAt"], report
    eventually(f"job {running} completed", lambda: life.slurm("sacct", "-X", "-n", "-P", "-o", "State", "-j", running,
                                                              check=False).strip() == "COMPLETED",
               timeout=120, interval=2)  # fmt: skip
    assert life.lab.get("nodeset", NODESET)["metadata"].get("deletionTimestamp"), "deleted before its pending job ended"
    life.cancelled.add(pending)
    life.slurm("scancel", pending)
    life.lab.kubectl("wait", "-n", NAMESPACE, "--for=delete", f"nodeset/{NODESET}", "--timeout=180s")
    # the partition leaves slurm.conf: slurmctld restarts once on the new file, and stays up
    eventually("slurmctld without the partition", lambda: life.partition_state() == "absent", timeout=180)
    eventually("the Controller Ready", lambda: life.ready("controller", "slurm"), timeout=120)
    (pod,) = life.lab.pods("app.kubernetes.io/name=slurmctld,app.kubernetes.io/instance=slurm")
    assert all(c.get("restartCount", 0) == 0 for c in pod["status"].get("containerStatuses", [])), pod["status"]
    assert life.slurm("srun", "-p", "debug", "-N1", "true") == ""
    assert not life.lost_jobs()
    life.done.append("delete the NodeSet with a running and a pending job")


def deletion_report(life: Lifecycle) -> dict | None:
    text = life.lab.get("nodeset", NODESET)["metadata"].get("annotations", {}).get(names.ANNOTATION_DELETION_OBSERVED)
    report = json.loads(text) if text else None
    return report if report and report.get("pendingJobs") else None


@pytest.mark.timeout(3600)  # 100 operations take 13 to 16 minutes here
@pytest.mark.parametrize(
    ("life", "operations"),
    [((s, n), n) for s, n in SEEDS],
    indirect=["life"],
    ids=[f"seed-{s}-{n}-ops" for s, n in SEEDS],
)
def test_a_seeded_run_of_lifecycle_operations_loses_no_job(life: Lifecycle, operations: int) -> None:
    life.run(operations)
    life.finish()
