"""The values sets every chart is rendered with (the issue's list, plus the options each chart has)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
MONITORING = "monitoring.coreos.com/v1"
MONITORING_KIND = "monitoring.coreos.com/v1/ServiceMonitor"
CERT_MANAGER = "cert-manager.io/v1"


# eq=False: identity hashing, so a case (holding dicts) can key the render cache.
@dataclass(frozen=True, eq=False)
class Case:
    chart: str
    name: str
    values: Obj = field(default_factory=dict)
    api_versions: tuple[str, ...] = ()
    namespace: str = "slinky"

    @property
    def id(self) -> str:
        return f"{self.chart}-{self.name}"


FULL_SLURM: Obj = {
    "priorityClass": {"enabled": True},
    "jwksKeys": {"enabled": True},
    "configFiles": {"gres.conf": "AutoDetect=nvidia\n", "cgroup.conf": "CgroupPlugin=autodetect\n"},
    "prologScripts": {"00-hello.sh": "#!/bin/sh\necho hello\n"},
    "epilogScriptRefs": ["site-epilog"],
    "prologSlurmctldScripts": {"check.sh": "#!/bin/sh\nexit 0\n"},
    "controller": {
        "extraConf": "SlurmctldDebug=debug",
        "extraConfMap": {"SchedulerParameters": ["bf_continue", "bf_interval=300"]},
        "metrics": {"enabled": True, "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "service": {"spec": {"type": "ClusterIP"}},
    },
    "restapi": {"replicas": 2, "pdb": {"enabled": True}},
    "loginsets": {"slinky": {"rootSshAuthorizedKeys": "ssh-ed25519 AAAA admin@example.com"}, "gpu": {"replicas": 2}},
    "nodesets": {
        "slinky": {"replicas": 3, "partition": {"enabled": True, "configMap": {"MaxTime": "UNLIMITED"}}},
        "gpu": {
            "replicas": 2,
            "ssh": {"enabled": True},
            "slurmd": {"resources": {"limits": {"nvidia.com/gpu": 1}}},
            "extraConfMap": {"Gres": ["gpu:1"]},
        },
    },
    "partitions": {"gpu": {"enabled": True, "nodesets": ["gpu"], "configMap": {"MaxTime": "1-00:00:00"}}},
}

CASES: tuple[Case, ...] = (
    Case("slurm-operator", "defaults"),
    Case(
        "slurm-operator",
        "metrics-servicemonitors",
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}},
        (MONITORING, MONITORING_KIND),
    ),
    Case(
        "slurm-operator",
        "auth-networkpolicy",
        {"hooks": {"auth": {"enabled": True}}, "networkPolicy": {"enabled": True}},
    ),
    Case("slurm-operator", "one-namespace", {"slurmSync": {"namespace": "slurm"}, "hooks": {"replicas": 1}}),
    Case(
        "slurm-operator",
        "no-crds-no-controllers",
        {"crds": {"enabled": False}, "controllers": {"enabled": False}, "metrics": {"enabled": False}},
    ),
    Case("slurm", "defaults", namespace="slurm"),
    Case(
        "slurm",
        "ha-controller",
        {
            "controller": {
                "ha": {"enabled": True, "backups": 2},
                "persistence": {"existingClaim": "slurmctld-state", "accessModes": ["ReadWriteMany"]},
            }
        },
        namespace="slurm",
    ),
    Case("slurm", "accounting", {"accounting": {"enabled": True}}, namespace="slurm"),
    Case("slurm", "everything", {**FULL_SLURM, "accounting": {"enabled": True}}, (MONITORING,), namespace="slurm"),
    Case("slurm-bridge", "defaults", namespace="slurm-bridge-system"),
    Case(
        "slurm-bridge",
        "namespace-selector",
        {
            "admission": {
                "managedNamespaceSelector": {"matchLabels": {"slurm-bridge.slinky.slurm.net/managed": "true"}}
            },
            "slurmSync": {"enabled": True},
        },
        namespace="slurm-bridge-system",
    ),
    Case(
        "slurm-bridge",
        "cert-manager",
        {"slurmSync": {"enabled": True}},
        (CERT_MANAGER,),
        namespace="slurm-bridge-system",
    ),
)
