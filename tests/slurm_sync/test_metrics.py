"""slurm_sync's Prometheus metrics (slurm_sync/metrics.py): a registry per instance, the low-cardinality
kind of each Slurm error (the most specific class wins), and the counters as the registry reports them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from slurm_sync.metrics import Metrics, error_kind
from slurm_sync.slurm.errors import (
    SlurmError,
    SlurmMalformed,
    SlurmNotFound,
    SlurmNotLeader,
    SlurmNoToken,
    SlurmRejected,
    SlurmSuspect,
    SlurmUnavailable,
    SlurmUnsupported,
    SlurmWrongCluster,
)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (SlurmNotLeader("backup"), "not_leader"),  # a SlurmUnavailable, named apart
        (SlurmMalformed("not JSON"), "malformed"),  # a SlurmUnavailable too
        (SlurmUnavailable("timed out"), "unavailable"),
        (SlurmWrongCluster("other cluster"), "unavailable"),
        (SlurmSuspect("listing lost nodes"), "unavailable"),
        (SlurmNoToken("no token"), "unavailable"),
        (SlurmNotFound("no job 7", status=404), "not_found"),  # a SlurmRejected, named apart
        (SlurmRejected("invalid", status=400), "rejected"),
        (SlurmUnsupported("too old"), "unsupported"),
        (SlurmError("anything else"), "other"),
    ],
)
def test_each_slurm_error_has_the_kind_of_its_most_specific_class(error: SlurmError, kind: str) -> None:
    assert error_kind(error) == kind


def test_slurm_errors_are_counted_by_cluster_and_kind() -> None:
    metrics = Metrics()
    metrics.count_slurm_error("ns/a", SlurmNotFound("gone", status=404))
    metrics.count_slurm_error("ns/a", SlurmNotFound("gone again", status=404))
    metrics.count_slurm_error("ns/b", SlurmMalformed("not JSON"))

    def errors(cluster: str, kind: str) -> float | None:
        return metrics.registry.get_sample_value("slurm_sync_slurm_errors_total", {"cluster": cluster, "kind": kind})

    assert (errors("ns/a", "not_found"), errors("ns/b", "malformed"), errors("ns/a", "malformed")) == (2.0, 1.0, None)


def test_kube_writes_are_counted_by_kind_and_verb() -> None:
    metrics = Metrics()
    for kind, verb in [("pod", "patch"), ("pod", "patch"), ("pod_binding", "create")]:
        metrics.count_kube_write(kind, verb)
    sample = metrics.registry.get_sample_value
    assert sample("slurm_sync_kube_writes_total", {"kind": "pod", "verb": "patch"}) == 2.0
    assert sample("slurm_sync_kube_writes_total", {"kind": "pod_binding", "verb": "create"}) == 1.0
    assert sample("slurm_sync_kube_writes_total", {"kind": "pod", "verb": "delete"}) is None


def test_each_instance_has_a_registry_of_its_own_unless_one_is_given() -> None:
    first, second = Metrics(), Metrics()
    first.count_kube_write("node", "patch")
    assert second.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "node", "verb": "patch"}) is None
    shared = CollectorRegistry()
    assert Metrics(shared).registry is shared
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Metrics(shared)  # one service instance per registry: the same names twice are refused


def test_every_metric_is_exported_under_its_documented_name_and_labels() -> None:
    metrics = Metrics()
    metrics.poll_seconds.labels("ns/a").observe(0.25)
    metrics.slurm_writes.labels("ns/a", "DRAIN").inc()
    metrics.slurm_refused.labels("ns/a", "DRAIN", "invalid").inc()
    metrics.cluster_up.labels("ns/a").set(1)
    metrics.leader.set(1)
    metrics.elastic_nodes.labels("ns/a", "ns", "gpu", "up").set(2)
    metrics.elastic_resume_failures.labels("ns/a", "ns", "gpu").inc()
    sample = metrics.registry.get_sample_value
    assert sample("slurm_sync_poll_seconds_count", {"cluster": "ns/a"}) == 1.0
    assert sample("slurm_sync_poll_seconds_sum", {"cluster": "ns/a"}) == 0.25
    assert sample("slurm_sync_slurm_writes_total", {"cluster": "ns/a", "action": "DRAIN"}) == 1.0
    refused = {"cluster": "ns/a", "action": "DRAIN", "reason": "invalid"}
    assert sample("slurm_sync_slurm_refused_updates_total", refused) == 1.0
    assert sample("slurm_sync_cluster_up", {"cluster": "ns/a"}) == 1.0
    assert sample("slurm_sync_leader") == 1.0
    elastic = {"cluster": "ns/a", "namespace": "ns", "nodeset": "gpu"}
    assert sample("slurm_sync_elastic_nodes", {**elastic, "power": "up"}) == 2.0
    assert sample("slurm_sync_elastic_resume_failures_total", elastic) == 1.0
    assert sorted((family.name, family.type) for family in metrics.registry.collect()) == [
        ("slurm_sync_cluster_up", "gauge"),
        ("slurm_sync_elastic_nodes", "gauge"),
        ("slurm_sync_elastic_resume_failures", "counter"),
        ("slurm_sync_kube_writes", "counter"),
        ("slurm_sync_leader", "gauge"),
        ("slurm_sync_poll_seconds", "histogram"),
        ("slurm_sync_slurm_errors", "counter"),
        ("slurm_sync_slurm_refused_updates", "counter"),
        ("slurm_sync_slurm_writes", "counter"),
    ]
