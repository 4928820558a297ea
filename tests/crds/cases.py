"""The CRDs and their examples as test data: each kind's example CR, a way to change one, every CEL rule, and the
tables of what the CRDs must reject and accept (checked offline by tests/crds/test_crds.py and by the real API
server in test_admission.py)."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from tests.support.kube import REPO_ROOT, load_yaml_docs

CRDS_DIR = REPO_ROOT / "crds"


EXAMPLES_DIR = REPO_ROOT / "examples" / "crs"


GROUP_VERSION = "slinky.slurm.net/v1beta1"


PLURALS = {
    "Controller": "controllers",
    "NodeSet": "nodesets",
    "LoginSet": "loginsets",
    "RestApi": "restapis",
    "Accounting": "accountings",
    "Token": "tokens",
}


DELETE = object()


@functools.cache
def crd_of(kind: str) -> dict[str, Any]:
    """The generated CRD, read once; callers must not modify it."""
    return load_yaml_docs(CRDS_DIR / f"slinky.slurm.net_{PLURALS[kind]}.yaml")[0]


def served_version(kind: str) -> dict[str, Any]:
    (version,) = crd_of(kind)["spec"]["versions"]
    return version


@functools.cache
def _example(kind: str) -> dict[str, Any]:
    (doc,) = load_yaml_docs(EXAMPLES_DIR / f"{kind.lower()}.yaml")
    return doc


def example(kind: str) -> dict[str, Any]:
    return copy.deepcopy(_example(kind))


def changed(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of obj with each dotted path set to its value (or removed for DELETE)."""
    result = copy.deepcopy(obj)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = result
        for name in parents:
            node = node.setdefault(name, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return result


def all_rules(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(schema path, rule) for every x-kubernetes-validations rule of a kind."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: dict[str, Any], path: str) -> None:
        found.extend((path, validation) for validation in node.get("x-kubernetes-validations", []))
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(served_version(kind)["schema"]["openAPIV3Schema"], "")
    return found


def example_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in sorted(EXAMPLES_DIR.glob("*.yaml")) for doc in load_yaml_docs(path)]


MAX_UNAVAILABLE = (
    "spec.updateStrategy.rollingUpdate.maxUnavailable: "
    "maxUnavailable must be a positive count or percentage, not 0 or 0%"
)
SCHEDULED: dict[str, Any] = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2025-06-01T22:00:00Z"}}


@dataclass(frozen=True)
class Rejected:
    """The example of `kind` with `changes` must fail with `expected`; on update from `old` when given."""

    name: str
    kind: str
    changes: dict[str, Any]
    expected: str
    old: dict[str, Any] | None = field(default=None)


ELASTIC_IN_PLACE = (
    "spec.elastic: elastic cannot be added or removed in place: its nodes would move between slurm.conf and"
    " dynamic registration, and slurmctld loses the jobs of nodes it no longer knows; create another NodeSet"
)

REJECTED = [
    # structural schema
    Rejected("unknown spec field", "NodeSet", {"spec.sise": 3}, "spec.sise: unknown field"),
    Rejected("unknown status field", "Token", {"status.issuedat": "x"}, "status.issuedat: unknown field"),
    Rejected("unknown metadata field", "RestApi", {"metadata.labelz": {}}, "metadata.labelz: unknown field"),
    Rejected(
        "enum",
        "NodeSet",
        {"spec.scalingMode": "Deployment"},
        "spec.scalingMode: 'Deployment' is not one of ['DaemonSet', 'StatefulSet']",
    ),
    Rejected("type", "NodeSet", {"spec.replicas": "2"}, "spec.replicas: '2' is not of type 'integer'"),
    Rejected(
        "int-or-string",
        "NodeSet",
        {"spec.updateStrategy.rollingUpdate.maxUnavailable": 1.5},
        "spec.updateStrategy.rollingUpdate.maxUnavailable: 1.5 is not valid under any of the given schemas",
    ),
    Rejected(
        "minimum",
        "Controller",
        {"spec.ha": {"enabled": False, "backups": 0}},
        "spec.ha.backups: 0 is less than the minimum of 1",
    ),
    Rejected("maxLength", "Controller", {"spec.clusterName": "c" * 41}, f"spec.clusterName: {'c' * 41!r} is too long"),
    Rejected(
        "elastic without its partition",
        "NodeSet",
        {"spec.elastic": {"maxReplicas": 4}, "spec.partition": {"enabled": False}},
        "spec.elastic: elastic requires partition.enabled: Slurm's resume timeout is a partition option",
    ),
    Rejected(
        "elastic in DaemonSet mode",
        "NodeSet",
        {"spec.elastic": {"maxReplicas": 4}, "spec.scalingMode": "DaemonSet"},
        "spec.elastic: elastic requires scalingMode StatefulSet: Slurm powers up nodes by name, one per ordinal",
    ),
    Rejected(
        "elastic minimum above maximum",
        "NodeSet",
        {"spec.elastic": {"minReplicas": 5, "maxReplicas": 4}},
        "spec.elastic.minReplicas: elastic.minReplicas must not exceed elastic.maxReplicas",
    ),
    Rejected(
        "elastic added in place",
        "NodeSet",
        {"spec.elastic": {"maxReplicas": 4}},
        ELASTIC_IN_PLACE,
        old={},
    ),
    Rejected(
        "elastic removed in place",
        "NodeSet",
        {},
        ELASTIC_IN_PLACE,
        old={"spec.elastic": {"maxReplicas": 4}},
    ),
    Rejected(
        "elastic maximum lowered",
        "NodeSet",
        {"spec.elastic": {"maxReplicas": 3}},
        "spec.elastic.maxReplicas: elastic.maxReplicas cannot be lowered in place: slurm.conf would drop nodes that may"
        " be running jobs, and slurmctld loses the jobs of nodes it no longer knows; create a smaller NodeSet and"
        " delete this one",
        old={"spec.elastic": {"maxReplicas": 4}},
    ),
    Rejected(
        "elastic without a maximum",
        "NodeSet",
        {"spec.elastic": {"minReplicas": 1}},
        "spec.elastic: 'maxReplicas' is a required property",
    ),
    Rejected(
        "partition config newline",
        "NodeSet",
        {"spec.partition.config": "MaxTime=1\nPartitionName=evil"},
        "spec.partition.config: 'MaxTime=1\\nPartitionName=evil' does not match '^[^\\\\n]+$'",
    ),
    Rejected(
        "partition config trailing newline",
        "NodeSet",
        {"spec.partition.config": "MaxTime=1\n"},
        "spec.partition.config: 'MaxTime=1\\n' does not match '^[^\\\\n]+$'",
    ),
    Rejected(
        "lifetime pattern",
        "Token",
        {"spec.lifetime": "1 hour"},
        "spec.lifetime: '1 hour' does not match '^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$'",
    ),
    Rejected(
        "date-time",
        "NodeSet",
        {"spec.updateStrategy": {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "tonight"}}},
        "spec.updateStrategy.scheduledUpdate.startTime: 'tonight' is not a 'date-time'",
    ),
    Rejected("required spec", "Controller", {"spec": DELETE}, "<root>: 'spec' is a required property"),
    Rejected(
        "required controllerRef",
        "RestApi",
        {"spec.controllerRef": DELETE},
        "spec: 'controllerRef' is a required property",
    ),
    Rejected(
        "required key",
        "LoginSet",
        {"spec.sssdConfRef": {"name": "slurm-sssd-conf"}},
        "spec.sssdConfRef: 'key' is a required property",
    ),
    Rejected(
        "required storage host",
        "Accounting",
        {"spec.storageConfig.host": DELETE},
        "spec.storageConfig: 'host' is a required property",
    ),
    Rejected(
        "duplicate condition",
        "RestApi",
        {
            "status.conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Up",
                    "message": "",
                    "lastTransitionTime": "2025-06-01T12:00:00Z",
                }
            ]
            * 2
        },
        "status.conditions[1]: Duplicate value: ('Ready',)",
    ),
    Rejected(
        "condition status enum",
        "Token",
        {
            "status.conditions": [
                {
                    "type": "Ready",
                    "status": "Yes",
                    "reason": "Up",
                    "message": "",
                    "lastTransitionTime": "2025-06-01T12:00:00Z",
                }
            ]
        },
        "status.conditions[0].status: 'Yes' is not one of ['True', 'False', 'Unknown']",
    ),
    Rejected(
        "null in non-nullable field", "NodeSet", {"spec.replicas": None}, "spec.replicas: None is not of type 'integer'"
    ),
    Rejected(
        "invalid name",
        "Token",
        {"metadata.name": "Slurm_Token"},
        "metadata.name: 'Slurm_Token' is not a DNS-1123 subdomain",
    ),
    # Controller rules
    Rejected(
        "controller needs slurmKeyRef",
        "Controller",
        {"spec.slurmKeyRef": DELETE},
        "spec.slurmKeyRef: slurmKeyRef is required unless external is true",
    ),
    Rejected(
        "controller needs a jwt key",
        "Controller",
        {"spec.jwtKeyRef": DELETE},
        "spec.jwtKeyRef: jwtKeyRef (or the deprecated jwtHs256KeyRef) is required unless external is true",
    ),
    Rejected(
        "external controller needs externalConfig",
        "Controller",
        {"spec.external": True},
        "spec.externalConfig: externalConfig is required when external is true",
    ),
    Rejected(
        "ha needs an existing claim",
        "Controller",
        {"spec.ha": {"enabled": True}},
        "spec.persistence: ha.enabled requires persistence.enabled and persistence.existingClaim (a ReadWriteMany PVC)",
    ),
    Rejected(
        "ha needs persistence",
        "Controller",
        {"spec.ha": {"enabled": True}, "spec.persistence": {"enabled": False, "existingClaim": "state"}},
        "spec.persistence: ha.enabled requires persistence.enabled and persistence.existingClaim (a ReadWriteMany PVC)",
    ),
    Rejected(
        "clusterName immutable",
        "Controller",
        {"spec.clusterName": "other"},
        "spec.clusterName: clusterName is immutable",
        old={},
    ),
    Rejected(
        "clusterName cannot be added",
        "Controller",
        {"spec.clusterName": "other"},
        "spec.clusterName: clusterName is immutable",
        old={"spec.clusterName": DELETE},
    ),
    Rejected(
        "slurmKeyRef immutable",
        "Controller",
        {"spec.slurmKeyRef.name": "other"},
        "spec.slurmKeyRef: slurmKeyRef.name is immutable",
        old={},
    ),
    Rejected(
        "controller jwt key immutable",
        "Controller",
        {"spec.jwtKeyRef.name": "other"},
        "spec.jwtKeyRef: jwtKeyRef (or jwtHs256KeyRef) is immutable",
        old={},
    ),
    Rejected(
        "persistence.enabled immutable",
        "Controller",
        {"spec.persistence.enabled": False},
        "spec.persistence: persistence.enabled is immutable",
        old={},
    ),
    Rejected(
        "existingClaim immutable",
        "Controller",
        {"spec.persistence.existingClaim": "b"},
        "spec.persistence: persistence.existingClaim is immutable while persistence is enabled",
        old={"spec.persistence.existingClaim": "a"},
    ),
    # Accounting rules
    Rejected(
        "accounting needs slurmKeyRef",
        "Accounting",
        {"spec.slurmKeyRef": DELETE},
        "spec.slurmKeyRef: slurmKeyRef is required unless external is true",
    ),
    Rejected(
        "accounting needs a jwt key",
        "Accounting",
        {"spec.jwtKeyRef": DELETE},
        "spec.jwtKeyRef: jwtKeyRef (or the deprecated jwtHs256KeyRef) is required unless external is true",
    ),
    Rejected(
        "external accounting needs externalConfig",
        "Accounting",
        {"spec.external": True},
        "spec.externalConfig: externalConfig is required when external is true",
    ),
    Rejected(
        "accounting jwt key immutable",
        "Accounting",
        {"spec.jwtKeyRef": {"name": "slurm-auth-jwt", "key": "other.key"}},
        "spec.jwtKeyRef: jwtKeyRef (or jwtHs256KeyRef) is immutable",
        old={},
    ),
    # Token rules
    Rejected(
        "token needs a jwt key",
        "Token",
        {"spec.jwtKeyRef": DELETE},
        "spec.jwtKeyRef: jwtKeyRef (or the deprecated jwtHs256KeyRef) is required",
    ),
    Rejected(
        "token jwt key immutable",
        "Token",
        {"spec.jwtKeyRef.name": "other"},
        "spec.jwtKeyRef: jwtKeyRef (or jwtHs256KeyRef) is immutable",
        old={},
    ),
    Rejected(
        "token jwt key cannot move to another secret",
        "Token",
        {"spec.jwtKeyRef": DELETE, "spec.jwtHs256KeyRef": {"name": "other", "key": "jwt.key"}},
        "spec.jwtKeyRef: jwtKeyRef (or jwtHs256KeyRef) is immutable",
        old={},
    ),
    # NodeSet rules
    Rejected(
        "nodeset controllerRef empty",
        "NodeSet",
        {"spec.controllerRef": {}},
        "spec.controllerRef: controllerRef.name must not be empty",
    ),
    Rejected(
        "nodeset controllerRef immutable",
        "NodeSet",
        {"spec.controllerRef.name": "other"},
        "spec.controllerRef: controllerRef is immutable",
        old={},
    ),
    Rejected(
        "maxUnavailable 0%",
        "NodeSet",
        {"spec.updateStrategy.rollingUpdate.maxUnavailable": "0%"},
        MAX_UNAVAILABLE,
    ),
    Rejected(
        "maxUnavailable 0",
        "NodeSet",
        {"spec.updateStrategy.rollingUpdate.maxUnavailable": 0},
        MAX_UNAVAILABLE,
    ),
    Rejected(
        "maxUnavailable not a percentage",
        "NodeSet",
        {"spec.updateStrategy.rollingUpdate.maxUnavailable": "two"},
        MAX_UNAVAILABLE,
    ),
    Rejected(
        "scheduled update needs startTime",
        "NodeSet",
        {"spec.updateStrategy": {"type": "ScheduledUpdate"}},
        "spec.updateStrategy.scheduledUpdate: "
        "scheduledUpdate.startTime and scheduledUpdate.duration are required when type is ScheduledUpdate",
    ),
    Rejected(
        "scheduled update window too short",
        "NodeSet",
        {"spec.updateStrategy": {**SCHEDULED, "scheduledUpdate": {**SCHEDULED["scheduledUpdate"], "duration": "59s"}}},
        "spec.updateStrategy.scheduledUpdate.duration: duration must be at least 1m",
    ),
    Rejected(
        "extraConf token without =",
        "NodeSet",
        {"spec.extraConf": "Weight=10 Features"},
        "spec.extraConf: extraConf must be whitespace-separated Key=Value tokens",
    ),
    Rejected(
        "ssh needs sssd.conf",
        "NodeSet",
        {"spec.ssh": {"enabled": True, "sssdConfRef": {"key": "sssd.conf"}}},
        "spec.ssh.sssdConfRef: ssh.sssdConfRef.name is required when ssh.enabled is true",
    ),
    Rejected(
        "volumeClaimTemplates immutable",
        "NodeSet",
        {
            "spec.volumeClaimTemplates": [
                {"metadata": {"name": "scratch"}, "spec": {"resources": {"requests": {"storage": "20Gi"}}}}
            ]
        },
        "spec.volumeClaimTemplates: volumeClaimTemplates is immutable",
        old={
            "spec.volumeClaimTemplates": [
                {"metadata": {"name": "scratch"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}
            ]
        },
    ),
    Rejected(
        "volumeClaimTemplates cannot be added",
        "NodeSet",
        {"spec.volumeClaimTemplates": [{"metadata": {"name": "scratch"}}]},
        "spec.volumeClaimTemplates: volumeClaimTemplates is immutable",
        old={},
    ),
    Rejected(
        "volumeClaimTemplates typo",
        "NodeSet",
        {"spec.volumeClaimTemplates": [{"metadata": {"name": "scratch"}, "spec": {"storageClass": "fast"}}]},
        "spec.volumeClaimTemplates[0].spec.storageClass: unknown field",
    ),
    # LoginSet and RestApi rules
    Rejected(
        "loginset controllerRef empty",
        "LoginSet",
        {"spec.controllerRef.name": ""},
        "spec.controllerRef: controllerRef.name must not be empty",
    ),
    Rejected(
        "loginset controllerRef immutable",
        "LoginSet",
        {"spec.controllerRef.name": "other"},
        "spec.controllerRef: controllerRef is immutable",
        old={},
    ),
    Rejected(
        "loginset sssdConfRef empty",
        "LoginSet",
        {"spec.sssdConfRef": {"key": "sssd.conf"}},
        "spec.sssdConfRef: sssdConfRef.name must not be empty",
    ),
    Rejected(
        "restapi controllerRef empty",
        "RestApi",
        {"spec.controllerRef": {"name": ""}},
        "spec.controllerRef: controllerRef.name must not be empty",
    ),
    Rejected(
        "restapi controllerRef immutable",
        "RestApi",
        {"spec.controllerRef.name": "other"},
        "spec.controllerRef: controllerRef is immutable",
        old={},
    ),
]


