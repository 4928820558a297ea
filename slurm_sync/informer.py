"""An informer-style cache of one Kubernetes collection: list it once, then follow its watch
(docs/architecture.md §4.8).

Why: a pass that re-lists every worker pod and Node costs CPU, memory and API server bandwidth in
proportion to the cluster, and a change on the Kubernetes side waits for the next poll. A watch
delivers each change once, as it happens, and wakes the loop.

Fail closed: the cache answers only while it can vouch for its contents. Before the first listing
completes, and from a ``410 Gone`` or a broken stream until the re-list completes, a read raises
``NotSynced`` (unknown, never empty: the caller writes nothing). A listing is swapped in whole, so
a read never sees part of one. A watch the server ends normally (its ``timeoutSeconds``) is resumed
from the last resourceVersion seen (events or bookmarks) without a re-list; a 410 there (too old)
re-lists at once, a broken stream or a failed list re-lists after a backoff.

Each string the objects repeat is kept once (``SharedStrings``): decoded JSON makes a new string for
every label value, condition type, status, reason and message of every object, and sharing them
makes the cache of a 20,000-node cluster's pods and Nodes some 40 % smaller (docs/architecture.md §7).
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from slurm_sync.kube import ChangeMark, DictWatch, Page, describe_error

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
_GENERATIONS = itertools.count(1)
Lister = Callable[[str], Page]  # continue token ("" for the first page) -> one page
Watcher = Callable[[DictWatch, str, int], Iterator[JSON]]  # (watch, resourceVersion, timeout) -> events
GONE = 410
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
HEALTHY_SECONDS = 10.0  # a watch that lived this long resets the backoff
PRUNE_SLACK = 1_000  # table entries beyond twice the store's strings before SharedStrings is rebuilt
CHANGES_KEPT = 2048  # the last events' keys, for a reader that asks what changed since it last read (``changes``)
WATCH_SECONDS = (240, 480)  # the server ends each watch after a random time in this range (client-go: 5-10 min)


@dataclass(frozen=True)
class Collection:
    """What one informer holds: a resource (pods, nodes or one of our plurals), a namespace (None: all),
    a label selector ("" for none)."""

    resource: str
    namespace: str | None = None
    selector: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource}{where}" + (f" ({self.selector})" if self.selector else "")


class NotSynced(Exception):
    """The cache cannot vouch for a collection (not listed yet, or resyncing): its contents are unknown."""


class BrokenStream(Exception):
    """A watch stream that delivered something no server sends (an unknown event type)."""


def object_key(obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class SharedStrings:
    """One copy of each string value of a collection's objects. The table holds only strings the store
    holds too, give or take the events since it was last pruned: once it has doubled since, it is
    rebuilt from the store (a resourceVersion is new with every event)."""

    def __init__(self) -> None:
        self._table: dict[str, str] = {}
        self._pruned = 0  # entries after the last rebuild

    def share(self, obj: Any) -> Any:
        """``obj`` with each string value replaced by the table's equal one (in place: it is freshly decoded)."""
        table = self._table
        if isinstance(obj, dict):
            for key, value in obj.items():
                if isinstance(value, str):
                    obj[key] = table.setdefault(value, value)
                elif isinstance(value, (dict, list)):
                    self.share(value)
        elif isinstance(obj, list):
            for index, value in enumerate(obj):
                if isinstance(value, str):
                    obj[index] = table.setdefault(value, value)
                elif isinstance(value, (dict, list)):
                    self.share(value)
        return obj

    def prune(self, store: Iterable[JSON]) -> None:
        """Rebuild the table from what ``store`` holds, once it has grown to twice that (and 1,000 more)."""
        if len(self._table) <= 2 * self._pruned + PRUNE_SLACK:
            return
        self._table = {}
        for obj in store:
            self._collect(obj)
        self._pruned = len(self._table)

    def _collect(self, value: Any) -> None:
        if isinstance(value, str):
            self._table[value] = value
        elif isinstance(value, dict):
            for item in value.values():
                self._collect(item)
        elif isinstance(value, list):
            for item in value:
                self._collect(item)

    def listed(self) -> None:
        """A whole listing went through ``share``: the table holds exactly its strings."""
        self._pruned = len(self._table)


