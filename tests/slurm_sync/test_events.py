"""Kubernetes Events of the operator loop (slurm_sync/events.py), driven through drain -> drained mark ->
undrain against the real Slurm 26.05 lab and the stateful fake apiserver: each step posts one event on
the pod (reason, regarding object, a note that names the Slurm node and what follows), and the same
steps again within the rate limit post none although Slurm is drained and undrained again. The lab is
shared: n3/n4 are restored and the job cancelled at the end (rig_of)."""

from __future__ import annotations

import pytest

from slinky_common import names
from slurm_sync.events import REPORTING_CONTROLLER
from tests.fixtures.slurm import wait_for
from tests.slurm_sync.kubefixtures import NS
from tests.slurm_sync.servicerig import OUR_REASON, Rig, is_event, sbatch

pytestmark = pytest.mark.slurm
GPU_N3 = {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": "gpu-n3"}


def posted(rig: Rig, since: int) -> list[dict]:
    return [w[3] for w in rig.kube.writes[since:] if is_event(w)]


def step(rig: Rig) -> list[dict]:
    """One pass; the events it posted."""
    before = len(rig.kube.writes)
    assert rig.service.run_pass()
    return posted(rig, before)


def test_drain_mark_undrain_post_one_event_each_and_a_repeat_within_the_limit_posts_none(rig: Rig) -> None:
    assert rig.service.run_pass()  # settle: comments and conditions, nothing on a user's behalf
    assert posted(rig, 0) == []

    rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
    (drain,) = step(rig)
    assert "DRAIN" in rig.slurm_node("n3")
    assert (drain["type"], drain["reason"], drain["action"], drain["regarding"]) == (
        "Normal",
        "SlurmNodeDraining",
        "Drain",
        GPU_N3,
    )
    assert drain["note"] == (
        f"Slurm node n3 set to drain ({OUR_REASON}): running jobs finish, no new job starts; the pod "
        "goes once Slurm reports the node drained."
    )
    assert drain["reportingController"] == REPORTING_CONTROLLER and drain["metadata"]["namespace"] == NS

    (mark,) = step(rig)
    assert rig.annotations("gpu-n3")[names.ANNOTATION_DRAINED] == "true"
    assert (mark["type"], mark["reason"], mark["regarding"]) == ("Normal", "SlurmNodeDrained", GPU_N3)
    assert mark["note"] == (
        "Slurm reports node n3 drained: no job runs there and none will start; marked "
        f"{names.ANNOTATION_DRAINED}=true, so the NodeSet may now delete this pod."
    )

    rig.set_intents({})
    (undrain,) = step(rig)
    assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n3")
    wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" not in s, what="n3 undrained")
    assert (undrain["type"], undrain["reason"], undrain["regarding"]) == ("Normal", "SlurmNodeUndrained", GPU_N3)
    assert undrain["note"] == (
        "Slurm node n3 returned to service (UNDRAIN): the drain slurm-operator set is no longer wanted."
    )
    assert step(rig) == []  # settled: nothing happens, nothing is said

    # the same again within the rate limit: Slurm is drained, marked and undrained again, silently
    rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
    assert step(rig) == []
    assert f"Reason={OUR_REASON}" in rig.slurm_node("n3")
    assert step(rig) == []
    assert rig.annotations("gpu-n3")[names.ANNOTATION_DRAINED] == "true"
    rig.set_intents({})
    assert step(rig) == []
    wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" not in s, what="n3 undrained again")


def test_protection_is_told_when_added_and_when_removed(rig: Rig) -> None:
    assert rig.service.run_pass()
    job = sbatch(rig.lab, "n4")
    rig.jobs.append(str(job))  # cancelled at the end whatever happens
    wait_for(lambda: rig.slurm_node("n4"), lambda s: "State=ALLOCATED" in s or "State=MIXED" in s, what="job on n4")
    (added,) = step(rig)
    assert rig.pod("gpu-n4")["metadata"]["labels"][names.LABEL_POD_PROTECT] == "true"
    assert (added["reason"], added["regarding"]["name"]) == ("PodProtected", "gpu-n4")
    assert "Slurm node n4 runs jobs" in added["note"] and "PodDisruptionBudget" in added["note"]
    rig.lab.run("scancel", str(job), check=True)
    wait_for(lambda: rig.slurm_node("n4"), lambda s: "State=IDLE" in s and "COMPLETING" not in s, what="n4 idle")
    (removed,) = step(rig)
    assert names.LABEL_POD_PROTECT not in rig.pod("gpu-n4")["metadata"]["labels"]
    assert (removed["reason"], removed["regarding"]["name"]) == ("PodUnprotected", "gpu-n4")
