"""The Kubernetes Node's topology copied onto a worker pod as soon as the pod is bound, Slurm or not.

slurmd takes its topology from the pod's annotation when it starts, and a NodeSet may hold slurmd back until
the annotation is there (docs/architecture.md §4.7). The main pod plan copies it only once Slurm's listing has
the pod's node (or proves it absent), which a slurmd waiting for its topology never gets to; this copy depends
on Kubernetes alone. It never removes an annotation: that stays with the plan, on Slurm's evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from slinky_common import names
from slurm_sync.operator import plan as planning
from slurm_sync.operator.view import ClusterView, PodView


def plan_pod_with_topology(pod: PodView, cluster: ClusterView, slurm: planning.SlurmView, now: str,
                           applied_topology: Mapping[str, str] | None = None) -> planning.PodPlan:  # fmt: skip
    """`plan.plan_pod`, plus the topology copy when that plan does not write it."""
    pod_plan = planning.plan_pod(pod, cluster, slurm, now, applied_topology)
    copy = topology_patch(pod, cluster)
    if copy is None or any(names.ANNOTATION_TOPOLOGY_SPEC in _annotations(p) for p in pod_plan.patches):
        return pod_plan
    return dataclasses.replace(pod_plan, patches=(*pod_plan.patches, copy))


def topology_patch(pod: PodView, cluster: ClusterView) -> planning.PodPatch | None:
    """A patch setting the pod's topology annotation to its Node's usable spec; None when nothing to copy."""
    kube_node = cluster.kube_nodes.get(pod.node_name or "")
    if kube_node is None or pod.terminating:
        return None
    spec = planning.topology_spec(kube_node)
    if spec is None or pod.annotations.get(names.ANNOTATION_TOPOLOGY_SPEC) == spec:
        return None
    return planning.PodPatch(
        pod.namespace, pod.name, "", {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: spec}}}
    )


def _annotations(patch: planning.PodPatch) -> Mapping[str, object]:
    return ((patch.body.get("metadata") or {}).get("annotations") or {}) if patch.subresource == "" else {}
