"""The power report of an elastic NodeSet (docs/architecture.md §4.9): what Slurm's power saving wants of each of
its on-demand nodes, written by slurm_sync on the NodeSet (names.ANNOTATION_POWER_OBSERVED) and read by the NodeSet
hook, which creates the pods of nodes that are up and removes those of nodes that are down.

A node in no list is unknown (the listing lacked it, or Slurm has only just powered it up): neither side acts on
it. An annotation that cannot be read is no report at all, for the same reason.

`upSince` gives each node Slurm powers up the second slurm_sync first saw it powering up (Unix time, slurmctld's
clock as far as the cluster's clocks agree, as Slurm's own authentication needs). The node's pod reports it as its
boot time (`SLURMD_BOOT_TIME` with slurmd's `-b`), which must be no earlier than Slurm's resume request (slurmctld
waits for a boot after it) and at least a second before the node registers: slurmctld derives a node's boot time
from the uptime slurmd sends, in whole seconds, so a boot time taken at slurmd's own start comes out a second later
on a registration that crosses a second boundary, and slurmctld then takes it for an unexpected reboot, sets the
node DOWN and requeues its job (seen on the cluster lab). So a node is listed `up` only from the second after its
`upSince`: its pod, made after that, registers it later still.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from slinky_common import slurmstate

_KEYS = {"up": slurmstate.POWER_UP, "down": slurmstate.POWER_DOWN, "resumeFailed": slurmstate.RESUME_FAILED}
_SINCE = "upSince"


@dataclass(frozen=True)
class PowerReport:
    up: tuple[str, ...] = ()
    down: tuple[str, ...] = ()
    resume_failed: tuple[str, ...] = ()
    up_since: tuple[tuple[str, int], ...] = ()  # (node, second first seen powering up), sorted by node

    def value(self) -> str:
        """The annotation value (compact JSON, stable key order; `upSince` only when there is one)."""
        body: dict[str, object] = {
            "up": list(self.up),
            "down": list(self.down),
            "resumeFailed": list(self.resume_failed),
        }
        if self.up_since:
            body["upSince"] = dict(self.up_since)
        return json.dumps(body, separators=(",", ":"))

    def since(self) -> dict[str, int]:
        """Each node's `upSince` second."""
        return dict(self.up_since)

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
    if not isinstance(body, dict) or set(body) - {*_KEYS, _SINCE}:
        return None
    lists = [body.get(key, []) for key in _KEYS]
    if not all(isinstance(nodes, list) and all(isinstance(n, str) for n in nodes) for nodes in lists):
        return None
    since = body.get(_SINCE, {})
    if not isinstance(since, dict) or not all(
        isinstance(second, int) and not isinstance(second, bool) and second >= 0 for second in since.values()
    ):
        return None
    up, down, resume_failed = (tuple(nodes) for nodes in lists)
    return PowerReport(up, down, resume_failed, tuple(sorted(since.items())))
