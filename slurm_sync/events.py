"""Kubernetes Events (events.k8s.io/v1) about our objects, so `kubectl describe` shows what slurm_sync
refuses to do and why. Minimal on purpose: Warning events only, each (object, reason) posted at most
once per ``interval`` unless its note changes; a failed post is logged, never a pass error."""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_sync.kube import Kube, describe_error

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "slinky.slurm.net/slurm-sync"
EVENT_INTERVAL = 600.0  # seconds between two identical events about one object


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


def event_body(ref: ObjectRef, reason: str, note: str, action: str, instance: str, now: datetime.datetime) -> dict:
    regarding = {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace, "name": ref.name}
    if ref.uid:
        regarding["uid"] = ref.uid
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.name}.", "namespace": ref.namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "regarding": regarding,
        "note": note[:1024],  # the API's limit for note
        "type": "Warning",
    }


class Events:
    """Posts Warning events, rate-limited per (object, reason)."""

    def __init__(
        self,
        kube: Kube,
        instance: str = os.environ.get("HOSTNAME", "slurm-sync"),
        interval: float = EVENT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.interval = interval
        self._clock = clock
        self._posted: dict[tuple[str, str, str], tuple[float, str]] = {}  # (ns, name, reason) -> (when, note)

    def warn(self, ref: ObjectRef, reason: str, note: str, action: str = "Sync") -> bool:
        """Post unless the same note about the same object and reason went out within ``interval``."""
        key = (ref.namespace, ref.name, reason)
        last = self._posted.get(key)
        now = self._clock()
        if last is not None and last[1] == note and now - last[0] < self.interval:
            return False
        body = event_body(ref, reason, note, action, self.instance, datetime.datetime.now(datetime.UTC))
        try:
            self.kube.create_event(ref.namespace, body)
        except Exception as exc:  # an ApiException or an unreachable apiserver: the log still says it
            log.error("event %s on %s %s/%s not posted: %s", reason, ref.kind, ref.namespace, ref.name, describe_error(exc))
            return False
        self._posted[key] = (now, note)
        return True
