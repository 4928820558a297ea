"""The informer's protocol with scripted listings and watch streams: list, then watch from that
resourceVersion; resume after a normal end (from the last event or bookmark); re-list on 410 Gone and on
a broken stream; never answer from a picture it cannot vouch for (NotSynced). Against the real API server:
tests/slurm_sync/test_service_watches.py."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from slurm_sync.cache import KubeCache, matters
from slurm_sync.informer import CHANGES_KEPT, Collection, Informer, NotSynced
from slurm_sync.kube import DictWatch, Page
from tests.fixtures.slurm import wait_for

JSON = dict[str, Any]
Script = Callable[[], Iterator[JSON]]


def pod(name: str, version: int, **annotations: str) -> JSON:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version), "annotations": annotations}}


def event(kind: str, obj: JSON) -> JSON:
    return {"type": kind, "object": obj}


@dataclass
class Server:
    """A collection as a server holds it, and the watch streams to serve, one script per watch request."""

    objects: dict[str, JSON] = field(default_factory=dict)
    version: int = 10
    page_size: int = 0  # 0: one page
    lists: list[str] = field(default_factory=list)  # continue tokens asked for
    watches: list[str] = field(default_factory=list)  # resourceVersions watched from
    scripts: queue.Queue[Script] = field(default_factory=queue.Queue)
    list_gate: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.list_gate.set()

    def lister(self, token: str) -> Page:
        self.lists.append(token)
        self.list_gate.wait(30)
        items = sorted(self.objects.values(), key=lambda o: o["metadata"]["name"])
        if not self.page_size:
            return Page(items, str(self.version), "")
        start = int(token or 0)
        end = start + self.page_size
        return Page(items[start:end], str(self.version), str(end) if end < len(items) else "")

    def watcher(self, stream: DictWatch, version: str, timeout: int) -> Iterator[JSON]:
        self.watches.append(version)
        while not self.closed.is_set() and not stream._stop:  # Watch.stop() cuts a real stream
            try:
                script = self.scripts.get(timeout=0.05)
            except queue.Empty:
                continue
            yield from script()
            return

    def change(self, obj: JSON) -> JSON:
        """The object stored at a new resourceVersion (as the server would)."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = obj
        return obj


@dataclass
class Rig:
    server: Server
    informer: Informer
    wakes: list[int]


@pytest.fixture
def rig() -> Iterator[Rig]:
    server = Server()
    server.objects = {n: pod(n, 5) for n in ("a", "b")}
    wakes: list[int] = []
    wake = lambda: wakes.append(1)  # noqa: E731
    informer = Informer(Collection("pods", "ns", "app=x"), server.lister, server.watcher, wake, changed=matters)
    yield Rig(server, informer, wakes)
    server.closed.set()
    informer.stop()


def names(informer: Informer) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["metadata"]["annotations"] for o in informer.items()}


def synced_with(rig: Rig, expected: dict[str, dict[str, str]]) -> None:
    def current() -> object:
        try:
            return names(rig.informer)
        except NotSynced as exc:
            return exc

    wait_for(current, lambda value: value == expected, what=f"the cache to hold {expected}")


def test_nothing_is_answered_before_the_first_listing_completes(rig: Rig) -> None:
    rig.server.list_gate.clear()
    rig.informer.start()
    wait_for(lambda: rig.server.lists, bool, what="the first listing")
    with pytest.raises(NotSynced, match=r"pods in ns \(app=x\) not synced: not listed yet"):
        rig.informer.items()
    rig.server.list_gate.set()
    assert rig.informer.wait_synced(10)
    assert names(rig.informer) == {"a": {}, "b": {}}
    wait_for(lambda: rig.server.watches, lambda w: w == ["10"], what="the watch from the listing")


