"""Would a DaemonSet-mode worker pod run on this Node (hooks/nodeset/scheduling.py): the DaemonSet controller's
predicates on observed Nodes, and a cordon that is Slurm's business, not a reason to delete."""

from __future__ import annotations

from hooks.nodeset.scheduling import Fit, node_fit


def knode(name: str = "k1", labels: dict | None = None, taints: list | None = None, unschedulable: bool = False):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
    }


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DRAIN_TAINT = {"key": "maintenance", "effect": "NoExecute"}


def test_the_node_selector_and_required_affinity_choose_the_nodes() -> None:
    gpu = knode(labels={"gpu": "h100", "rack": "7"})
    assert node_fit(gpu, {"nodeSelector": {"gpu": "h100"}}) == Fit(True, True)
    assert node_fit(gpu, {"nodeSelector": {"gpu": "a100"}}) == Fit(False, False)
    term = {"matchExpressions": [{"key": "rack", "operator": "Gt", "values": ["5"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert node_fit(gpu, {"affinity": affinity}) == Fit(True, True)
    assert node_fit(knode(labels={"rack": "3"}), {"affinity": affinity}) == Fit(False, False)
    empty = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    assert node_fit(gpu, {"affinity": empty}) == Fit(False, False)  # an empty term selects no node


def test_a_no_schedule_taint_keeps_new_pods_off_but_an_existing_pod_stays() -> None:
    tainted = knode(taints=[GPU_TAINT])
    assert node_fit(tainted, {}) == Fit(should_run=False, should_continue=True)
    tolerated = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    assert node_fit(tainted, tolerated) == Fit(True, True)


def test_a_no_execute_taint_not_tolerated_moves_the_pod_off() -> None:
    assert node_fit(knode(taints=[DRAIN_TAINT]), {}) == Fit(False, False)
    wrong_effect = {"tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]}
    assert node_fit(knode(taints=[DRAIN_TAINT]), wrong_effect) == Fit(False, False)


def test_a_cordoned_node_takes_no_new_pod_but_keeps_its_own() -> None:
    assert node_fit(knode(unschedulable=True), {}) == Fit(should_run=False, should_continue=True)
