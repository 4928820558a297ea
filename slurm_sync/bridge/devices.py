"""DRA device classes on bridge pods (docs/architecture.md §4.6), as pure functions: what a pod asks
for, which devices Slurm's allocation names on the bound node, and the ResourceClaim that gives the
pod exactly those.

A pod asks with the extended resources ``deviceclass.resource.kubernetes.io/<class>`` of the classes
admission lets through (``dra.cpu``, ``gpu.nvidia.com``, ``gpu.example.com``; the driver of each
class has the class's name). Slurm reports what the job holds on each node (``GET resources/<job>``):
a bitmap of abstract cores and GRES index lists. The DRA drivers publish the node's devices in
ResourceSlices; this module joins the two:

* a GPU class: Slurm's GRES ``gpu`` of that type; index ``i`` is the driver's device with attribute
  ``index`` = i (gpu.example.com) or named ``gpu-<i>`` (gpu.nvidia.com, its full GPUs);
* ``dra.cpu``: Slurm's abstract core ``i`` is the i-th core of the node in (socket, core) order,
  efficiency cores left out as Slurm leaves them out; each core gives all of its CPUs (threads).

Anything that does not join exactly (a pool still being published, an index no device carries, two
devices with one index, a core count that differs from Slurm's) is a ``DeviceProblem``: no claim,
so no binding (fail closed).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from slinky_common import names, quantity, resources
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.slurm.types import NodeLayout

JSON = dict[str, Any]
CPU_CLASS = resources.DRA_CPU_CLASS
GPU_CLASSES = tuple(c for c in resources.SUPPORTED_DEVICE_CLASSES if c != CPU_CLASS)
API_VERSION = "resource.k8s.io/v1"
_NVIDIA_GPU = re.compile(r"gpu-(\d+)")
_CLAIM_NAME_MAX = 253


class DeviceProblem(ValueError):
    """The pod's devices cannot be named exactly: nothing is claimed and the pod is not bound."""


@dataclass(frozen=True)
class ContainerRequest:
    """One container's request of a DRA extended resource, as written (``quantity`` unparsed)."""

    container: str
    resource: str  # deviceclass.resource.kubernetes.io/<class>
    quantity: str

    @property
    def device_class(self) -> str:
        return self.resource.removeprefix(resources.DEVICE_CLASS_PREFIX)


@dataclass(frozen=True)
class RequestMapping:
    """pod.status.extendedResourceClaimStatus.requestMappings[]: which claim request a container's resource uses."""

    container: str
    resource: str
    request: str


@dataclass(frozen=True)
class PodClaimStatus:
    claim: str
    mappings: tuple[RequestMapping, ...]


@dataclass(frozen=True)
class DeviceRef:
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class ClaimRequest:
    name: str
    device_class: str
    devices: tuple[DeviceRef, ...]


@dataclass(frozen=True)
class ClaimPlan:
    """The claim of one pod on one node: its requests with the devices Slurm allocated, and the mappings."""

    name: str
    node: str
    job_id: int
    requests: tuple[ClaimRequest, ...]
    mappings: tuple[RequestMapping, ...]


# --- reading pods ----------------------------------------------------------------------------------


def container_requests(spec: Mapping[str, Any]) -> tuple[ContainerRequest, ...]:
    """The supported DRA extended resources each container (init containers first) asks for more than
    zero of; a container with only limits counts its limits, as the apiserver's defaulting makes them
    its requests. An unreadable amount is kept, for the claim to refuse with its reason."""
    found = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = container.get("resources") or {}
        amounts = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for resource, amount in sorted(amounts.items()):
            supported = resource.removeprefix(resources.DEVICE_CLASS_PREFIX) in resources.SUPPORTED_DEVICE_CLASSES
            if resource.startswith(resources.DEVICE_CLASS_PREFIX) and supported and not _is_zero(amount):
                found.append(ContainerRequest(str(container.get("name") or ""), resource, str(amount)))
    return tuple(found)


def _is_zero(amount: object) -> bool:
    try:
        return quantity.parse(amount) == 0
    except quantity.BadQuantity:
        return False