def test_events_are_applied_and_only_real_changes_wake_the_loop(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    woken = len(rig.wakes)
    same_but_newer = pod("a", 11)
    rig.server.scripts.put(lambda: iter([event("MODIFIED", same_but_newer)]))
    wait_for(lambda: rig.informer.items(), lambda items: same_but_newer in items, what="the resourceVersion bump")
    assert len(rig.wakes) == woken, "a change of nothing but the resourceVersion wakes no pass"
    cordoned = pod("a", 12, cordon="true")
    rig.server.scripts.put(lambda: iter([event("MODIFIED", cordoned), event("DELETED", pod("b", 13))]))
    synced_with(rig, {"a": {"cordon": "true"}})
    assert len(rig.wakes) == woken + 2


def test_a_normal_end_resumes_from_the_last_event_or_bookmark_without_a_listing(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    rig.server.scripts.put(lambda: iter([event("ADDED", pod("c", 14))]))  # then the server ends the watch
    rig.server.scripts.put(lambda: iter([event("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]))
    wait_for(lambda: rig.server.watches, lambda w: w == ["10", "14", "20"], what="watches resumed from 14, then 20")
    assert rig.server.lists == [""], "no re-list"
    assert rig.informer.synced and "c" in names(rig.informer)


def test_410_gone_relists_at_once_and_recovers_the_change_the_stream_missed(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    rig.server.list_gate.clear()  # hold the re-list, to look at the cache meanwhile
    rig.server.change(pod("a", 0, cordon="true"))  # a change the stream never delivers
    rig.server.scripts.put(lambda: _raise(ApiException(status=410, reason="Expired: too old resource version")))
    wait_for(lambda: rig.server.lists, lambda lists: len(lists) == 2, what="the re-list")
    with pytest.raises(NotSynced, match="410 Gone"):
        rig.informer.items()
    rig.server.list_gate.set()
    synced_with(rig, {"a": {"cordon": "true"}, "b": {}})
    wait_for(lambda: rig.server.watches, lambda w: w == ["10", "11"], what="the watch from the new listing")
    assert rig.informer.relists == 1


def test_a_broken_stream_relists_after_a_backoff_and_never_answers_meanwhile(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    rig.server.list_gate.clear()
    rig.server.change(pod("b", 0, cordon="true"))
    rig.server.scripts.put(lambda: _raise(ConnectionResetError("reset by peer")))
    wait_for(lambda: rig.informer.synced, lambda synced: not synced, what="the cache to drop its picture")
    with pytest.raises(NotSynced, match=r"watch broken .*reset by peer"):
        rig.informer.items()
    wait_for(lambda: rig.server.lists, lambda lists: len(lists) == 2, what="the re-list after the backoff")
    rig.server.list_gate.set()
    synced_with(rig, {"a": {}, "b": {"cordon": "true"}})


def test_an_event_no_server_sends_is_a_broken_stream(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    rig.server.scripts.put(lambda: iter([{"type": "SURPRISE", "object": pod("a", 30)}]))
    wait_for(lambda: rig.server.lists, lambda lists: len(lists) == 2, what="the re-list")
    synced_with(rig, {"a": {}, "b": {}})


def test_a_listing_of_several_pages_is_swapped_in_whole(rig: Rig) -> None:
    rig.server.objects = {n: pod(n, 5) for n in "abcde"}
    rig.server.page_size = 2
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    assert rig.server.lists == ["", "2", "4"]
    assert sorted(names(rig.informer)) == list("abcde")
    rig.server.list_gate.clear()
    del rig.server.objects["e"]
    rig.server.scripts.put(lambda: _raise(ApiException(status=410, reason="Expired")))
    wait_for(lambda: rig.server.lists, lambda lists: len(lists) == 4, what="the re-list's first page")
    with pytest.raises(NotSynced):  # never the first page alone
        rig.informer.items()
    rig.server.list_gate.set()
    synced_with(rig, {n: {} for n in "abcd"})


def _raise(exc: BaseException) -> Iterator[JSON]:
    """A watch stream that fails as soon as it is read."""
    yield from ()
    raise exc


def test_a_thread_that_ends_leaves_the_collection_unknown() -> None:
    server = Server()
    server.objects = {"a": pod("a", 5)}

    def broken_wake() -> None:
        raise RuntimeError("a bug")

    informer = Informer(Collection("pods", "ns"), server.lister, server.watcher, broken_wake)
    informer.start()
    wait_for(lambda: informer.running, lambda running: not running, what="the thread to end")
    with pytest.raises(NotSynced, match="its thread ended"):
        informer.items()
    server.closed.set()


def test_the_cache_starts_a_new_informer_for_one_whose_thread_ended() -> None:
    server = Server()
    server.objects = {"a": pod("a", 5)}
    cache = KubeCache(lambda: None)
    collection = Collection("pods", "ns")
    assert [o["metadata"]["name"] for o in cache.items(collection, server.lister, server.watcher)] == ["a"]
    (first,) = cache.informers()
    first.stop()
    assert not first.running
    server.objects["b"] = pod("b", 6)
    assert len(cache.items(collection, server.lister, server.watcher)) == 2
    (second,) = cache.informers()
    assert second is not first and second.running
    server.closed.set()
    cache.close()


def names_of(objects: list[dict] | None) -> list[str] | None:
    return None if objects is None else [o["metadata"]["name"] for o in objects]


def test_the_objects_changed_since_a_mark_as_they_are_now_deleted_ones_left_out(rig: Rig) -> None:
    """``Informer.mark`` and ``changes``: what changed since a reader last looked, from the events applied
    (slurm_sync/operator/loop.py ``_drain_at_once``)."""
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    mark = rig.informer.mark()
    assert rig.informer.changes(mark) == []
    rig.server.scripts.put(lambda: iter([event("MODIFIED", pod("a", 11, cordon="true")),
                                         event("ADDED", pod("c", 12)), event("MODIFIED", pod("a", 13, cordon="x")),
                                         event("DELETED", pod("b", 14))]))  # fmt: skip
    wait_for(rig.informer.mark, lambda now: now[1] == mark[1] + 4, what="four events applied")
    changed = rig.informer.changes(mark)
    assert names_of(changed) == ["a", "c"], "each once, the deleted one left out"
    assert changed is not None and changed[0]["metadata"]["annotations"] == {"cordon": "x"}
    assert rig.informer.changes(rig.informer.mark()) == []


def test_what_changed_across_a_relisting_or_another_informers_mark_is_unknown(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    mark = rig.informer.mark()
    rig.server.scripts.put(lambda: _raise(ApiException(status=410, reason="Expired")))
    wait_for(lambda: rig.server.lists, lambda lists: len(lists) == 2, what="the re-list")
    wait_for(lambda: rig.informer.synced and rig.informer.mark()[1] > mark[1], bool, what="synced again")
    assert rig.informer.changes(mark) is None, "what changed before a re-list is not known"
    assert rig.informer.changes(rig.informer.mark()) == []
    other = Informer(Collection("pods", "ns", "app=x"), rig.server.lister, rig.server.watcher, lambda: None)
    assert rig.informer.changes((other.mark()[0], rig.informer.mark()[1])) is None


def test_more_changes_than_are_kept_are_unknown(rig: Rig) -> None:
    rig.informer.start()
    assert rig.informer.wait_synced(10)
    kept = CHANGES_KEPT
    mark = rig.informer.mark()
    rig.server.scripts.put(lambda: iter([event("MODIFIED", pod("a", 20 + i)) for i in range(kept + 1)]))
    wait_for(rig.informer.mark, lambda now: now[1] == mark[1] + kept + 1, what="the events applied")
    assert rig.informer.changes(mark) is None
    assert names_of(rig.informer.changes((mark[0], mark[1] + 1))) == ["a"], "the last ones are still known"
