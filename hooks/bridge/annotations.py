"""The user's `slurmjob.slinky.slurm.net/*` annotations, parsed with slurm-bridge's rules.

Strings pass verbatim; `cpu-per-task` is a quantity rounded up ("200m" -> 1); `mem-per-node` a
quantity in whole MiB rounded down ("1Gi" -> 1024), each within what Slurm holds (quantity.MAX_*);
`min-nodes`, `max-nodes`, `priority` and `timelimit` (minutes) are base-10 int32; `exclusive` is
false only for "false" (any case, trimmed). Every bad value is reported, not just the first, so
one fix round is enough for the user. Unknown keys under the prefix are ignored, as slurm-bridge does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slinky_common import names, quantity

_INT32 = re.compile(r"[+-]?[0-9]+")
STRING_KEYS = ("account", "constraints", "gres", "group-id", "job-name", "licenses", "partition", "qos",
               "reservation", "user-id", "wckey")  # fmt: skip
INT_KEYS = ("max-nodes", "min-nodes", "priority", "timelimit")


class BadAnnotations(ValueError):
    """One or more annotations could not be parsed; the message names each key and value."""


@dataclass(frozen=True)
class JobAnnotations:
    strings: dict[str, str]  # STRING_KEYS present, by key
    ints: dict[str, int]  # INT_KEYS present, by key
    cpus_per_task: int | None = None
    memory_mib: int | None = None
    exclusive: bool = True


def key(name: str) -> str:
    return names.SLURMJOB_PREFIX + name


def parse(annotations: Mapping[str, str], where: str) -> JobAnnotations:
    """Parse the annotations of the annotation source `where` (e.g. "Job ns/name")."""
    problems: list[str] = []
    ints: dict[str, int] = {}
    for name in INT_KEYS:
        if (raw := annotations.get(key(name))) is not None:
            try:
                ints[name] = _int32(raw)
            except ValueError as err:
                problems.append(f"{key(name)}={raw!r}: {err}")
    cpus = memory = None
    if (raw := annotations.get(key("cpu-per-task"))) is not None:
        try:
            cpus = quantity.cpus(quantity.parse(raw))
        except quantity.BadQuantity as err:
            problems.append(f"{key('cpu-per-task')}={raw!r}: {err}")
    if (raw := annotations.get(key("mem-per-node"))) is not None:
        try:
            memory = quantity.mebibytes(quantity.parse(raw))
        except quantity.BadQuantity as err:
            problems.append(f"{key('mem-per-node')}={raw!r}: {err}")
    if problems:
        raise BadAnnotations(f"invalid annotations on {where}: " + "; ".join(sorted(problems)))
    return JobAnnotations(
        strings={name: annotations[key(name)] for name in STRING_KEYS if key(name) in annotations},
        ints=ints,
        cpus_per_task=cpus,
        memory_mib=memory,
        exclusive=annotations.get(key("exclusive"), "").strip().lower() != "false",
    )


def _int32(text: str) -> int:
    """strconv.ParseInt(text, 10, 32): optional sign and digits only, within int32."""
    if not _INT32.fullmatch(text):
        raise ValueError("not a base-10 integer")
    number = int(text)
    if not -(2**31) <= number < 2**31:
        raise ValueError("out of the int32 range")
    return number
