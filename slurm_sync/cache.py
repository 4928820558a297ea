"""slurm_sync's Kubernetes listings served from watches: ``CachedKube`` is a ``Kube`` whose
``list_pods``, ``list_nodes`` and ``list_custom`` read informers (slurm_sync/informer.py) instead of
asking the API server (docs/architecture.md §4.8).

* One informer per collection read (a namespace and label selector for pods, every Node, our CRs per
  namespace or cluster-wide), started by its first read, which waits for the first listing (a resync
  is not waited for: the read fails at once, and the resync's end wakes the loop); one no pass has
  read for ``idle_seconds`` (its Controller went away) is stopped.
* Fail closed: a read of a collection that is not synced raises ``NotSynced``, which every caller
  already treats as a failed read: nothing is written that depends on it, and readiness names it.
* The objects are the API server's JSON dicts, as a listing returns them, minus what no reader
  looks at and costs the most memory: ``managedFields``, Metacontroller's last-applied annotation,
  all of a pod's spec and status but the few fields the views read, all of a Node's status but its
  conditions. They are shared with the cache: read them, never change them.
* A change wakes the loop unless it touched only what changes by itself (the resourceVersion, a
  Node's condition heartbeats).
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import orjson
from kubernetes.client.api_client import ApiClient

from slinky_common import names
from slinky_common.decode import shaped
from slurm_sync.informer import Collection, Informer, Lister, Watcher
from slurm_sync.kube import ChangeMark, ChangeMarks, Kube, WriteCounter, selector
from slurm_sync.shapes import record
from slurm_sync.throttle import TokenBucket

JSON = dict[str, Any]
V = TypeVar("V")
SYNC_TIMEOUT = 10.0  # how long a first read waits for the first listing before it fails (NotSynced)
IDLE_SECONDS = 600.0


# What the views read of a pod (slurm_sync/operator/view.py, slurm_sync/bridge/view.py) and of a Node beyond
# its metadata and spec: the cache keeps only these (tests/slurm_sync/test_cache.py holds the views to it).
POD_SPEC = ("hostname", "nodeName", "schedulerName", "schedulingGroup")
POD_STATUS = ("phase", "conditions")
NODE_STATUS = ("conditions",)


def trim(obj: JSON) -> JSON:
    """The object without what no reader looks at (in place: the dict is freshly decoded)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(names.ANNOTATION_LAST_APPLIED, None)
    return obj


def trim_pod(obj: JSON) -> JSON:
    """A pod with only the parts of its spec and status a view reads (containers, volumes and container
    statuses are most of a pod, and a kubelet's status update of them then wakes nobody)."""
    return _keep(_keep(trim(obj), "spec", POD_SPEC), "status", POD_STATUS)


def trim_node(obj: JSON) -> JSON:
    """A Node with only its conditions of its status (its images, capacity and system info go)."""
    return _keep(trim(obj), "status", NODE_STATUS)


def _page_shape(status: tuple[str, ...], spec: tuple[str, ...] | None) -> Any:
    """A listing page of objects with what ``trim_pod``/``trim_node`` keep of their status and spec (None:
    all of it) (slurm_sync/shapes.py): pods and Nodes have no top-level fields but these."""
    parts = {"status": record("status", status)} | ({"spec": record("spec", spec)} if spec is not None else {})
    item = record("item", ("apiVersion", "kind", "metadata") + (("spec",) if spec is None else ()), **parts)
    return record("page", ("metadata",), items=list[item])  # type: ignore[valid-type]


# Decoders of listing pages into what the cache keeps (a pod's containers or a Node's images are never built).
POD_PAGE = shaped(_page_shape(POD_STATUS, POD_SPEC), orjson.loads)
NODE_PAGE = shaped(_page_shape(NODE_STATUS, None), orjson.loads)


def _keep(obj: JSON, part: str, fields: tuple[str, ...]) -> JSON:
    value = obj.get(part)
    if isinstance(value, dict):
        obj[part] = {k: value[k] for k in fields if k in value}
    return obj


