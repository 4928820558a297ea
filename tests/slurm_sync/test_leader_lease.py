"""The elector against the real API server's Lease (coordination.k8s.io/v1): what it writes, the
takeover rule under a fake clock (the old leader's fence has closed before anyone may take over),
optimistic concurrency between two candidates, release, and `--once` beside a live leader."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from slurm_sync.leader import Fence, LeaseElector, LeaseSettings, read_record
from tests.kube.plugin import KubeLab
from tests.support.clock import FakeClock

pytestmark = pytest.mark.kube
LEASE = "slurm-sync-test"


def elector(api: client.ApiClient, namespace: str, identity: str, clock: FakeClock | None = None) -> LeaseElector:
    settings = LeaseSettings(namespace, LEASE, identity)
    if clock is None:
        return LeaseElector(api, settings, Fence(settings.renew_deadline))
    return LeaseElector(api, settings, Fence(settings.renew_deadline, clock), clock)


def stored(api: client.ApiClient, namespace: str, name: str = LEASE) -> dict:
    """The Lease as the API server stores it (JSON, times as written)."""
    response = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace, _preload_content=False)
    return json.loads(response.data)


def test_the_lease_says_who_leads_and_counts_transitions(kube_api: client.ApiClient, kube_namespace: str) -> None:
    clock = FakeClock()
    a, b = elector(kube_api, kube_namespace, "a_1", clock), elector(kube_api, kube_namespace, "b_1", clock)
    assert a.attempt() and a.leading
    lease = stored(kube_api, kube_namespace)
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseDurationSeconds"]) == ("a_1", 15)
    assert lease["spec"]["leaseTransitions"] == 0 and lease["spec"]["renewTime"].endswith("Z")
    acquired = lease["spec"]["acquireTime"]
    clock.now += 2
    assert a.attempt()
    renewed = stored(kube_api, kube_namespace)["spec"]
    assert renewed["acquireTime"] == acquired and renewed["renewTime"] != lease["spec"]["renewTime"]
    assert not b.attempt() and b.holder == "a_1"
    clock.now += 15
    assert b.attempt() and b.leading
    taken = stored(kube_api, kube_namespace)["spec"]
    assert (taken["holderIdentity"], taken["leaseTransitions"]) == ("b_1", 1)


def test_a_partitioned_leader_stops_writing_before_anyone_can_take_over(
    kube_api: client.ApiClient, kube_namespace: str
) -> None:
    """A renews every 2 s until it is cut off at t=6; B tries every second. At no instant may both
    write, and A's fence closes at least lease duration - renew deadline before B's opens."""
    clock = FakeClock(0.0)
    a, b = elector(kube_api, kube_namespace, "a_1", clock), elector(kube_api, kube_namespace, "b_1", clock)
    a_closed = b_opened = None
    for step in range(40):
        clock.now = float(step)
        if step <= 6 and step % 2 == 0:
            a.attempt()
        b.attempt()
        assert not (a.leading and b.leading), f"two leaders at t={step}"
        if a_closed is None and step > 0 and not a.leading:
            a_closed = clock.now
        if b_opened is None and b.leading:
            b_opened = clock.now
    assert a_closed == 6 + 10, "A stops writing at its renew deadline after its last renew"
    assert b_opened is not None and b_opened >= 6 + 15, "B waits the lease duration after the last renew it saw"
    assert b_opened - a_closed >= 15 - 10
    assert not a.attempt() and not a.leading, "back from the partition, A finds B's record and stays out"


def race(candidates: list[LeaseElector]) -> list[bool]:
    """Each candidate's first attempt, all started at the same moment."""
    start = threading.Barrier(len(candidates))
    won = [False] * len(candidates)

    def campaign(i: int) -> None:
        start.wait()
        won[i] = candidates[i].attempt()

    threads = [threading.Thread(target=campaign, args=(i,)) for i in range(len(candidates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_two_candidates_at_once_make_exactly_one_leader(kube_lab: KubeLab, kube_namespace: str) -> None:
    for round_ in range(5):
        apis = [kube_lab.api_client() for _ in range(2)]
        settings = [LeaseSettings(kube_namespace, f"race-{round_}", f"c{i}_1") for i in range(2)]
        won = race([LeaseElector(api, s, Fence(s.renew_deadline)) for api, s in zip(apis, settings, strict=True)])
        assert sorted(won) == [False, True], f"round {round_}: {won}"
        holder = read_record(stored(apis[0], kube_namespace, f"race-{round_}")).holder
        assert holder == settings[won.index(True)].identity
        for api in apis:
            api.close()


def test_a_released_lease_is_taken_at_the_next_try(kube_api: client.ApiClient, kube_namespace: str) -> None:
    clock = FakeClock()
    a, b = elector(kube_api, kube_namespace, "a_1", clock), elector(kube_api, kube_namespace, "b_1", clock)
    assert a.attempt() and not b.attempt()
    a.fence.close()  # shutdown: the writers stop first
    assert a.release()
    spec = stored(kube_api, kube_namespace)["spec"]
    assert "holderIdentity" not in spec and spec["leaseDurationSeconds"] == 1
    assert b.attempt() and b.leading, "no lease duration to wait out"
    assert not a.release(), "only a record that is still ours is released"
    assert stored(kube_api, kube_namespace)["spec"]["holderIdentity"] == "b_1"


@pytest.fixture
def live_leader(kube_api: client.ApiClient, kube_namespace: str) -> Iterator[LeaseElector]:
    leader = LeaseElector(kube_api, LeaseSettings(kube_namespace, LEASE, "live_1", 3, 2, 0.5), Fence(2))
    stop = threading.Event()
    thread = threading.Thread(target=leader.run, args=(stop,))
    thread.start()
    yield leader
    stop.set()
    thread.join()


def test_once_beside_a_live_leader_writes_nothing_and_says_who_leads(
    kube_lab: KubeLab, kube_namespace: str, live_leader: LeaseElector
) -> None:
    timings = ["--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5"]
    result = subprocess.run(
        [
            *(sys.executable, "-m", "slurm_sync", "--once", "--kubeconfig", str(kube_lab.kubeconfig)),
            *("--namespace", kube_namespace, "--lease-namespace", kube_namespace, "--lease-name", LEASE, *timings),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result
    assert f"lease {kube_namespace}/{LEASE} is held by live_1" in result.stderr + result.stdout
    assert live_leader.leading
