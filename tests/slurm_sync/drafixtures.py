"""Builders for the DRA tests: the ResourceSlices DRA drivers publish for a node, as the
drivers write them (k8s-dra-driver-gpu names full GPUs ``gpu-<minor>``; dra-example-driver gives
each GPU an ``index`` attribute; dra-driver-cpu in individual mode one device per CPU with
``dra.cpu/{socketID,coreID,cpuID,coreType}``), and containers asking for device classes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

JSON = dict[str, Any]
PREFIX = "deviceclass.resource.kubernetes.io/"
NVIDIA, EXAMPLE, CPU = "gpu.nvidia.com", "gpu.example.com", "dra.cpu"


def resource_slice(
    name: str,
    node: str,
    driver: str,
    devices: list[JSON],
    *,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def nvidia_slice(name: str, node: str, minors: Iterable[int]) -> JSON:
    devices = [{"name": f"gpu-{m}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{m}"}}}
               for m in minors]  # fmt: skip
    return resource_slice(name, node, NVIDIA, devices)


def example_slice(name: str, node: str, indexes: Iterable[int]) -> JSON:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "model": {"string": "LATEST-GPU-MODEL"}}}
               for i in indexes]  # fmt: skip
    return resource_slice(name, node, EXAMPLE, devices)


def cpu_slice(name: str, node: str, cpus: Iterable[tuple[int, int, int]], e_cores: Iterable[int] = ()) -> JSON:
    """One device per CPU (socket, core, cpu id), named ``cpudev<id>``."""
    efficiency = set(e_cores)
    devices = [
        {
            "name": f"cpudev{cpu}",
            "attributes": {
                "dra.cpu/socketID": {"int": socket},
                "dra.cpu/coreID": {"int": core},
                "dra.cpu/cpuID": {"int": cpu},
                "dra.cpu/coreType": {"string": "e-core" if cpu in efficiency else "p-core"},
                "dra.cpu/numaNodeID": {"int": socket},
            },
        }
        for socket, core, cpu in cpus
    ]
    return resource_slice(name, node, CPU, devices)


def container(name: str, **classes: str) -> JSON:
    """A container requesting (and limiting) device classes: ``container("c", nvidia="2")``."""
    by_key = {"nvidia": NVIDIA, "example": EXAMPLE, "cpu": CPU}
    amounts = {PREFIX + by_key[k]: v for k, v in classes.items()}
    return {"name": name, "image": "busybox", "resources": {"requests": dict(amounts), "limits": dict(amounts)}}
