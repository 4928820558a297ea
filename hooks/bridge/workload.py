"""Which pods share one Slurm job, and which object's annotations describe it.

Customize asks Metacontroller only for what this pod points at (its controller by name, the
JobSet/LeaderWorkerSet/PodGroup named in its labels or spec, and the group's pods by label), so a
cluster without JobSet, LWS or scheduler-plugins never sees a request for those kinds. Every rule
depends on the pod's labels, owner references and spec only, because Metacontroller caches
customize answers per pod generation.

Resolution follows slurm-bridge, with these deliberate differences:
* group members are looked up in the pod's namespace (slurm-bridge lists coscheduling and LWS pods
  cluster-wide);
* members are the *live* pods (not Succeeded/Failed, not being deleted), so a finished or deleted
  pod never holds a place in a pending gang;
* the annotation source of a pod under an unsupported controller is that direct controller
  (customize can name nothing higher), or the pod itself when the controller's kind is unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hooks.contract import DecoratorRequest
from slinky_common import names, quantity
from slinky_common.jsontypes import JSON


@dataclass(frozen=True)
class Kind:
    api_version: str
    resource: str
    kind: str

    @property
    def type_key(self) -> str:
        """Metacontroller's key for related objects of this kind ("Job.batch/v1")."""
        return f"{self.kind}.{self.api_version}"