def read_claim_status(status: Mapping[str, Any]) -> PodClaimStatus | None:
    """pod.status.extendedResourceClaimStatus, None when absent or not readable."""
    raw = status.get("extendedResourceClaimStatus")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("resourceClaimName"), str):
        return None
    mappings = tuple(
        RequestMapping(str(m.get("containerName")), str(m.get("resourceName")), str(m.get("requestName")))
        for m in raw.get("requestMappings") or []
        if isinstance(m, Mapping)
    )
    return PodClaimStatus(raw["resourceClaimName"], mappings)


def claim_name(pod_name: str, pod_uid: str) -> str:
    """One name per pod incarnation (the uid's hash), so a retry finds its own claim and a pod created
    again under the same name never meets the old one's."""
    suffix = f"-extended-resources-{hashlib.sha256(pod_uid.encode()).hexdigest()[:8]}"
    return pod_name[: _CLAIM_NAME_MAX - len(suffix)].rstrip(".-") + suffix


def request_name(device_class: str) -> str:
    """A DNS label per class: ``cpu`` for dra.cpu, else the class with dots as dashes."""
    return "cpu" if device_class == CPU_CLASS else device_class.replace(".", "-")


# --- the plan ---------------------------------------------------------------------------------------


def plan_claim(
    pod_name: str,
    pod_uid: str,
    asked: Sequence[ContainerRequest],
    job_id: int,
    layout: NodeLayout,
    node: str,
    slices: Iterable[Mapping[str, Any]],
) -> ClaimPlan:
    """The claim that gives the pod what Slurm allocated to ``job_id`` on ``layout.node`` (the
    Kubernetes node ``node``), from the devices the drivers publish there; DeviceProblem otherwise."""
    counts = _counts(asked)
    pools = _pools(slices, node)
    requests = []
    for device_class in sorted(counts):
        if device_class == CPU_CLASS:
            devices = _cpu_devices(layout, pools.get(CPU_CLASS, []))
        else:
            devices = _gpu_devices(device_class, counts[device_class], layout, pools.get(device_class, []))
        requests.append(ClaimRequest(request_name(device_class), device_class, devices))
    mappings = tuple(RequestMapping(a.container, a.resource, request_name(a.device_class)) for a in asked)
    return ClaimPlan(claim_name(pod_name, pod_uid), node, job_id, tuple(requests), mappings)


def _counts(asked: Sequence[ContainerRequest]) -> dict[str, int]:
    """Devices per class. A GPU class is given to one container only (its devices are not shared);
    dra.cpu is the job's CPU set, shared by every container that names it."""
    counts: dict[str, int] = {}
    holders: dict[str, str] = {}
    for request in asked:
        try:
            count = quantity.parse(request.quantity)
        except quantity.BadQuantity as err:
            raise DeviceProblem(f"container {request.container!r}: {request.resource}: {err}") from None
        if count < 0 or count != Fraction(int(count)):
            raise DeviceProblem(
                f"container {request.container!r}: {request.resource} must be a whole number of devices"
            )
        cls = request.device_class
        if cls != CPU_CLASS and holders.setdefault(cls, request.container) != request.container:
            raise DeviceProblem(
                f"containers {holders[cls]!r} and {request.container!r} both request {request.resource}; "
                "the bridge gives one container per GPU device class its devices"
            )
        counts[cls] = max(counts.get(cls, 0), int(count))
    return counts


def _gpu_devices(device_class: str, count: int, layout: NodeLayout, pools: list[JSON]) -> tuple[DeviceRef, ...]:
    """The first ``count`` of the GPUs of ``device_class`` Slurm allocated on the node, as the driver's devices."""
    allocated = sorted(
        index
        for gres in layout.gres
        if gres.name == "gpu" and gres.type == device_class
        for index in _indexes(gres.index)
    )
    if len(allocated) < count:
        raise DeviceProblem(
            f"Slurm allocated {len(allocated)} gres/gpu:{device_class} on node {layout.node} "
            f"(index {','.join(map(str, allocated)) or 'none'}), the pod asks for {count}"
        )
    by_index: dict[int, DeviceRef] = {}
    for ref, device in _devices(pools):
        index = _gpu_index(device_class, device)
        if index is None:
            continue
        if index in by_index:
            raise DeviceProblem(f"driver {device_class} publishes two devices with index {index}: "
                                f"{by_index[index].device} and {ref.device}")  # fmt: skip
        by_index[index] = ref
    missing = [i for i in allocated[:count] if i not in by_index]
    if missing:
        raise DeviceProblem(
            f"Slurm allocated gres/gpu:{device_class} index {','.join(map(str, missing))} but driver {device_class} "
            "publishes no such device on the node (is its gres.conf in step with the driver?)"
        )
    return tuple(by_index[i] for i in allocated[:count])


