"""Custom resources no hook answer ever reached: Metacontroller missing, stopped, or unable to call the hooks.

Every hook answer carries status conditions (hooks/status.py), so a CR that still has none long after its
creation was never synced, and nothing else tells the user why: `helm install` succeeded, `kubectl get`
shows an empty STATUS, `kubectl wait` times out. slurm_sync is then often the only process of ours doing
anything, so it says it where the user looks (docs/operations.md, "A custom resource keeps an empty status"):
a Warning Event `NotSynced` on the object (at most once per EVENT_INTERVAL) and a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slinky_common import names
from slurm_sync.events import Events, ObjectRef
from slurm_sync.operator.reservations import parse_time

log = logging.getLogger(__name__)

GRACE = 120  # seconds after creation: Metacontroller syncs a new object within its first resync, seconds
REASON = "NotSynced"
HOW_TO_CHECK = (
    "Metacontroller has not synced it: check that it is installed and running "
    "(kubectl get pods -A -l 'app.kubernetes.io/name in (metacontroller,metacontroller-helm)'), "
    "that our CompositeControllers exist "
    "(kubectl get compositecontrollers -l app.kubernetes.io/part-of=slurm-operator), and Metacontroller's "
    "log for its calls to the hooks"
)


@dataclass(frozen=True)
class Unsynced:
    kind: str
    namespace: str
    name: str
    uid: str
    age: int  # seconds since creation

    @property
    def note(self) -> str:
        """The same while it lasts (Events posts a changed note at once, an unchanged one rarely)."""
        return f"no status {GRACE} s or more after its creation: {HOW_TO_CHECK}"


def unsynced(kind: str, objects: Iterable[Mapping[str, Any]], now: int, grace: int = GRACE) -> list[Unsynced]:
    """The objects of ``kind`` without a status condition ``grace`` seconds after creation (not deleting)."""
    found = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        created = parse_time(meta.get("creationTimestamp"))
        status = obj.get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        if created is None or conditions or meta.get("deletionTimestamp") or now - created < grace:
            continue
        found.append(Unsynced(kind, str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid") or ""),
                              now - created))  # fmt: skip
    return found


def tell(events: Events, found: Iterable[Unsynced], told: frozenset[str]) -> frozenset[str]:
    """A Warning Event on each object (Events rate-limits repeats), and a log line when the set of such
    objects changed since ``told`` (what the previous call returned), not every pass."""
    found = list(found)
    for item in found:
        events.warn(ObjectRef(names.API_VERSION, item.kind, item.namespace, item.name, item.uid), REASON, item.note)
    now_told = frozenset(f"{i.kind} {i.namespace}/{i.name}" for i in found)
    if now_told and now_told != told:
        listed = sorted(now_told)
        more = f" and {len(listed) - 5} more" if len(listed) > 5 else ""
        log.warning("%s%s: no status %d s or more after creation: %s", ", ".join(listed[:5]), more, GRACE, HOW_TO_CHECK)
    return now_told