POD = Kind("v1", "pods", "Pod")
JOB = Kind("batch/v1", "jobs", "Job")
JOBSET = Kind("jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet")
LWS = Kind("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "LeaderWorkerSet")
COSCHEDULING_POD_GROUP = Kind("scheduling.x-k8s.io/v1alpha1", "podgroups", "PodGroup")
POD_GROUP = Kind("scheduling.k8s.io/v1alpha2", "podgroups", "PodGroup")
WORKLOAD = Kind("scheduling.k8s.io/v1alpha2", "workloads", "Workload")
# Controllers customize can fetch by name: Job, plus the unsupported ones that only lend annotations.
OWNER_KINDS = {(k.api_version, k.kind): k for k in (
    JOB, Kind("apps/v1", "replicasets", "ReplicaSet"), Kind("apps/v1", "statefulsets", "StatefulSet"),
    Kind("apps/v1", "daemonsets", "DaemonSet"), Kind("v1", "replicationcontrollers", "ReplicationController"),
)}  # fmt: skip
_STOPPED_PHASES = ("Succeeded", "Failed")
_FINISHED_GROUP_PHASES = ("Running", "Unknown", "Failed", "Finished")


class GroupNotReady(ValueError):
    """No job can be described yet (an owner is missing, a gang is short); the message says why."""


class RelatedMissing(GroupNotReady):
    """An object the pod points at is absent from the request. That may be a real deletion or just
    Metacontroller's related-object cache lagging: the input is missing, not wrong, so a job the pod
    already publishes is kept (pod.py); only a pod with nothing published reports it."""


@dataclass(frozen=True)
class Group:
    """The workload's part of the job, before pod resources and annotations are applied."""

    key: str  # "<Kind>[.<group>]/<namespace>/<name>": the job's identity for slurm_sync
    source: str  # the annotation source, for messages ("Job ns/name")
    annotations: dict[str, str]
    members: list[JSON]  # live pods of the job, sorted by name
    job_name: str | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    tasks_per_node: int | None = None
    time_limit: int | None = None  # minutes
    base_cpus: int | None = None
    base_memory_mib: int | None = None
    pods: list[str] = field(init=False)  # "ns/name" of every member, for admin_comment

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", [f"{_ns(p)}/{_name(p)}" for p in self.members])


# --- customize ---------------------------------------------------------------------------------------


def related_rules(pod: JSON) -> list[JSON]:
    """The related objects the pod's group resolution reads, in a stable order."""
    ns, labels = _ns(pod), _labels(pod)
    rules: list[JSON] = []
    if (owner := fetchable_owner(pod)) is not None:
        rules.append(_by_name(owner[0], ns, owner[1]))
    if (jobset := labels.get(names.LABEL_JOBSET_NAME)) is not None:
        rules.append(_by_name(JOBSET, ns, jobset))
    if (lws := labels.get(names.LABEL_LWS_NAME)) is not None:
        rules.append(_by_name(LWS, ns, lws))
        if (group_key := labels.get(names.LABEL_LWS_GROUP_KEY)) is not None:
            rules.append(_by_labels(ns, {"matchLabels": {names.LABEL_LWS_GROUP_KEY: group_key}}))
    if (pod_group := labels.get(names.LABEL_COSCHEDULING_POD_GROUP)) is not None:
        rules.append(_by_name(COSCHEDULING_POD_GROUP, ns, pod_group))
        rules.append(_by_labels(ns, {"matchLabels": {names.LABEL_COSCHEDULING_POD_GROUP: pod_group}}))
    if (built_in := scheduling_group(pod)) is not None:
        # The Workload's name is in the PodGroup, unknown here: fetch the namespace's Workloads. The
        # group's pods share only a spec field, so fetch the namespace's bridge pods and filter.
        rules.append(_by_name(POD_GROUP, ns, built_in))
        rules.append({"apiVersion": WORKLOAD.api_version, "resource": WORKLOAD.resource, "namespace": ns})
        rules.append(_by_labels(ns, {"matchExpressions": [{"key": names.LABEL_BRIDGE_MANAGED, "operator": "Exists"}]}))
    return rules


def _by_name(kind: Kind, ns: str, name: str) -> JSON:
    return {"apiVersion": kind.api_version, "resource": kind.resource, "namespace": ns, "names": [name]}


def _by_labels(ns: str, selector: JSON) -> JSON:
    return {"apiVersion": POD.api_version, "resource": POD.resource, "namespace": ns, "labelSelector": selector}


# --- sync ----------------------------------------------------------------------------------------------


def resolve(req: DecoratorRequest) -> Group:
    """The pod's group, in slurm-bridge's precedence: built-in PodGroup, coscheduling PodGroup
    (if it exists), LeaderWorkerSet, JobSet, Job, other controller, the pod alone."""
    pod, labels = req.object, _labels(req.object)
    if (name := scheduling_group(pod)) is not None:
        return _built_in_pod_group(req, name)
    if (name := labels.get(names.LABEL_COSCHEDULING_POD_GROUP)) is not None:
        if (pod_group := _find(req, COSCHEDULING_POD_GROUP, _ns(pod), name)) is not None:
            return _coscheduling(req, pod_group)
        if _published_group(pod) == f"{_type_prefix(COSCHEDULING_POD_GROUP)}/{_ns(pod)}/{name}":
            # It existed when the job was published: falling through to the pod alone would
            # rewrite the group's PENDING job into a one-pod job.
            raise RelatedMissing(
                f"{COSCHEDULING_POD_GROUP.kind} {_ns(pod)}/{name} ({COSCHEDULING_POD_GROUP.api_version}) was not found"
            )
    if (name := labels.get(names.LABEL_LWS_NAME)) is not None:
        return _leader_worker_set(req, _require(req, LWS, _ns(pod), name))
    owner = fetchable_owner(pod)
    if (name := labels.get(names.LABEL_JOBSET_NAME)) is not None:
        jobset = _require(req, JOBSET, _ns(pod), name)
        if owner is None or owner[0] is not JOB:
            raise GroupNotReady(f"pod {_ns(pod)}/{_name(pod)} of JobSet {name} has no controlling Job")
        return _from_job(pod, _require(req, JOB, _ns(pod), owner[1]), source=jobset)
    if owner is not None and owner[0] is JOB:
        job = _require(req, JOB, _ns(pod), owner[1])
        return _from_job(pod, job, source=job)
    source = _require(req, owner[0], _ns(pod), owner[1]) if owner else pod
    return _single_pod(pod, source)


def scheduling_group(pod: JSON) -> str | None:
    """`spec.schedulingGroup.podGroupName`: membership in a built-in (Workload API) PodGroup."""
    return ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or None


def controller_ref(obj: JSON) -> JSON | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller") and ref.get("name")), None)


def fetchable_owner(pod: JSON) -> tuple[Kind, str] | None:
    """The pod's controller, as (kind, name), when it is of a kind customize can fetch by name."""
    ref = controller_ref(pod)
    if ref is None:
        return None
    api_version, kind_name = ref.get("apiVersion"), ref.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind_name, str):
        return None
    kind = OWNER_KINDS.get((api_version, kind_name))
    return (kind, ref["name"]) if kind else None