def _gpu_index(device_class: str, device: Mapping[str, Any]) -> int | None:
    if device_class == resources.NVIDIA_GPU_CLASS:
        match = _NVIDIA_GPU.fullmatch(str(device.get("name") or ""))
        return int(match.group(1)) if match else None
    return _int_attribute(device, device_class, "index")


def _cpu_devices(layout: NodeLayout, pools: list[JSON]) -> tuple[DeviceRef, ...]:
    """The CPUs of the abstract cores Slurm allocated (``core_bitmap``), as the dra.cpu driver's devices."""
    cores: dict[tuple[int, int], list[tuple[int, DeviceRef]]] = defaultdict(list)
    for ref, device in _devices(pools):
        socket, core, cpu = (_int_attribute(device, CPU_CLASS, a) for a in ("socketID", "coreID", "cpuID"))
        if socket is None or core is None or cpu is None:
            raise DeviceProblem(
                f"dra.cpu device {ref.device} has no socketID, coreID and cpuID attributes "
                "(run the driver with --cpu-device-mode=individual)"
            )
        if _attribute(device, CPU_CLASS, "coreType").get("string") != "e-core":
            cores[(socket, core)].append((cpu, ref))
    ordered = [sorted(cpus, key=lambda c: c[0]) for _, cpus in sorted(cores.items(), key=lambda kv: kv[0])]
    expected = (layout.sockets or 0) * (layout.cores_per_socket or 0)
    if expected and expected != len(ordered):
        raise DeviceProblem(
            f"Slurm counts {expected} cores on node {layout.node}, driver dra.cpu publishes {len(ordered)}: "
            "Slurm's core numbers cannot be mapped to CPUs"
        )
    chosen = _bits(layout.core_bitmap)
    if not chosen:
        raise DeviceProblem(f"Slurm reports no cores of the job on node {layout.node}")
    beyond = [c for c in chosen if c >= len(ordered)]
    if beyond:
        raise DeviceProblem(f"Slurm allocated core(s) {beyond} on node {layout.node}; driver dra.cpu publishes "
                            f"{len(ordered)} cores")  # fmt: skip
    return tuple(ref for c in chosen for _, ref in ordered[c])


# --- ResourceSlices -----------------------------------------------------------------------------------


def _pools(slices: Iterable[Mapping[str, Any]], node: str) -> dict[str, list[JSON]]:
    """Each driver's pools on ``node``: the slices of each pool's newest generation (their specs, with the
    pool name), a DeviceProblem while a pool is still being published (fewer slices than it announces)."""
    pools: dict[tuple[str, str], list[tuple[int, Mapping[str, Any]]]] = defaultdict(list)
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("nodeName") == node:
            pool = spec.get("pool") or {}
            pools[(str(spec.get("driver") or ""), str(pool.get("name") or ""))].append((_int(pool, "generation"), spec))
    by_driver: dict[str, list[JSON]] = defaultdict(list)
    for (driver, pool), generations in sorted(pools.items(), key=lambda kv: kv[0]):
        newest = max(g for g, _ in generations)
        specs = [spec for g, spec in generations if g == newest]
        announced = max(_int(spec.get("pool") or {}, "resourceSliceCount"), 1)
        if len(specs) < announced:
            raise DeviceProblem(f"driver {driver} is still publishing pool {pool} on node {node} "
                                f"({len(specs)} of {announced} ResourceSlices)")  # fmt: skip
        by_driver[driver].extend({**spec, "pool": pool} for spec in specs)
    return by_driver


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _devices(pools: list[JSON]) -> Iterable[tuple[DeviceRef, Mapping[str, Any]]]:
    for spec in pools:
        for device in spec.get("devices") or []:
            yield DeviceRef(str(spec["driver"]), str(spec["pool"]), str(device.get("name") or "")), device


def _attribute(device: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any]:
    """A device attribute by its qualified (``<driver>/<name>``) or short name (the driver's domain)."""
    attributes = device.get("attributes") or {}
    return attributes.get(f"{driver}/{name}") or attributes.get(name) or {}


