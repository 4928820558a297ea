"""Every chart, rendered by real helm with every values set, yields only documents that validate
strictly; `helm lint --strict` passes; a few properties the issue asks for hold in every render."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.charts import helm
from tests.charts.cases import CASES, Case
from tests.charts.validation import validate

Obj = dict[str, Any]


@functools.cache
def rendered(case: Case) -> tuple[Obj, ...]:
    return tuple(helm.render(case.chart, case.values, case.namespace, case.api_versions))


def _name(doc: Obj) -> str:
    return f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"


def of_kind(case: Case, kind: str) -> list[Obj]:
    return [d for d in rendered(case) if d.get("kind") == kind]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_document_validates(case: Case) -> None:
    docs = rendered(case)
    assert docs, "rendered nothing"
    problems = {_name(doc): errors for doc in docs if (errors := validate(doc))}
    assert problems == {}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lint_strict(case: Case) -> None:
    helm.lint(case.chart, case.values)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_names_are_unique(case: Case) -> None:
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in rendered(case)]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_wildcards_in_rbac(case: Case) -> None:
    for doc in of_kind(case, "ClusterRole") + of_kind(case, "Role"):
        for rule in doc["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{_name(doc)}: '*' in {field}"


def _pod_specs(case: Case) -> list[tuple[str, Obj]]:
    return [(_name(d), d["spec"]["template"]["spec"]) for d in of_kind(case, "Deployment")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_workloads_run_non_root_on_a_read_only_root(case: Case) -> None:
    for name, spec in _pod_specs(case):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            # Only /tmp and the metrics/TLS/token mounts are writable or present: all from volumes.
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}: gunicorn and Python need a writable /tmp"


@pytest.mark.parametrize("case", [c for c in CASES if c.chart != "slurm"], ids=lambda c: c.id)
def test_hook_servers_have_probes_and_no_api_token(case: Case) -> None:
    hooks = [d for d in of_kind(case, "Deployment") if d["metadata"]["name"].endswith("-hooks")]
    assert len(hooks) == 1
    spec = hooks[0]["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    for container in spec["containers"]:
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    bound = {
        s["name"] for b in of_kind(case, "RoleBinding") + of_kind(case, "ClusterRoleBinding") for s in b["subjects"]
    }
    assert spec["serviceAccountName"] not in bound


@pytest.mark.parametrize("case", [c for c in CASES if c.chart != "slurm"], ids=lambda c: c.id)
def test_metacontroller_hooks_call_the_release_hook_service(case: Case) -> None:
    services = {(d["metadata"]["name"], d["metadata"]["namespace"]): d for d in of_kind(case, "Service")}
    controllers = of_kind(case, "CompositeController") + of_kind(case, "DecoratorController")
    for doc in controllers:
        for hook in doc["spec"]["hooks"].values():
            target = hook["webhook"]["service"]
            service = services.get((target["name"], target["namespace"]))
            assert service is not None, f"{_name(doc)} calls a Service the chart does not render"
            assert target["port"] in [p["port"] for p in service["spec"]["ports"]]


def test_servicemonitors_only_with_monitoring_api() -> None:
    by_id = {c.id: c for c in CASES}
    assert of_kind(by_id["slurm-operator-metrics-servicemonitors"], "ServiceMonitor")
    assert not of_kind(by_id["slurm-operator-defaults"], "ServiceMonitor")
    controller = next(
        d
        for d in of_kind(by_id["slurm-operator-metrics-servicemonitors"], "CompositeController")
        if d["spec"]["parentResource"]["resource"] == "controllers"
    )
    assert {
        "apiVersion": "monitoring.coreos.com/v1",
        "resource": "servicemonitors",
        "updateStrategy": {"method": "InPlace"},
    } in controller["spec"]["childResources"]
    plain = next(
        d
        for d in of_kind(by_id["slurm-operator-defaults"], "CompositeController")
        if d["spec"]["parentResource"]["resource"] == "controllers"
    )
    assert all(c["resource"] != "servicemonitors" for c in plain["spec"]["childResources"])


def test_hook_auth_sends_a_bearer_token_from_the_chart_secret() -> None:
    case = next(c for c in CASES if c.name == "auth-networkpolicy")
    secret = next(d for d in of_kind(case, "Secret") if d["metadata"]["name"].endswith("-hook-token"))
    for doc in of_kind(case, "CompositeController"):
        (config,) = doc["spec"]["endpointConfigs"]
        assert config["host"] == "slurm-operator-hooks.slinky:8080"
        assert config["authorization"] == {
            "type": "Bearer",
            "secretRef": {"name": secret["metadata"]["name"], "namespace": "slinky", "key": "token"},
        }
    assert of_kind(case, "NetworkPolicy")


@pytest.mark.parametrize("case", [c for c in CASES if c.chart != "slurm"], ids=lambda c: c.id)
def test_slurm_sync_runs_two_replicas_that_elect_a_leader_apart(case: Case) -> None:
    """docs/architecture.md §8: two replicas, rolled with RollingUpdate (a standby is Ready), on
    different nodes when they can be, each told its Lease and namespace."""
    (deployment,) = [d for d in of_kind(case, "Deployment") if d["metadata"]["name"].endswith("-slurm-sync")]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SLURM_SYNC_LEASE_NAME"]["value"] == deployment["metadata"]["name"]
    assert env["SLURM_SYNC_LEASE_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    timings = [env[f"SLURM_SYNC_{t}"]["value"] for t in ("LEASE_DURATION", "RENEW_DEADLINE", "RETRY_PERIOD")]
    assert timings == ["15", "10", "2"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]


def _slurm_sync_pdbs(docs: list[Obj] | tuple[Obj, ...]) -> list[Obj]:
    return [d for d in docs if d.get("kind") == "PodDisruptionBudget" and d["metadata"]["name"].endswith("-slurm-sync")]


@pytest.mark.parametrize("case", [c for c in CASES if c.chart != "slurm"], ids=lambda c: c.id)
def test_slurm_sync_pdb_lets_a_drain_take_one_replica_at_a_time(case: Case) -> None:
    """docs/architecture.md §8: maxUnavailable 1 (minAvailable 2 of 2 would block every drain), over
    exactly the Deployment's pods, and an unready replica (a leader while Slurm is down) still evictable."""
    (deployment,) = [d for d in of_kind(case, "Deployment") if d["metadata"]["name"].endswith("-slurm-sync")]
    (pdb,) = _slurm_sync_pdbs(rendered(case))
    assert pdb["metadata"]["name"] == deployment["metadata"]["name"]
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    others = [d for d in of_kind(case, "PodDisruptionBudget") if d is not pdb]
    assert all(d["spec"]["selector"]["matchLabels"] != selector for d in others), "one PDB per pod"


