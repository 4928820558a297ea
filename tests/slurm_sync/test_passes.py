"""The frame both loops' passes share (slurm_sync/passes.py): what a write, a failed call and an unreadable
view do to a pass's tally, and what the outcome says about readiness."""

from __future__ import annotations

import datetime

from kubernetes.client.exceptions import ApiException

from slurm_sync import passes
from slurm_sync.metrics import Metrics
from slurm_sync.slurm.errors import SlurmUnavailable


def test_a_kube_write_is_counted_and_a_refused_one_is_an_error_but_not_unready() -> None:
    tally = passes.Tally()
    assert passes.kube_write(tally, "bridge", "pod a", lambda: None)

    def refused() -> None:
        raise ApiException(status=409, reason="Conflict")

    assert not passes.kube_write(tally, "bridge", "pod b", refused)
    assert (tally.kube_writes, tally.errors, tally.unready) == (1, ["pod b: HTTP 409"], [])


def test_a_failed_slurm_call_is_counted_an_error_and_a_reason_to_be_unready() -> None:
    tally, metrics = passes.Tally(), Metrics()
    passes.slurm_failed(tally, metrics, "ns/c", "list nodes", SlurmUnavailable("timed out"))
    assert tally.errors == tally.unready == ["list nodes: timed out"]
    sample = metrics.registry.get_sample_value(
        "slurm_sync_slurm_errors_total", {"cluster": "ns/c", "kind": "unavailable"}
    )
    assert sample == 1


def test_an_unreadable_kubernetes_view_makes_the_pass_unready() -> None:
    tally = passes.Tally()
    passes.kube_read_failed(tally, "cluster ns/c", ApiException(status=503, reason="Unavailable"))
    assert len(tally.errors) == len(tally.unready) == 1 and tally.unready[0].startswith("reading Kubernetes objects:")


def test_ready_needs_slurm_the_reads_and_no_reason_ok_needs_no_error() -> None:
    clean = passes.Outcome(slurm_ok=True, errors=(), kube_writes=0, slurm_writes=0)
    assert clean.ready and clean.ok
    refused = passes.Outcome(slurm_ok=True, errors=("pod b: HTTP 409",), kube_writes=0, slurm_writes=0)
    assert refused.ready and not refused.ok  # a refused Kubernetes write is retried, not a readiness matter
    assert not passes.Outcome(slurm_ok=True, errors=(), kube_writes=0, slurm_writes=0, read_ok=False).ready
    assert not passes.Outcome(slurm_ok=True, errors=(), kube_writes=0, slurm_writes=0, unready=("x",)).ready
    assert not passes.Outcome(slurm_ok=False, errors=(), kube_writes=0, slurm_writes=0).ready


def test_times_are_written_as_kubernetes_writes_them() -> None:
    moment = datetime.datetime(2026, 11, 26, 23, 5, 7, 900, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert passes.rfc3339(moment) == "2026-11-26T22:05:07Z"
    assert passes.utc_now().tzinfo is datetime.UTC