def is_live(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") not in _STOPPED_PHASES and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _single_pod(pod: JSON, source: JSON) -> Group:
    return Group(
        key=_key(POD, pod),
        source=_describe(source),
        annotations=_annotations(source),
        members=[pod],
        max_nodes=1,
        tasks_per_node=1,
    )


def _from_job(pod: JSON, job: JSON, source: JSON) -> Group:
    """One Slurm job per pod; the Job's deadline becomes the time limit (ceil to minutes)."""
    spec = job.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds") or 0
    limits = (((spec.get("template") or {}).get("spec") or {}).get("resources") or {}).get("limits") or {}
    base_cpus, base_memory_mib = _base(limits, f"{_describe(job)} spec.template.spec.resources.limits")
    return Group(
        key=_key(POD, pod),
        source=_describe(source),
        annotations=_annotations(source),
        members=[pod],
        min_nodes=1,
        time_limit=-(-deadline // 60) if deadline > 0 else None,
        base_cpus=base_cpus,
        base_memory_mib=base_memory_mib,
    )


def _built_in_pod_group(req: DecoratorRequest, name: str) -> Group:
    """Workload API gang: one job for the PodGroup; annotations PodGroup < controller < Workload."""
    pod = req.object
    ns = _ns(pod)
    pod_group = _require(req, POD_GROUP, ns, name)
    members = _members(req, lambda p: scheduling_group(p) == name)
    min_count = (((pod_group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    if min_count is not None and len(members) < min_count:
        raise GroupNotReady(
            f"PodGroup {ns}/{name} has {len(members)} of the {min_count} pods its gang needs; waiting for the rest"
        )
    sources = [pod_group]
    if (owner := fetchable_owner(pod)) is not None:
        sources.append(_require(req, owner[0], ns, owner[1]))
    if workload_name := _workload_name(pod_group):
        sources.append(_require(req, WORKLOAD, ns, workload_name))
    merged: dict[str, str] = {}
    for source in sources:
        merged |= _annotations(source)
    return Group(
        key=_key(POD_GROUP, pod_group),
        source=" < ".join(map(_describe, sources)),
        annotations=merged,
        members=members,
        job_name=name,
        min_nodes=len(members),
        max_nodes=len(members),
        tasks_per_node=1,
    )


def _coscheduling(req: DecoratorRequest, pod_group: JSON) -> Group:
    """scheduler-plugins PodGroup: minMember pods at least, cpu/memory from minResources."""
    name = _name(pod_group)
    phase = (pod_group.get("status") or {}).get("phase")
    if phase in _FINISHED_GROUP_PHASES:
        raise GroupNotReady(f"PodGroup {_ns(pod_group)}/{name} status is {phase}; no new job is submitted for it")
    spec = pod_group.get("spec") or {}
    members = _members(req, lambda p: _labels(p).get(names.LABEL_COSCHEDULING_POD_GROUP) == name)
    min_member = spec.get("minMember") or 0
    if len(members) < min_member:
        raise GroupNotReady(
            f"PodGroup {_ns(pod_group)}/{name} has {len(members)} of its minMember "
            f"{min_member} pods; waiting for the rest"
        )
    base_cpus, base_memory_mib = _base(spec.get("minResources") or {}, f"{_describe(pod_group)} spec.minResources")
    return Group(
        key=_key(COSCHEDULING_POD_GROUP, pod_group),
        source=_describe(pod_group),
        annotations=_annotations(pod_group),
        members=members,
        min_nodes=min_member or None,
        max_nodes=len(members),
        tasks_per_node=1,
        base_cpus=base_cpus,
        base_memory_mib=base_memory_mib,
    )


def _leader_worker_set(req: DecoratorRequest, lws: JSON) -> Group:
    """One job per LWS group (leader + workers): exactly `size` nodes, named `<lws>-<index>`."""
    labels = _labels(req.object)
    group_key, index = labels.get(names.LABEL_LWS_GROUP_KEY), labels.get(names.LABEL_LWS_GROUP_INDEX)
    if group_key is None or index is None:
        raise GroupNotReady(
            f"pod of LeaderWorkerSet {_ns(lws)}/{_name(lws)} lacks the "
            f"{names.LABEL_LWS_GROUP_KEY} or {names.LABEL_LWS_GROUP_INDEX} label"
        )
    size = ((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size", 1)
    members = _members(req, lambda p: _labels(p).get(names.LABEL_LWS_GROUP_KEY) == group_key)
    job_name = f"{labels[names.LABEL_LWS_NAME]}-{index}"
    if len(members) < size:
        raise GroupNotReady(
            f"LeaderWorkerSet group {_ns(lws)}/{job_name} has {len(members)} of its {size} pods; waiting for the rest"
        )
    return Group(
        key=f"{LWS.kind}/{_ns(lws)}/{job_name}",
        source=_describe(lws),
        annotations=_annotations(lws),
        members=members,
        job_name=job_name,
        min_nodes=size,
        max_nodes=size,
        tasks_per_node=1,
    )


def _members(req: DecoratorRequest, belongs: Callable[[JSON], bool]) -> list[JSON]:
    """Live pods of the group in the pod's namespace, the pod itself included, sorted by name."""
    ns = _ns(req.object)
    found = {_name(p): p for p in req.related_of(POD.type_key) if _ns(p) == ns and belongs(p)}
    found[_name(req.object)] = req.object
    return [found[name] for name in sorted(found) if is_live(found[name])]


def _workload_name(pod_group: JSON) -> str | None:
    spec = pod_group.get("spec") or {}
    return (
        (spec.get("workloadRef") or {}).get("workloadName")
        or (((spec.get("podGroupTemplateRef") or {}).get("workload") or {}).get("workloadName"))
        or None
    )


def _require(req: DecoratorRequest, kind: Kind, ns: str, name: str) -> JSON:
    obj = _find(req, kind, ns, name)
    if obj is None:
        raise RelatedMissing(f"{kind.kind} {ns}/{name} ({kind.api_version}) was not found")
    return obj


def _find(req: DecoratorRequest, kind: Kind, ns: str, name: str) -> JSON | None:
    group = req.related.get(kind.type_key) or {}
    obj = group.get(f"{ns}/{name}") or group.get(name)
    return obj if obj is not None and _ns(obj) in ("", ns) and _name(obj) == name else None


def _key(kind: Kind, obj: JSON) -> str:
    return f"{_type_prefix(kind)}/{_ns(obj)}/{_name(obj)}"


def _type_prefix(kind: Kind) -> str:
    group = kind.api_version.rpartition("/")[0]
    return f"{kind.kind}{'.' + group if group else ''}"


def _published_group(pod: JSON) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_PLACEHOLDER_GROUP)


def _describe(obj: JSON) -> str:
    return f"{obj.get('kind')} {_ns(obj)}/{_name(obj)}"


def _annotations(obj: JSON) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _labels(obj: JSON) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ns(obj: JSON) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")


def _name(obj: JSON) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _base(resources: JSON, where: str) -> tuple[int | None, int | None]:
    """A workload's own cpus and MiB for its job (Group.base_*); a BadQuantity names `where`."""
    try:
        return (
            _positive(quantity.cpus(quantity.parse(resources.get("cpu", 0)))),
            _positive(quantity.mebibytes(quantity.parse(resources.get("memory", 0)))),
        )
    except quantity.BadQuantity as err:
        raise type(err)(f"{where}: {err}") from None


def _positive(number: int) -> int | None:
    return number if number > 0 else None
