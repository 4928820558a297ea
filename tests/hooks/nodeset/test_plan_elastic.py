"""An elastic NodeSet's pods follow slurm_sync's power report (hooks/nodeset/plan.py `_plan_elastic`,
docs/architecture.md §4.9): the always-on ordinals, plus a pod for each node Slurm powers up; the pod of a node Slurm
powered down goes through the drain protocol like any other (drained mark, no busy evidence)."""

from __future__ import annotations

from typing import Any

from slinky_common import names
from slinky_common.powerreport import PowerReport
from tests.hooks.nodeset.builders import INTENT_EPOCH, children, draining, nodeset, observed, request, sync


def elastic_nodeset(report: PowerReport | None = None, draining_pods: tuple[str, ...] = (), **elastic: Any) -> dict:
    """NodeSet `gpu` with minReplicas 1 and maxReplicas 4 unless given: slurm.conf's gpu-0 always on, gpu-[1-3]
    on demand; `report` as slurm_sync writes it."""
    status = {
        names.STATUS_DRAINING_PODS: [
            {"name": n, "reason": "earlier", names.DRAIN_EPOCH: INTENT_EPOCH} for n in draining_pods
        ]
    }
    parent = nodeset(
        status=status,
        elastic={"minReplicas": 1, "maxReplicas": 4, **elastic},
        partition={"enabled": True},
        extraConf="CPUs=2 RealMemory=100",
    )
    if report is not None:
        parent["metadata"]["annotations"] = {names.ANNOTATION_POWER_OBSERVED: report.value()}
    return parent


def running(client, parent: dict, *names_: str, **state: Any) -> list[dict]:
    """The pods the hook would create for `names_`, as observed running (with `state` from slurm_sync)."""
    report = PowerReport(up=tuple(n for n in names_ if n != "gpu-0"))
    made = children(sync(client, request(elastic_nodeset(report))))
    return [observed(made[n], **state) for n in names_]


def test_without_a_report_only_the_always_on_pods_run(client) -> None:
    assert sorted(children(sync(client, request(elastic_nodeset())))) == ["gpu-0"]


def test_a_node_slurm_powers_up_gets_its_pod_at_its_own_ordinal(client) -> None:
    resp = sync(client, request(elastic_nodeset(PowerReport(up=("gpu-3",), down=("gpu-1", "gpu-2")))))
    assert sorted(children(resp)) == ["gpu-0", "gpu-3"]
    assert resp["status"]["desired"] == 2, "the always-on pod and the powered-up one"


def test_the_pod_of_a_node_slurm_powered_down_goes_once_drained(client) -> None:
    parent = elastic_nodeset(PowerReport(down=("gpu-1", "gpu-2", "gpu-3")))
    pods = running(client, parent, "gpu-0", "gpu-2")
    resp = sync(client, request(parent, pods))
    assert sorted(children(resp)) == ["gpu-0", "gpu-2"], "not before slurm_sync marks it"
    assert draining(resp) == {"gpu-2": "Slurm powered its node down"}
    marked = [pods[0], running(client, parent, "gpu-2", drained=True, slurm=("Idle",))[0]]
    resp = sync(client, request(elastic_nodeset(PowerReport(down=("gpu-1", "gpu-2", "gpu-3")), ("gpu-2",)), marked))
    assert sorted(children(resp)) == ["gpu-0"]


def test_busy_evidence_keeps_a_pod_slurm_reports_down(client) -> None:
    parent = elastic_nodeset(PowerReport(down=("gpu-2",)), ("gpu-2",))
    pods = running(client, parent, "gpu-0") + running(client, parent, "gpu-2", drained=True, slurm=("Allocated",))
    assert sorted(children(sync(client, request(parent, pods)))) == ["gpu-0", "gpu-2"]


def test_a_failed_resume_removes_the_pod_that_never_registered(client) -> None:
    parent = elastic_nodeset(PowerReport(resume_failed=("gpu-1",)))
    pods = running(client, parent, "gpu-0") + running(client, parent, "gpu-1", ready=False, slurm=())
    resp = sync(client, request(parent, pods))
    assert draining(resp) == {"gpu-1": "its node was not up within ResumeTimeout; Slurm requeued the job"}


def test_a_node_the_report_lacks_keeps_its_pod_and_gets_none(client) -> None:
    """Unknown means no action: the listing lacked the node, or slurm_sync has not reported yet."""
    parent = elastic_nodeset(PowerReport(up=("gpu-1",)))
    pods = running(client, parent, "gpu-0", "gpu-1") + running(client, parent, "gpu-2")
    resp = sync(client, request(parent, pods))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-2"]
    assert draining(resp) == {}


def test_a_pod_condemned_before_its_node_came_up_again_is_still_replaced(client) -> None:
    """Its slurmd ran before Slurm's new power-up request: slurmctld would never accept its registration."""
    parent = elastic_nodeset(PowerReport(up=("gpu-2",)), ("gpu-2",))
    pods = running(client, parent, "gpu-0", "gpu-2")
    resp = sync(client, request(parent, pods))
    assert "gpu-2" in draining(resp)
    assert sorted(children(resp)) == ["gpu-0", "gpu-2"], "no second pod while the first holds the name"


def test_pods_past_max_replicas_go_and_no_record_is_deleted(client) -> None:
    """slurm.conf names an elastic NodeSet's nodes: Slurm refuses to delete them, so no pod waits for that."""
    parent = elastic_nodeset(PowerReport(up=("gpu-1",)), maxReplicas=2)
    wide = elastic_nodeset(PowerReport(up=("gpu-3",)))
    pods = running(client, parent, "gpu-0") + running(client, wide, "gpu-3")
    resp = sync(client, request(parent, pods))
    assert draining(resp) == {"gpu-3": "scale-in to maxReplicas 2"}
    assert all(names.DRAIN_DELETE_NODE not in d for d in resp["status"][names.STATUS_DRAINING_PODS])
    assert sorted(children(resp)) == ["gpu-0", "gpu-1", "gpu-3"]


def test_an_unreadable_report_is_no_report(client) -> None:
    parent = elastic_nodeset()
    parent["metadata"]["annotations"] = {names.ANNOTATION_POWER_OBSERVED: '{"up": "gpu-1"}'}
    pods = running(client, elastic_nodeset(), "gpu-0") + running(client, elastic_nodeset(), "gpu-1")
    resp = sync(client, request(parent, pods))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"]
    assert draining(resp) == {}
