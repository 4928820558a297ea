"""What the elector sends to the real API server (issue 30), each request seen by the proxy in front of
it: a leader renews with one update per retry period and reads nothing; a standby beside it only
reads; once the leader is gone the standby takes over, and the old leader, back, reads once after its
refused update and leaves the Lease alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from slurm_sync.leader import Fence, LeaseElector, LeaseSettings
from tests.kube.apiproxy import ApiProxy, Seen
from tests.support.clock import FakeClock

pytestmark = pytest.mark.kube
LEASE = "slurm-sync-requests"


@pytest.fixture
def proxy(kube_api: client.ApiClient) -> Iterator[ApiProxy]:
    proxied = ApiProxy(kube_api.configuration)
    yield proxied
    proxied.close()


def lease_requests(seen: list[Seen], since: int = 0) -> list[str]:
    return [s.method for s in seen[since:] if s.path.endswith(f"/leases/{LEASE}") or s.path.endswith("/leases")]


def test_a_running_leader_renews_with_one_update_each_retry_period(proxy: ApiProxy, kube_namespace: str) -> None:
    settings = LeaseSettings(kube_namespace, LEASE, "a_1", 3, 2, 0.2)
    leader = LeaseElector(proxy.api_client(), settings, Fence(settings.renew_deadline))
    stop = threading.Event()
    thread = threading.Thread(target=leader.run, args=(stop,))
    thread.start()
    time.sleep(3)
    assert leader.leading
    stop.set()
    thread.join()
    sent = lease_requests(proxy.seen)
    assert sent[:2] == ["GET", "POST"], "nothing known at the start: read, then create"
    assert set(sent[2:]) == {"PUT"}, f"renewals (and the release) are updates only: {sent}"
    assert len(sent) - 2 >= 10, "a renewal every 0.2 s for 3 s"


def test_a_standby_only_reads_and_a_returning_leader_reads_once(
    proxy: ApiProxy, kube_api: client.ApiClient, kube_namespace: str
) -> None:
    clock = FakeClock(0.0)

    def candidate(identity: str, api: client.ApiClient) -> LeaseElector:
        settings = LeaseSettings(kube_namespace, LEASE, identity)
        return LeaseElector(api, settings, Fence(settings.renew_deadline, clock), clock)

    a, b = candidate("a_1", proxy.api_client()), candidate("b_1", kube_api)  # b is not counted
    observer = candidate("c_1", proxy.api_client())
    assert a.attempt()
    start = len(proxy.seen)
    for _ in range(5):
        clock.now += 2
        assert a.attempt() and not b.attempt()
    assert lease_requests(proxy.seen, start) == ["PUT"] * 5
    start = len(proxy.seen)
    assert not observer.attempt() and observer.holder == "a_1"
    clock.now += 2
    assert not observer.attempt()
    assert lease_requests(proxy.seen, start) == ["GET", "GET"], "another's live lease is read, never written"
    for _ in range(8):  # a is cut off; b sees its last record stand for the lease duration
        clock.now += 2
        b.attempt()
    assert b.leading and not a.leading
    start = len(proxy.seen)
    assert not a.attempt() and a.holder == "b_1"
    assert lease_requests(proxy.seen, start) == ["PUT", "GET"], "the refused renewal, then one read"
