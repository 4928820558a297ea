"""A NodeSet's generic resources (GPUs) as its slurmd registers them, and the GresTypes slurmctld must know.

A worker pod whose slurmd container is given device-plugin GPUs (`nvidia.com/gpu`, `amd.com/gpu`) owns them,
so its Slurm node should offer them: the dynamic node registers `Gres=gpu:<count>` through slurmd's `--conf`,
the same place Slinky puts a user's own `Gres=` from the NodeSet's `extraConf` (as its vendor presets do). An
explicit `Gres=` always wins: it can name GPU types or other gres the device plugin does not describe. Slurm
refuses a node gres whose name is not in `GresTypes`, so the Controller's slurm.conf lists every name used.
Which devices back the count is slurmd's business: it counts them from gres.conf, which the site provides
through the Controller's configFileRefs (`AutoDetect=nvidia`, or `rsmi` for AMD, as Slinky's vendor presets
do) and configless slurmd fetch. Without one slurmd counts no GPU and slurmctld marks the node INVALID
("gres/gpu count reported lower than configured"), so a missing gres.conf shows on the node, never silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slinky_common import quantity
from slinky_common.errors import InvalidSpec
from slinky_common.jsontypes import JSON
from slinky_common.resources import DEVICE_PLUGIN_GPUS

GPU = "gpu"
_NAME = re.compile(r"[A-Za-z0-9_]+")


def node_gres(explicit: list[str] | None, slurmd: JSON, template_spec: JSON, where: str) -> str | None:
    """The `Gres=` value of the NodeSet's nodes: the user's extraConf `Gres`, else the slurmd container's GPUs."""
    if explicit:
        value = ",".join(explicit)
        gres_types(value, f"{where} spec.extraConf Gres")
        return value
    count = requested_gpus(slurmd_resources(slurmd, template_spec), where)
    return f"{GPU}:{count}" if count else None


def slurmd_resources(slurmd: JSON, template_spec: JSON) -> JSON:
    """The slurmd container's resources: the `slurmd` override, else the template's container named slurmd."""
    if isinstance(slurmd.get("resources"), dict):
        return slurmd["resources"]
    containers = template_spec.get("containers")
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, dict) and container.get("name") == "slurmd":
            resources = container.get("resources")
            return resources if isinstance(resources, dict) else {}
    return {}


def requested_gpus(resources: JSON, where: str) -> int:
    """Device-plugin GPUs of one container: its limit, else its request (Kubernetes makes them equal)."""
    total = 0
    for resource in DEVICE_PLUGIN_GPUS:
        for kind in ("limits", "requests"):
            amounts = resources.get(kind)
            if isinstance(amounts, dict) and amounts.get(resource) is not None:
                total += _count(amounts[resource], f"{where} slurmd resources.{kind}[{resource!r}]")
                break
    return total


def gres_types(gres: str, where: str) -> tuple[str, ...]:
    """The gres names of a `Gres=` value (`gpu:h100:8,shard:16` → gpu, shard), sorted; InvalidSpec if malformed."""
    names = set()
    for item in gres.split(","):
        name = item.split(":", 1)[0]
        if not _NAME.fullmatch(name):
            raise InvalidSpec(f"{where} must be comma-separated name[:type][:count] items, got {gres!r}")
        names.add(name)
    return tuple(sorted(names))


def union(types: Iterable[Iterable[str]]) -> tuple[str, ...]:
    return tuple(sorted({name for names in types for name in names}))


def _count(amount: object, where: str) -> int:
    try:
        value = quantity.parse(amount)
    except quantity.BadQuantity as err:
        raise InvalidSpec(f"{where}: {err}") from None
    if value < 0 or value.denominator != 1:
        raise InvalidSpec(f"{where} must be a whole number of devices, got {amount!r}")
    return int(value)
