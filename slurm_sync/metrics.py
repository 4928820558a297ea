"""Prometheus metrics of slurm_sync, in a registry of their own (one per service instance)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slurm_sync.slurm.errors import (
    SlurmError,
    SlurmMalformed,
    SlurmNotFound,
    SlurmNotLeader,
    SlurmRejected,
    SlurmUnavailable,
    SlurmUnsupported,
)

_KINDS = (
    (SlurmNotLeader, "not_leader"),
    (SlurmMalformed, "malformed"),
    (SlurmUnavailable, "unavailable"),
    (SlurmNotFound, "not_found"),
    (SlurmRejected, "rejected"),
    (SlurmUnsupported, "unsupported"),
)


def error_kind(exc: SlurmError) -> str:
    """A low-cardinality label for a Slurm error (most specific class first)."""
    return next((kind for cls, kind in _KINDS if isinstance(exc, cls)), "other")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.poll_seconds = Histogram(
            "slurm_sync_poll_seconds", "Duration of one pass over a Slurm cluster", ["cluster"], registry=self.registry
        )
        self.slurm_errors = Counter(
            "slurm_sync_slurm_errors",
            "Slurm REST calls that failed, by kind",
            ["cluster", "kind"],
            registry=self.registry,
        )
        self.slurm_writes = Counter(
            "slurm_sync_slurm_writes",
            "Slurm node updates sent, by state set",
            ["cluster", "action"],
            registry=self.registry,
        )
        self.slurm_refused = Counter(
            "slurm_sync_slurm_refused_updates",
            "Slurm node updates Slurm refused, counted once each (not re-sent until they or Slurm's value change)",
            ["cluster", "action", "reason"],
            registry=self.registry,
        )
        self.kube_writes = Counter(
            "slurm_sync_kube_writes",
            "Kubernetes writes, by object kind and verb",
            ["kind", "verb"],
            registry=self.registry,
        )
        self.cluster_up = Gauge(
            "slurm_sync_cluster_up",
            "1 when the last pass reached the cluster's Slurm",
            ["cluster"],
            registry=self.registry,
        )

        self.elastic_nodes = Gauge(
            "slurm_sync_elastic_nodes",
            "An elastic NodeSet's on-demand nodes by what Slurm's power saving wants of them (up, down, resumeFailed)",
            ["cluster", "namespace", "nodeset", "power"],
            registry=self.registry,
        )
        self.elastic_resume_failures = Counter(
            "slurm_sync_elastic_resume_failures",
            "Elastic nodes not up within ResumeTimeout (their job requeued by Slurm), resumed by slurm_sync",
            ["cluster", "namespace", "nodeset"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "slurm_sync_leader",
            "1 while this replica holds the Lease and may write (1 without leader election), else 0",
            registry=self.registry,
        )

    def count_kube_write(self, kind: str, verb: str) -> None:
        self.kube_writes.labels(kind, verb).inc()

    def count_slurm_error(self, cluster: str, exc: SlurmError) -> None:
        self.slurm_errors.labels(cluster, error_kind(exc)).inc()