def _steady(obj: JSON) -> JSON:
    """What a change must touch to matter: all but the resourceVersion and condition heartbeats."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    status = obj.get("status")
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        conditions = [
            {k: v for k, v in c.items() if k != "lastHeartbeatTime"} if isinstance(c, dict) else c
            for c in status["conditions"]
        ]
        status = {**status, "conditions": conditions}
    return {**obj, "metadata": meta, "status": status}


def matters(old: JSON | None, new: JSON | None) -> bool:
    """Whether a change can give a pass something to do (an object came, went or really changed)."""
    return old is None or new is None or _steady(old) != _steady(new)


class ViewMemo(Generic[V]):
    """Views of objects, made again only for the dicts not seen by the previous call: the cache hands
    out the very same dict until its object changes, so an unchanged object costs a lookup. ``keep``
    False (objects of a fresh listing: new dicts, never a hit) keeps nothing, so that a listing is not
    held in memory until the next one."""

    def __init__(self, read: Callable[[JSON], V]) -> None:
        self._read = read
        self._last: dict[int, tuple[JSON, V]] = {}
        self._listed: tuple[Iterable[JSON], list[V]] | None = None  # the last listing read and its views

    def __call__(self, objects: Iterable[JSON], keep: bool = True) -> list[V]:
        """The views of ``objects``; the very same list for the very same listing (the cache hands it out
        again while its collection is unchanged: an idle pass costs nothing per object, issue 28), and for a
        listing whose objects changed only in what no view reads (a resourceVersion, a condition's heartbeat,
        a container's status): such an object's view is the view it had, and the list the list it was."""
        if not keep:
            self._last, self._listed = {}, None
            return [self._read(obj) for obj in objects]
        if self._listed is not None and self._listed[0] is objects:
            return self._listed[1]
        before = self._listed[1] if self._listed is not None else []
        seen: dict[int, tuple[JSON, V]] = {}
        views: list[V] = []
        for index, obj in enumerate(objects):
            hit = self._last.get(id(obj))
            if hit is not None and hit[0] is obj:
                view = hit[1]
            else:
                view = self._read(obj)
                if index < len(before) and view == before[index]:
                    view = before[index]  # the cache keeps an object's place when it changes
            seen[id(obj)] = (obj, view)
            views.append(view)
        self._last = seen
        if len(views) == len(before) and all(map(operator.is_, views, before)):
            views = before
        self._listed = (objects, views)
        return views


class KubeCache:
    """The informers, by collection; read from the pass threads (the loop's and every worker's)."""

    def __init__(
        self,
        wake: Callable[[], None],
        sync_timeout: float = SYNC_TIMEOUT,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wake = wake
        self._sync_timeout = sync_timeout
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._informers: dict[Collection, Informer] = {}
        self._read_at: dict[Collection, float] = {}

    def items(
        self, collection: Collection, lister: Lister, watcher: Watcher, transform: Callable[[JSON], JSON] = trim
    ) -> list[JSON]:
        """The collection's objects; NotSynced while the cache cannot vouch for them."""
        with self._lock:
            self._stop_idle()
            informer = self._informers.get(collection)
            created = informer is None or not informer.running  # new, or its thread ended (a bug): anew
            if informer is None or not informer.running:
                informer = self._informers[collection] = Informer(
                    collection, lister, watcher, self._wake, transform, matters
                )
                informer.start()
            self._read_at[collection] = self._clock()
        # The first listing is waited for by the reader that started it and by any that came while it runs
        # (the passes of clusters run side by side, and each reads the Nodes); a resync is not (its end
        # wakes the loop), nor a first listing that failed (the informer tries again after a backoff).
        if created or informer.first_listing:
            informer.wait_synced(self._sync_timeout)
        return informer.items()

    def mark(self, collection: Collection) -> ChangeMark | None:
        """Where the collection's informer is now (None: none runs); see ``Informer.mark``."""
        with self._lock:
            informer = self._informers.get(collection)
        return informer.mark() if informer is not None else None

    def changes(self, collection: Collection, mark: ChangeMark | None) -> list[JSON] | None:
        """The collection's objects changed since ``mark``; None when unknown (see ``Informer.changes``)."""
        with self._lock:
            informer = self._informers.get(collection)
        return informer.changes(mark) if informer is not None and mark is not None else None

    def informers(self) -> list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def _stop_idle(self) -> None:
        now = self._clock()
        for collection in [c for c, at in self._read_at.items() if now - at > self._idle_seconds]:
            self._informers.pop(collection).stop()
            del self._read_at[collection]

    def close(self) -> None:
        with self._lock:
            informers, self._informers = list(self._informers.values()), {}
            self._read_at.clear()
        for informer in informers:
            informer.stop()


class CachedKube(Kube):
    """``Kube`` with its listings read from ``cache``; every other read (a GET: proofs of absence, the
    fresh read after a conflict, the JWT key) and every write still go to the API server."""

    same_dicts = True

    def __init__(
        self,
        api: ApiClient,
        count_write: WriteCounter = lambda kind, verb: None,
        throttle: TokenBucket | None = None,
        *,
        cache: KubeCache,
    ) -> None:
        super().__init__(api, count_write, throttle)
        self.cache = cache

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[JSON]:
        return self.cache.items(
            Collection("pods", namespace, selector(labels)),
            lambda token: self.list_pods_page(namespace, labels, token, POD_PAGE),
            lambda stream, version, timeout: self.watch_pods(stream, namespace, labels, version, timeout),
            trim_pod,
        )

    def list_nodes(self) -> list[JSON]:
        return self.cache.items(
            Collection("nodes"),
            lambda token: self.list_nodes_page(token, NODE_PAGE),
            lambda stream, version, timeout: self.watch_nodes(stream, version, timeout),
            trim_node,
        )

    def change_marks(self, namespace: str, labels: dict[str, str], plural: str) -> ChangeMarks | None:
        pods, customs, nodes = self._watched(namespace, labels, plural)
        return self.cache.mark(pods), self.cache.mark(customs), self.cache.mark(nodes)

    def changes_since(
        self, namespace: str, labels: dict[str, str], plural: str, marks: ChangeMarks | None
    ) -> tuple[list[JSON], list[JSON], list[JSON]] | None:
        if marks is None:
            return None
        pods, customs, nodes = (
            self.cache.changes(collection, mark)
            for collection, mark in zip(self._watched(namespace, labels, plural), marks, strict=True)
        )
        return None if pods is None or customs is None or nodes is None else (pods, customs, nodes)

    @staticmethod
    def _watched(namespace: str, labels: dict[str, str], plural: str) -> tuple[Collection, Collection, Collection]:
        """The collections ``list_pods``, ``list_custom`` and ``list_nodes`` read."""
        return Collection("pods", namespace, selector(labels)), Collection(plural, namespace), Collection("nodes")

    def list_custom(self, plural: str, namespace: str | None) -> list[JSON]:
        return self.cache.items(
            Collection(plural, namespace),
            lambda token: self.list_custom_page(plural, namespace, token),
            lambda stream, version, timeout: self.watch_custom(stream, plural, namespace, version, timeout),
        )