@pytest.mark.parametrize(
    ("chart", "namespace"), [("slurm-operator", "slinky"), ("slurm-bridge", "slurm-bridge-system")]
)
def test_slurm_sync_pdb_only_for_more_than_one_replica_and_when_enabled(chart: str, namespace: str) -> None:
    assert not _slurm_sync_pdbs(helm.render(chart, {"slurmSync": {"replicas": 1}}, namespace))
    assert not _slurm_sync_pdbs(helm.render(chart, {"slurmSync": {"pdb": {"enabled": False}}}, namespace))
    (pdb,) = _slurm_sync_pdbs(helm.render(chart, {"slurmSync": {"replicas": 3, "pdb": {"maxUnavailable": "50%"}}},
                                          namespace))  # fmt: skip
    assert pdb["spec"]["maxUnavailable"] == "50%"


@pytest.mark.parametrize("blocking", [0, "0%"])
def test_slurm_sync_pdb_refuses_a_budget_that_blocks_every_drain(blocking: int | str) -> None:
    for chart in ("slurm-operator", "slurm-bridge"):
        with pytest.raises(helm.HelmFailed, match=r"slurmSync\.pdb\.maxUnavailable must let one replica go"):
            helm.render(chart, {"slurmSync": {"pdb": {"maxUnavailable": blocking}}})