ACCEPTED: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
    ("elastic from zero", "NodeSet", {"spec.elastic": {"minReplicas": 0, "maxReplicas": 4}}, None),
    ("elastic maximum raised", "NodeSet", {"spec.elastic": {"maxReplicas": 5}}, {"spec.elastic": {"maxReplicas": 4}}),
    (
        "elastic with every field",
        "NodeSet",
        {"spec.elastic": {"minReplicas": 1, "maxReplicas": 1, "suspendTime": 60, "resumeTimeout": 900}},
        None,
    ),
    (
        "external controller needs no keys",
        "Controller",
        {
            "spec.external": True,
            "spec.externalConfig": {"host": "slurmctld.example.com", "port": 6817},
            "spec.slurmKeyRef": DELETE,
            "spec.jwtKeyRef": DELETE,
        },
        None,
    ),
    (
        "deprecated jwtHs256KeyRef alone",
        "Accounting",
        {"spec.jwtHs256KeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"}, "spec.jwtKeyRef": DELETE},
        None,
    ),
    (
        "moving to jwtHs256KeyRef with the same key",
        "Token",
        {"spec.jwtHs256KeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"}, "spec.jwtKeyRef": DELETE},
        {},
    ),
    (
        "ha with an existing claim",
        "Controller",
        {
            "spec.ha": {"enabled": True, "backups": 2},
            "spec.persistence": {"enabled": True, "existingClaim": "slurm-state"},
        },
        None,
    ),
    ("scheduled update with the default window", "NodeSet", {"spec.updateStrategy": SCHEDULED}, None),
    ("maxUnavailable as a count", "NodeSet", {"spec.updateStrategy.rollingUpdate.maxUnavailable": 1}, None),
    ("maxUnavailable 100%", "NodeSet", {"spec.updateStrategy.rollingUpdate.maxUnavailable": "100%"}, None),
    ("empty extraConf", "NodeSet", {"spec.extraConf": ""}, None),
    (
        "ssh with sssd.conf",
        "NodeSet",
        {"spec.ssh": {"enabled": True, "sssdConfRef": {"name": "slurm-sssd-conf", "key": "sssd.conf"}}},
        None,
    ),
    ("scaling a nodeset", "NodeSet", {"spec.replicas": 5}, {}),
    ("unchanged volumeClaimTemplates", "NodeSet", {"spec.replicas": 3}, {"spec.volumeClaimTemplates": []}),
    ("null where nullable", "Controller", {"spec.configFileRefs": None, "spec.template.metadata.labels": None}, None),
    (
        "unknown fields inside embedded corev1 types",
        "LoginSet",
        {"spec.template.spec.priorityClassName": "high", "spec.login.env": [{"name": "A", "value": "1"}]},
        None,
    ),
    (
        "existingClaim may change while persistence is off",
        "Controller",
        {"spec.persistence": {"enabled": False, "existingClaim": "b"}},
        {"spec.persistence": {"enabled": False, "existingClaim": "a"}},
    ),
]
