"""Kubernetes Events (events.k8s.io/v1) about our objects, so `kubectl describe` shows what slurm_sync
did on a user's behalf and what it refused to do, and why (docs/architecture.md §4).

Each event names the object it is about (a worker or bridge pod, a NodeSet, a Controller), a
CamelCase reason and a note a person can act on. Normal for what we did, Warning for what we refused,
could not do or ended on purpose. A rate limit per (object, reason) keeps a flapping node from
flooding the API: the same note is posted at most once per ``interval``; a new note goes out at once.
A failed post is logged, never a pass error (an event is a courtesy, the state is on the objects).
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slinky_common import names
from slurm_sync.kube import Kube, describe_error

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = names.SLINKY_PREFIX + "slurm-sync"
EVENT_INTERVAL = 600.0  # seconds between two identical events about one object
MAX_NOTE = 1024  # the API's limit for note, in bytes
_FORGET_AT = 4096  # remembered posts beyond which expired ones are dropped


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


def pod_ref(namespace: str, name: str, uid: str = "") -> ObjectRef:
    return ObjectRef("v1", "Pod", namespace, name, uid)


def nodeset_ref(namespace: str, name: str, uid: str = "") -> ObjectRef:
    return ObjectRef(names.API_VERSION, "NodeSet", namespace, name, uid)


def controller_ref(namespace: str, name: str, uid: str = "") -> ObjectRef:
    return ObjectRef(names.API_VERSION, "Controller", namespace, name, uid)


def event_name(ref: ObjectRef, now: datetime.datetime) -> str:
    """``<object>.<nanoseconds, hex>`` as client-go names events: an apiserver refuses a generateName
    that ends in ``.`` (found on a real one), and this one sorts by time."""
    nanoseconds = int(now.timestamp()) * 10**9 + now.microsecond * 1000
    suffix = f".{nanoseconds:x}"
    return ref.name[: 253 - len(suffix)] + suffix


def event_body(
    ref: ObjectRef, kind: str, reason: str, note: str, action: str, instance: str, now: datetime.datetime
) -> dict:
    """``kind``: Normal or Warning."""
    regarding = {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace, "name": ref.name}
    if ref.uid:
        regarding["uid"] = ref.uid
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name(ref, now), "namespace": ref.namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "regarding": regarding,
        "note": note.encode()[:MAX_NOTE].decode(errors="ignore"),  # the API counts bytes
        "type": kind,
    }


class Events:
    """Posts Normal and Warning events, rate-limited per (object, reason)."""

    def __init__(
        self,
        kube: Kube | None,
        instance: str = os.environ.get("HOSTNAME", "slurm-sync"),
        interval: float = EVENT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.interval = interval
        self._clock = clock
        # (kind, namespace, name, reason) -> (when, note) of the last post
        self._posted: dict[tuple[str, str, str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()

    def normal(self, ref: ObjectRef, reason: str, note: str, action: str) -> bool:
        """Something we did on the user's behalf."""
        return self._post(ref, "Normal", reason, note, action)

    def warn(self, ref: ObjectRef, reason: str, note: str, action: str = "Sync") -> bool:
        """Something we refused, could not do, or ended on purpose."""
        return self._post(ref, "Warning", reason, note, action)

    def notify(self, ref: ObjectRef, notice: Notice) -> bool:
        return self._post(ref, notice.kind, notice.reason, notice.note, notice.action)

    def _post(self, ref: ObjectRef, kind: str, reason: str, note: str, action: str) -> bool:
        """Post unless the same note about the same object and reason went out within ``interval``."""
        key = (ref.kind, ref.namespace, ref.name, reason)
        last = self._posted.get(key)
        now = self._clock()
        if last is not None and last[1] == note and now - last[0] < self.interval:
            return False
        if self.kube is None:
            return False
        body = event_body(ref, kind, reason, note, action, self.instance, datetime.datetime.now(datetime.UTC))
        try:
            self.kube.create_event(ref.namespace, body)
        except Exception as exc:  # an ApiException or an unreachable apiserver: the log still says it
            log.error(
                "event %s on %s %s/%s not posted: %s", reason, ref.kind, ref.namespace, ref.name, describe_error(exc)
            )
            return False
        with self._lock:  # the operator loop's write workers post from several threads
            if len(self._posted) >= _FORGET_AT:
                self._posted = {k: v for k, v in self._posted.items() if now - v[0] < self.interval}
            self._posted[key] = (now, note)
        return True


# --- what the operator loop's writes mean to a person (pure) -----------------------------------


@dataclass(frozen=True)
class Notice:
    """One event to post: Normal or Warning, its reason, note and action."""

    kind: str
    reason: str
    note: str
    action: str


def mark_notices(slurm_node: str, metadata_patch: Mapping[str, Any]) -> list[Notice]:
    """What a pod's metadata patch did that a person should see: the drained and absent marks set,
    workload protection added or removed (strategic merge: None deletes)."""
    meta = metadata_patch.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    found = []
    if mark := annotations.get(names.ANNOTATION_DRAINED):
        found.append(
            Notice(
                "Normal",
                "SlurmNodeDrained",
                f"Slurm reports node {slurm_node} drained: no job runs there and "
                f"none will start; marked {names.ANNOTATION_DRAINED}={mark}, so the NodeSet may now delete this pod.",
                "Mark",
            )
        )
    if annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true":
        found.append(
            Notice(
                "Normal",
                "SlurmNodeAbsent",
                f"Slurm said twice that it has no node {slurm_node}; marked "
                f"{names.ANNOTATION_SLURM_NODE_ABSENT}=true. Check the pod's slurmd log if it should have "
                "registered.",
                "Mark",
            )
        )
    if names.LABEL_POD_PROTECT in labels:
        if labels[names.LABEL_POD_PROTECT] == "true":
            found.append(
                Notice(
                    "Normal",
                    "PodProtected",
                    f"Slurm node {slurm_node} runs jobs: labelled "
                    f"{names.LABEL_POD_PROTECT}=true, the workers' PodDisruptionBudget blocks voluntary "
                    "eviction until they end.",
                    "Protect",
                )
            )
        else:
            found.append(
                Notice(
                    "Normal",
                    "PodUnprotected",
                    f"Slurm node {slurm_node} runs no job any more: "
                    f"{names.LABEL_POD_PROTECT} removed, the pod may be evicted.",
                    "Unprotect",
                )
            )
    return found


def node_update_notice(slurm_node: str, state: tuple[str, ...], reason: str | None) -> Notice | None:
    """A drain or undrain we sent and Slurm took; None for other node updates (comment, features ...)."""
    if "DRAIN" in state:
        return Notice(
            "Normal",
            "SlurmNodeDraining",
            f"Slurm node {slurm_node} set to drain ({reason}): running jobs "
            "finish, no new job starts; the pod goes once Slurm reports the node drained.",
            "Drain",
        )
    if "UNDRAIN" in state or "RESUME" in state:
        return Notice(
            "Normal",
            "SlurmNodeUndrained",
            f"Slurm node {slurm_node} returned to service ({state[0]}): the "
            "drain slurm-operator set is no longer wanted.",
            "Undrain",
        )
    return None