def _int_attribute(device: Mapping[str, Any], driver: str, name: str) -> int | None:
    value = _attribute(device, driver, name).get("int")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _indexes(text: str) -> list[int]:
    """Slurm's GRES index list ("1-2", "0,3") as numbers."""
    try:
        return [int(i) for i in expand_hostlist(f"[{text}]")] if text else []
    except ValueError as err:
        raise DeviceProblem(f"unreadable GRES index {text!r} from Slurm: {err}") from None


def _bits(bitmap: str) -> list[int]:
    """The set bits of Slurm's hex core bitmap ("0xC" -> [2, 3])."""
    try:
        value = int(bitmap, 16) if bitmap else 0
    except ValueError:
        raise DeviceProblem(f"unreadable core bitmap {bitmap!r} from Slurm") from None
    return [i for i in range(value.bit_length()) if value >> i & 1]


# --- objects ------------------------------------------------------------------------------------------


def claim_body(plan: ClaimPlan, namespace: str, pod_name: str, pod_uid: str) -> JSON:
    """The ResourceClaim (owned by the pod, so it goes with it); its status is written separately."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": plan.name,
            "namespace": namespace,
            "labels": {names.LABEL_SLURM_JOB_ID: str(plan.job_id)},
            "annotations": {names.ANNOTATION_EXTENDED_RESOURCE_CLAIM: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "controller": True}
            ],
        },
        "spec": {"devices": {"requests": [_request(r) for r in plan.requests]}},
    }


def _request(request: ClaimRequest) -> JSON:
    return {
        "name": request.name,
        "exactly": {
            "deviceClassName": request.device_class,
            "allocationMode": "ExactCount",
            "count": len(request.devices),
        },
    }


def claim_status(plan: ClaimPlan, pod_name: str, pod_uid: str) -> JSON:
    """status: allocated on the node to exactly Slurm's devices, reserved for the pod."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": r.name, "driver": d.driver, "pool": d.pool, "device": d.device}
                    for r in plan.requests
                    for d in r.devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [plan.node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
    }


def pod_claim_status(plan: ClaimPlan) -> PodClaimStatus:
    return PodClaimStatus(plan.name, plan.mappings)


def pod_status_body(status: PodClaimStatus) -> JSON:
    """The pods/status patch that tells the kubelet which claim request backs each container's resource."""
    return {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": status.claim,
                "requestMappings": [
                    {"containerName": m.container, "resourceName": m.resource, "requestName": m.request}
                    for m in status.mappings
                ],
            }
        }
    }


def claim_agrees(stored: Mapping[str, Any], wanted: JSON) -> bool:
    """A stored claim is the wanted one: same job label and the same requests (by the fields we set,
    so the apiserver's defaults do not count)."""
    job = ((stored.get("metadata") or {}).get("labels") or {}).get(names.LABEL_SLURM_JOB_ID)
    return job == wanted["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] and _requests_key(stored) == _requests_key(
        wanted
    )


def _requests_key(claim: Mapping[str, Any]) -> list[tuple[str, str, str, int]]:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    exact = [(str(r.get("name")), r.get("exactly") or {}) for r in requests]
    return sorted(
        (name, str(e.get("deviceClassName")), str(e.get("allocationMode")), int(e.get("count") or 0))
        for name, e in exact
    )


def allocation_state(stored: Mapping[str, Any], wanted: JSON) -> str:
    """``missing`` (not allocated yet), ``ours`` (allocated as wanted) or ``other`` (allocated otherwise:
    an allocation cannot change, the claim has to be made again)."""
    allocation = (stored.get("status") or {}).get("allocation")
    if allocation is None:
        return "missing"
    return "ours" if _allocation_key(allocation) == _allocation_key(wanted["allocation"]) else "other"


def reserved_as_wanted(stored: Mapping[str, Any], wanted: JSON) -> bool:
    return ((stored.get("status") or {}).get("reservedFor") or []) == wanted["reservedFor"]


def _allocation_key(allocation: Mapping[str, Any]) -> tuple[list[tuple[str, str, str, str]], Any]:
    results = (allocation.get("devices") or {}).get("results") or []
    devices = sorted((str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                     for r in results)  # fmt: skip
    return devices, allocation.get("nodeSelector")
