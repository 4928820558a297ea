"""The Kubernetes client's rate limit (slurm_sync/throttle.py): client-go's token bucket, with a fake clock;
and every request through ``Kube`` takes its token before it is sent."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from slurm_sync import __main__ as cli
from slurm_sync.kube import Kube
from slurm_sync.throttle import TokenBucket
from tests.slurm_sync.kubefixtures import api_client
from tests.support.clock import FakeClock


def bucket(qps: float, burst: int, clock: FakeClock, slept: list[float] | None = None) -> TokenBucket:
    return TokenBucket(qps, burst, clock=lambda: clock.now, sleep=(slept if slept is not None else []).append)


def test_a_burst_goes_at_once_then_requests_are_paced_at_qps() -> None:
    clock = FakeClock()
    limit = bucket(10, 3, clock)
    assert [limit.delay() for _ in range(5)] == [0, 0, 0, pytest.approx(0.1), pytest.approx(0.2)]
    assert limit.waited == pytest.approx(0.3)


def test_tokens_come_back_at_qps_up_to_the_burst() -> None:
    clock = FakeClock()
    limit = bucket(10, 3, clock)
    for _ in range(3):
        limit.delay()
    clock.now += 0.2  # two tokens back
    assert [limit.delay(), limit.delay(), limit.delay()] == [0, 0, pytest.approx(0.1)]
    clock.now += 60  # idle for long: never more than the burst
    assert [limit.delay() for _ in range(4)] == [0, 0, 0, pytest.approx(0.1)]


def test_each_waiter_reserves_its_own_turn() -> None:
    """Waiters that came one after the other are admitted one token apart, whatever order they wake in."""
    clock = FakeClock()
    limit = bucket(4, 1, clock)
    waits: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        wait = limit.delay()
        with lock:
            waits.append(wait)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == [pytest.approx(i * 0.25) for i in range(8)]


def test_no_qps_is_no_limit() -> None:
    clock, slept = FakeClock(), []
    limit = bucket(0, 1, clock, slept)
    for _ in range(1000):
        limit.wait()
    assert slept == [] and limit.waited == 0


def test_a_qps_without_a_burst_is_refused() -> None:
    with pytest.raises(ValueError, match="burst must be at least 1"):
        TokenBucket(5, 0)


def test_every_kube_request_waits_for_its_token_before_it_is_sent() -> None:
    clock, slept, sent = FakeClock(), [], []

    class Inner:
        def request(self, method: str, url: str, **kwargs: Any) -> None:
            sent.append((method, len(slept)))
            raise RuntimeError("recorded")

    api = api_client("http://127.0.0.1:9")
    api.rest_client = Inner()  # type: ignore[assignment]
    kube = Kube(api, throttle=bucket(5, 1, clock, slept))
    for _ in range(3):
        with pytest.raises(RuntimeError):
            kube.patch_pod("ns", "p", {"metadata": {"labels": {"a": "b"}}})
    assert sent == [("PATCH", 0), ("PATCH", 1), ("PATCH", 2)], "the second and third slept before they went"
    assert slept == [pytest.approx(0.2), pytest.approx(0.4)]


def test_the_flags_and_their_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.parse_args([])
    assert (args.kube_api_qps, args.kube_api_burst) == (100.0, 200)
    monkeypatch.setenv("SLURM_SYNC_KUBE_API_QPS", "25")
    assert cli.parse_args(["--kube-api-burst", "50"]).kube_api_qps == 25
    for bad in (["--kube-api-qps", "-1"], ["--kube-api-burst", "0"]):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)
