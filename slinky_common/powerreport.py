"""The power report of an elastic NodeSet (docs/architecture.md §4.9): what Slurm's power saving wants of each of
its on-demand nodes, written by slurm_sync on the NodeSet (names.ANNOTATION_POWER_OBSERVED) and read by the NodeSet
hook, which creates the pods of nodes that are up and removes those of nodes that are down.

A node in no list is unknown (the listing lacked it): neither side acts on it. An annotation that cannot be read
is no report at all, for the same reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from slinky_common import slurmstate

_KEYS = {"up": slurmstate.POWER_UP, "down": slurmstate.POWER_DOWN, "resumeFailed": slurmstate.RESUME_FAILED}


@dataclass(frozen=True)
class PowerReport:
    up: tuple[str, ...] = ()
    down: tuple[str, ...] = ()
    resume_failed: tuple[str, ...] = ()

    def value(self) -> str:
        """The annotation value (compact JSON, stable key order)."""
        body = {"up": list(self.up), "down": list(self.down), "resumeFailed": list(self.resume_failed)}
        return json.dumps(body, separators=(",", ":"))

    def power_of(self) -> dict[str, str]:
        """Each listed node's power (slurmstate.POWER_UP, POWER_DOWN or RESUME_FAILED)."""
        found = {node: slurmstate.RESUME_FAILED for node in self.resume_failed}
        found.update((node, slurmstate.POWER_DOWN) for node in self.down)
        found.update((node, slurmstate.POWER_UP) for node in self.up)
        return found


def read_report(value: str | None) -> PowerReport | None:
    """The report in an annotation value; None when absent or not one (then nothing is known)."""
    if not value:
        return None
    try:
        body = json.loads(value)
    except ValueError:
        return None
    if not isinstance(body, dict) or set(body) - _KEYS.keys():
        return None
    lists = [body.get(key, []) for key in _KEYS]
    if not all(isinstance(nodes, list) and all(isinstance(n, str) for n in nodes) for nodes in lists):
        return None
    return PowerReport(*(tuple(nodes) for nodes in lists))
