"""What a group's pods ask for, as Slurm sees it: cpus per task, memory per node, GPUs as gres.

Per pod, requests and limits are totalled the way the kubelet does (pod-level `spec.resources`
when set; else regular containers and sidecars summed, at least each init container, plus
overhead); across the group the largest pod wins, because every pod gets a whole node of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from hooks.bridge import quantity
from hooks.contract import JSON

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
DRA_CPU_CLASS = "dra.cpu"
DRA_CPU = DEVICE_CLASS_PREFIX + DRA_CPU_CLASS
NVIDIA_GPU_CLASS = "gpu.nvidia.com"  # full GPUs named gpu-<index> by NVIDIA's DRA driver
EXAMPLE_GPU_CLASS = "gpu.example.com"  # the example driver's GPUs, with an index attribute
SUPPORTED_DEVICE_CLASSES = (DRA_CPU_CLASS, NVIDIA_GPU_CLASS, EXAMPLE_GPU_CLASS)
DEVICE_PLUGIN_GPUS = ("nvidia.com/gpu", "amd.com/gpu")


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
    asks for more than zero, as in slurm-bridge.
    """
    pods = list(pods)
    cpu = max((pod_total(p, k, r) for p in pods for k in ("requests", "limits") for r in ("cpu", DRA_CPU)), default=0)
    memory = max((pod_total(p, k, "memory") for p in pods for k in ("requests", "limits")), default=0)
    return GroupResources(
        cpus_per_task=quantity.value(Fraction(cpu)) if quantity.value(Fraction(cpu)) > 0 else base_cpus,
        memory_mib=quantity.mebibytes(Fraction(memory)) if quantity.value(Fraction(memory)) > 0 else base_memory_mib,
        gres=_gres(pods),
    )


def _gres(pods: list[JSON]) -> str | None:
    """Device-plugin GPUs give `gres/gpu=N`; DRA GPU classes `gres/gpu:<class>=N` (largest pod each)."""
    counts: dict[str, int] = {}
    for pod in pods:
        plugin = sum(quantity.value(pod_total(pod, "limits", name)) for name in DEVICE_PLUGIN_GPUS)
        if plugin > 0:
            counts["gres/gpu"] = max(counts.get("gres/gpu", 0), plugin)
        for device_class in SUPPORTED_DEVICE_CLASSES[1:]:
            n = quantity.value(pod_total(pod, "limits", DEVICE_CLASS_PREFIX + device_class))
            if n > 0:
                key = f"gres/gpu:{device_class}"
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