class Informer:
    """One collection, kept by a thread of its own: ``items()`` is a consistent picture or ``NotSynced``.

    ``transform`` trims each object as it arrives (what nobody reads need not be kept); ``changed(old,
    new)`` says whether a change matters to the loop (then ``wake()`` is called): either may be None for
    an object that did not or no longer exists.
    """

    def __init__(
        self,
        collection: Collection,
        lister: Lister,
        watcher: Watcher,
        wake: Callable[[], None],
        transform: Callable[[JSON], JSON] = lambda obj: obj,
        changed: Callable[[JSON | None, JSON | None], bool] = lambda old, new: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collection = collection
        self._lister = lister
        self._watcher = watcher
        self._wake = wake
        self._transform = transform
        self._changed = changed
        self._clock = clock
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._tried = threading.Event()  # the first listing has ended, done or failed (never cleared)
        self._stopping = threading.Event()
        self._store: dict[Key, JSON] = {}
        self._items: list[JSON] | None = None  # the store's objects, listed for readers until it changes
        self._strings = SharedStrings()
        self._resource_version = ""
        self._generation = next(_GENERATIONS)  # tells this informer's marks from any other's
        self._serial = 0  # changes applied: each listing and each event
        self._listed_serial = 0  # the last listing's: what changed before it is unknown
        self._recent: deque[tuple[int, Key]] = deque(maxlen=CHANGES_KEPT)  # (serial, key) of the last events
        self._why = "not listed yet"
        self._failures = 0
        self._stream = DictWatch()
        self._thread = threading.Thread(target=self._run, name=f"informer {collection}", daemon=True)
        self.relists = 0  # listings after the first (410 Gone, broken streams): for metrics and tests

    # --- reading ----------------------------------------------------------------------------

    def items(self) -> list[JSON]:
        """Every object of the collection as of the last event applied; NotSynced while that is unknown. The
        very same list while nothing changed (a reader may tell an unchanged collection at no cost:
        slurm_sync/cache.py ``ViewMemo``): read it, never change it."""
        with self._lock:
            if not self._synced.is_set():
                raise NotSynced(f"Kubernetes cache of {self.collection} not synced: {self._why}")
            if self._items is None:
                self._items = list(self._store.values())
            return self._items

    def mark(self) -> ChangeMark:
        """Where the collection is now: ``changes(mark)`` later says what changed after it."""
        with self._lock:
            return self._generation, self._serial

    def changes(self, mark: ChangeMark) -> list[JSON] | None:
        """The objects changed by the events applied after ``mark`` (as they are now; deleted ones left out), or
        None when that is unknown: another informer's mark, not synced, listed again since, or more changes
        than are kept (``CHANGES_KEPT``)."""
        generation, since = mark
        with self._lock:
            if generation != self._generation or not self._synced.is_set() or since < self._listed_serial:
                return None
            if self._serial == since:
                return []
            if not self._recent or self._recent[0][0] > since + 1:
                return None
            keys = dict.fromkeys(key for serial, key in self._recent if serial > since)
            return [obj for key in keys if (obj := self._store.get(key)) is not None]

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def first_listing(self) -> bool:
        """The first listing has not ended yet (done or failed): a reader now waits for it."""
        return not self._tried.is_set()

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the thread: a watch in progress is cut; a listing in progress finishes first."""
        self._stopping.set()
        self._stream.stop()
        self._thread.join(timeout)

    # --- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            delay = 0.0
            while not self._stopping.is_set():
                if delay and self._stopping.wait(delay):
                    return
                try:
                    self._list()
                except Exception as exc:  # an ApiException, the API server unreachable ...: try again later
                    delay = self._failed(f"list failed: {describe_error(exc)}")
                    continue
                finally:
                    self._tried.set()
                delay = self._follow()
        except Exception:  # a bug: logged; the cache starts a new informer at the next read
            log.exception("cache of %s: the informer failed", self.collection)
        finally:  # stopped, or a bug ended the thread: what it holds is no longer followed
            with self._lock:
                self._synced.clear()
                self._why = "not watched (stopped)" if self._stopping.is_set() else "its thread ended"

    def _list(self) -> None:
        """Every page into a new store, swapped in whole (readers never see part of a listing)."""
        store: dict[Key, JSON] = {}
        strings = SharedStrings()
        token, version = "", ""
        while True:
            page = self._lister(token)
            for obj in page.items:
                store[object_key(obj)] = strings.share(self._transform(obj))
            version = page.resource_version
            token = page.next_token
            if not token:
                break
        with self._lock:
            old, self._store, self._resource_version = self._store, store, version
            self._items = None
            self._serial += 1
            self._listed_serial = self._serial
            self._recent.clear()
            strings.listed()
            self._strings = strings
            resynced = self.relists > 0
            self._synced.set()
        log.log(
            logging.INFO if resynced else logging.DEBUG,
            "cache of %s listed: %d objects at resourceVersion %s",
            self.collection,
            len(store),
            version,
        )
        if resynced or any(self._changed(old.get(k), store.get(k)) for k in old.keys() | store.keys()):
            self._wake()  # after a resync, a pass at once: the last ones could not read this collection

    def _follow(self) -> float:
        """Watch until a 410 or a broken stream; the delay before the re-list. A watch the server
        ends normally is resumed from the last resourceVersion."""
        while not self._stopping.is_set():
            started = self._clock()
            try:
                for event in self._watcher(self._stream, self._resource_version, random.randint(*WATCH_SECONDS)):
                    self._apply(event)
                    if self._stopping.is_set():
                        return 0.0
            except ApiException as exc:
                if exc.status == GONE:
                    return self._trouble(started, "410 Gone: resourceVersion too old, re-listing", at_once=True)
                return self._trouble(started, f"watch broken ({describe_error(exc)}), re-listing")
            except Exception as exc:  # a reset connection, a read timeout, an unreadable event
                return self._trouble(started, f"watch broken ({describe_error(exc)}), re-listing")
            if self._clock() - started >= HEALTHY_SECONDS:
                self._failures = 0
        return 0.0

    def _apply(self, event: JSON) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            raise BrokenStream(f"a {kind} event without an object")
        version = resource_version(obj)
        if kind == "BOOKMARK":
            with self._lock:
                self._resource_version = version or self._resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise BrokenStream(f"an event of unknown type {kind!r}")
        key = object_key(obj)
        new = None if kind == "DELETED" else self._strings.share(self._transform(obj))
        with self._lock:
            old = self._store.pop(key, None) if new is None else self._store.get(key)
            if new is not None:
                self._store[key] = new
            self._items = None
            self._resource_version = version or self._resource_version
            self._serial += 1
            self._recent.append((self._serial, key))
        self._strings.prune(self._store.values())  # only this thread changes the store
        if self._changed(old, new):
            self._wake()

    def _trouble(self, started: float, why: str, at_once: bool = False) -> float:
        """Unsynced until the re-list; its delay: none for a first 410 after a healthy watch (the usual
        case: events went out of the server's window), else the backoff."""
        if self._stopping.is_set():
            return 0.0
        if self._clock() - started >= HEALTHY_SECONDS:
            self._failures = 0
        self.relists += 1
        self._unsync(why)
        if at_once and not self._failures:
            self._failures = 1
            return 0.0
        return self._backoff()

    def _failed(self, why: str) -> float:
        self._unsync(why)
        return self._backoff()

    def _backoff(self) -> float:
        delay = min(BACKOFF_FIRST * 2**self._failures, BACKOFF_MAX)
        self._failures += 1
        return delay

    def _unsync(self, why: str) -> None:
        with self._lock:
            self._synced.clear()
            self._why = why
        log.warning("cache of %s: %s", self.collection, why)
        self._wake()  # a pass now reports the cache unready instead of waiting for the next poll
