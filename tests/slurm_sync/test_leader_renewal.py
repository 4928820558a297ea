"""What the elector sends (docs/architecture.md §8, issue 30): a renewal is one update carrying the
resourceVersion last seen, a read comes only when no record is known, when the one known is another's
and has not expired, or after the API server refused the update (409 Conflict, or NotFound: deleted);
after such a read the elector decides as before: renews its own record, respects another holder's.
Against an in-memory Lease with the API server's optimistic concurrency; the real server's count is in
tests/slurm_sync/test_leader_lease.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from slurm_sync.leader import Fence, LeaseElector, LeaseSettings
from tests.slurm_sync.kubefixtures import api_client
from tests.support.clock import FakeClock

JSON = dict[str, Any]


@dataclass
class Answer:
    data: bytes


def refusal(status: int, reason: str) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = orjson.dumps({"kind": "Status", "status": "Failure", "reason": reason, "code": status})
    return exc


@dataclass
class LeaseStore:
    """One Lease as the API server keeps it: a new resourceVersion on every write, an update from any
    other one refused with 409, NotFound once deleted. ``sent`` lists each request's verb."""

    lease: JSON | None = None
    version: int = 0
    sent: list[str] = field(default_factory=list)

    def store(self, body: JSON) -> Answer:
        self.version += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        return Answer(orjson.dumps(self.lease))

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Answer:
        self.sent.append("get")
        if self.lease is None:
            raise refusal(404, "NotFound")
        return Answer(orjson.dumps(self.lease))

    def create_namespaced_lease(self, namespace: str, body: JSON, **_: Any) -> Answer:
        self.sent.append("create")
        if self.lease is not None:
            raise refusal(409, "AlreadyExists")
        return self.store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: JSON, **_: Any) -> Answer:
        self.sent.append("update")
        if self.lease is None:
            raise refusal(404, "NotFound")
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise refusal(409, "Conflict")
        return self.store(body)

    def holder(self) -> str:
        return str((self.lease or {}).get("spec", {}).get("holderIdentity") or "")

    def requests(self) -> list[str]:
        """The verbs sent since the last call."""
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0.0)


@pytest.fixture
def store() -> LeaseStore:
    return LeaseStore()


def elector(store: LeaseStore, clock: FakeClock, identity: str) -> LeaseElector:
    settings = LeaseSettings("ns", "l", identity)
    candidate = LeaseElector(api_client("http://127.0.0.1:9"), settings, Fence(settings.renew_deadline, clock), clock)
    candidate.coordination = store  # type: ignore[assignment]  # the same three calls
    return candidate


def test_each_renewal_is_one_update_from_the_version_last_written(store: LeaseStore, clock: FakeClock) -> None:
    a = elector(store, clock, "a_1")
    assert a.attempt() and store.requests() == ["get", "create"], "nothing known yet: read, then create"
    for _ in range(30):  # a minute at the default retry period
        clock.now += 2
        assert a.attempt() and a.leading
    assert store.requests() == ["update"] * 30
    assert store.version == 31 and store.holder() == "a_1"
    a.fence.close()
    assert a.release() and store.requests() == ["update"], "the release too"


def test_a_standby_reads_until_the_holder_expires_then_takes_over_in_one_update(
    store: LeaseStore, clock: FakeClock
) -> None:
    a, b = elector(store, clock, "a_1"), elector(store, clock, "b_1")
    assert a.attempt()
    store.requests()
    for _ in range(7):  # a stops renewing at t=0; b sees its record stand for 14 s
        assert not b.attempt() and b.holder == "a_1"
        clock.now += 2
    assert store.requests() == ["get"] * 7, "another's live record is only read"
    assert not a.leading, "a's fence closed at its renew deadline"
    assert not b.attempt() and store.requests() == ["get"]  # t=14: not yet the lease duration
    clock.now += 2
    assert b.attempt() and b.leading and store.holder() == "b_1"
    assert store.requests() == ["update"], "expired as last read: taken by an update from that version"


def test_a_conflict_reads_once_and_leaves_the_lease_to_its_new_holder(store: LeaseStore, clock: FakeClock) -> None:
    a, b = elector(store, clock, "a_1"), elector(store, clock, "b_1")
    assert a.attempt() and not b.attempt()
    clock.now += 16  # a cut off since its renew at t=0; b saw that record at t=0
    assert b.attempt() and store.holder() == "b_1"
    store.requests()
    assert not a.attempt() and not a.leading
    assert store.requests() == ["update", "get"], "the refused update, then one read: b's record, not written"
    assert a.holder == "b_1" and a.error == ""
    clock.now += 2
    assert not a.attempt() and store.requests() == ["get"], "b's live record is only read from now on"
    assert store.holder() == "b_1"


def test_a_conflict_on_our_own_record_renews_after_one_read(store: LeaseStore, clock: FakeClock) -> None:
    """Our update committed but its answer was lost (a timeout): the version we know is stale, the
    record is still ours, and one read gives the version to renew from."""
    a = elector(store, clock, "a_1")
    assert a.attempt()
    assert store.lease is not None
    store.store(store.lease)  # written again with our record: a version we never saw
    store.requests()
    clock.now += 2
    assert a.attempt() and a.leading
    assert store.requests() == ["update", "get", "update"]
    clock.now += 2
    assert a.attempt() and store.requests() == ["update"]


def test_a_deleted_lease_is_read_then_created_again(store: LeaseStore, clock: FakeClock) -> None:
    a = elector(store, clock, "a_1")
    assert a.attempt()
    store.lease = None
    store.requests()
    clock.now += 2
    assert a.attempt() and store.requests() == ["update", "get", "create"]
    assert store.holder() == "a_1"


def test_a_second_conflict_in_one_attempt_ends_it_without_writing(store: LeaseStore, clock: FakeClock) -> None:
    """A renewal refused twice (another writer between our read and our update) is a lost try, not a
    loop: the next attempt starts from what it read."""
    a = elector(store, clock, "a_1")
    assert a.attempt()
    store.store(store.lease or {})
    racing = store.replace_namespaced_lease

    def another_write_first(name: str, namespace: str, body: JSON, **kwargs: Any) -> Answer:
        if store.sent[-1:] == ["get"]:
            store.store(store.lease or {})
        return racing(name, namespace, body, **kwargs)

    store.replace_namespaced_lease = another_write_first  # type: ignore[method-assign]
    store.requests()
    clock.now += 2
    assert not a.attempt() and a.error == ""
    assert store.requests() == ["update", "get", "update"]
