"""What a group's pods ask for, as Slurm sees it: cpus per task, memory per node, GPUs as gres.

Per pod, requests and limits are totalled the way the kubelet does (pod-level `spec.resources`
when set; else regular containers and sidecars summed, at least each init container, plus
overhead); across the group the largest pod wins, because every pod gets a whole node of its own.
Only `SLURM_FIELDS` reach Slurm, each within the bound of its field (quantity.MAX_*); hugepages,
ephemeral storage and other resources are the kubelet's alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from slinky_common import quantity
from slinky_common.jsontypes import JSON

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
DRA_CPU_CLASS = "dra.cpu"
DRA_CPU = DEVICE_CLASS_PREFIX + DRA_CPU_CLASS
NVIDIA_GPU_CLASS = "gpu.nvidia.com"  # full GPUs named gpu-<index> by NVIDIA's DRA driver
EXAMPLE_GPU_CLASS = "gpu.example.com"  # the example driver's GPUs, with an index attribute
SUPPORTED_DEVICE_CLASSES = (DRA_CPU_CLASS, NVIDIA_GPU_CLASS, EXAMPLE_GPU_CLASS)
DEVICE_PLUGIN_GPUS = ("nvidia.com/gpu", "amd.com/gpu")
GPU_CLASSES = tuple(DEVICE_CLASS_PREFIX + c for c in SUPPORTED_DEVICE_CLASSES if c != DRA_CPU_CLASS)
# The resources that become a Slurm number, and how: the field each becomes bounds it.
SLURM_FIELDS: dict[str, Callable[[Fraction], int]] = {
    "cpu": quantity.cpus,
    DRA_CPU: quantity.cpus,
    "memory": quantity.mebibytes,
    **{name: quantity.count for name in (*DEVICE_PLUGIN_GPUS, *GPU_CLASSES)},
}


@dataclass(frozen=True)
class GroupResources:
    cpus_per_task: int | None  # None: the partition default
    memory_mib: int | None
    gres: str | None  # tres_per_node


def pod_total(pod: JSON, kind: str, resource: str) -> Fraction:
    """The pod's effective `kind` ("requests"/"limits") of one resource, as the kubelet computes it."""
    spec = pod.get("spec") or {}
    pod_level = ((spec.get("resources") or {}).get(kind) or {}).get(resource)
    if pod_level is not None:
        return quantity.parse(pod_level)
    sidecars = Fraction(0)
    init_peak = Fraction(0)
    for container in spec.get("initContainers") or []:
        amount = _container(container, kind, resource)
        if container.get("restartPolicy") == "Always":
            sidecars += amount
        else:
            init_peak = max(init_peak, sidecars + amount)
    regular = sum((_container(c, kind, resource) for c in spec.get("containers") or []), Fraction(0))
    overhead = quantity.parse((spec.get("overhead") or {}).get(resource, 0))
    return max(regular + sidecars, init_peak) + overhead


def of_group(pods: Iterable[JSON], base_cpus: int | None = None, base_memory_mib: int | None = None) -> GroupResources:
    """The largest pod's cpus (native or dra.cpu, request or limit) and memory; GPUs as gres.

    `base_*` come from the workload (Job template, PodGroup minResources) and stand unless a pod
    asks for more than zero, as in slurm-bridge. quantity.OutOfRange names the pod whose total
    Slurm cannot hold.
    """
    pods = list(pods)
    cpus = _largest(pods, ("cpu", DRA_CPU))
    memory_mib = _largest(pods, ("memory",))
    return GroupResources(
        cpus_per_task=base_cpus if cpus is None else cpus,
        memory_mib=base_memory_mib if memory_mib is None else memory_mib,
        gres=_gres(pods),
    )


def _largest(pods: list[JSON], names: tuple[str, ...]) -> int | None:
    """The largest pod total of `names` (requests or limits) as Slurm gets it; None if none is above zero."""
    totals = ((_total(p, k, r), p, k, r) for p in pods for k in ("requests", "limits") for r in names)
    amount, pod, kind, resource = max(totals, key=lambda total: total[0], default=(Fraction(0), {}, "", ""))
    return _in_slurm(amount, pod, kind, resource) if amount > 0 else None


def _in_slurm(amount: Fraction, pod: JSON, kind: str, resource: str) -> int:
    """A pod's total of SLURM_FIELDS (`a + b`: their sum) as Slurm gets it; OutOfRange names pod and resource."""
    try:
        return SLURM_FIELDS[resource.split(" + ")[0]](amount)
    except quantity.OutOfRange as err:
        raise quantity.OutOfRange(f"pod {_name(pod)}: {kind}.{resource} totals {err}") from None


def _total(pod: JSON, kind: str, resource: str) -> Fraction:
    """pod_total; a BadQuantity names the pod and the resource."""
    try:
        return pod_total(pod, kind, resource)
    except quantity.BadQuantity as err:
        raise type(err)(f"pod {_name(pod)}: {kind}.{resource}: {err}") from None


def _name(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name') or meta.get('generateName')}"


def _gres(pods: list[JSON]) -> str | None:
    """Device-plugin GPUs give `gres/gpu=N`; DRA GPU classes `gres/gpu:<class>=N` (largest pod each)."""
    counts: dict[str, int] = {}
    for pod in pods:
        plugin = sum(quantity.value(_total(pod, "limits", name)) for name in DEVICE_PLUGIN_GPUS)
        if plugin > 0:
            total = _in_slurm(Fraction(plugin), pod, "limits", " + ".join(DEVICE_PLUGIN_GPUS))
            counts["gres/gpu"] = max(counts.get("gres/gpu", 0), total)
        for resource in GPU_CLASSES:
            n = _in_slurm(_total(pod, "limits", resource), pod, "limits", resource)
            if n > 0:
                key = f"gres/gpu:{resource.removeprefix(DEVICE_CLASS_PREFIX)}"
                counts[key] = max(counts.get(key, 0), n)
    return ",".join(f"{key}={n}" for key, n in sorted(counts.items())) or None


def _container(container: JSON, kind: str, resource: str) -> Fraction:
    return quantity.parse(((container.get("resources") or {}).get(kind) or {}).get(resource, 0))


def device_classes(container: JSON) -> set[str]:
    """The DRA device classes a container requests or limits."""
    resources = container.get("resources") or {}
    return {
        name.removeprefix(DEVICE_CLASS_PREFIX)
        for kind in ("requests", "limits")
        for name in (resources.get(kind) or {})
        if name.startswith(DEVICE_CLASS_PREFIX)
    }
