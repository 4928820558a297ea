"""The slurm_sync bench's fake API server answers as a real one where the kubernetes client reads it
(issue 22): a watch too old ends in the watch cache's 410 (reason Expired, with a message), a quiet watch
is bookmarked, a missing object is the API server's NotFound. Before, a 410 without ``reason`` raised
``KeyError`` in the client, broke the watch and failed the suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from bench.slurm_sync import kube_client
from bench.slurm_sync_fakes import NS, ServerProcess, bookmark_times
from slurm_sync.kube import DictWatch, Kube, is_not_found

SIZE = 40  # Slurm nodes of the fake cluster: the smallest that has every NodeSet


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerProcess, Kube]]:
    server = ServerProcess(SIZE)
    try:
        yield server, Kube(kube_client(server.url, "test"))
    finally:
        server.close()


def test_a_watch_from_before_the_event_window_ends_in_the_api_servers_410(served: tuple[ServerProcess, Kube]) -> None:
    server, kube = served
    server.request("PATCH", f"/api/v1/namespaces/{NS}/pods/gpu-0", {"metadata": {"annotations": {"bench": "x"}}})
    with pytest.raises(ApiException) as raised:
        list(kube.watch_nodes(DictWatch(), "5", 5))
    assert raised.value.status == 410
    assert str(raised.value.reason).startswith("Expired: too old resource version: 5 (")


def test_a_quiet_watch_is_bookmarked_before_it_ends(served: tuple[ServerProcess, Kube]) -> None:
    _, kube = served
    listed = kube.list_nodes_page("")
    events = list(kube.watch_nodes(DictWatch(), listed.resource_version, 3))
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["object"]["kind"] == "Node"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(listed.resource_version)


def test_a_missing_object_is_the_api_servers_not_found(served: tuple[ServerProcess, Kube]) -> None:
    _, kube = served
    with pytest.raises(ApiException) as raised:
        kube.read_pod(NS, "no-such-pod")
    assert is_not_found(raised.value)


def test_bookmarks_come_every_minute_and_just_before_the_deadline() -> None:
    assert bookmark_times(0.0, 150.0) == [60.0, 120.0, 148.0]
    assert bookmark_times(0.0, 3.0) == [1.0]
    assert bookmark_times(0.0, 1.0) == []
