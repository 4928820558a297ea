"""The charts grant exactly what the code calls: the rules each chart renders for a component equal
the rules derived from that component's Kubernetes client calls (tests/charts/rbac.py), plus the
calls listed as planned in rbac_table.yaml (none today). When the namespaces are known, namespaced
rights live in a Role in each of them and only cluster-scoped resources stay in the ClusterRole. The
leader-election Lease is the release namespace's business only: a Role <name>-lease there, which
grants create on leases (RBAC cannot name what is created) and every other verb only on the one Lease
the chart tells slurm_sync to use (SLURM_SYNC_LEASE_NAME)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import helm, rbac
from tests.charts.rbac import Rule

Obj = dict[str, Any]
HOOK_PACKAGES = ("hooks", "slinky_common")  # what the hook server runs


CLUSTER_SCOPED = {"nodes", "resourceslices"}  # the cluster-scoped resources slurm_sync touches
RELEASE_NAMESPACE_ONLY = {"leases"}  # leader election (slurm_sync/leader.py), in the release's namespace
# The bridge's Slurm JWT Secret (slurm_sync/bridge/token.py), in the Slurm cluster's namespace only, by name.
TOKEN_NAMESPACE_ONLY = {"secrets"}
TOKEN_SECRET = "slurm-bridge-token"  # the bridge chart's sharedConfig.slurmJwtSecret


def _rendered_rules(docs: list[Obj], role_name: str) -> tuple[set[Rule], set[Rule]]:
    """(ClusterRole rules, Role rules) of the roles named role_name."""
    cluster = rbac.expand(
        r for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role_name for r in d["rules"]
    )
    namespaced = rbac.expand(
        r for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == role_name for r in d["rules"]
    )
    return cluster, namespaced


def _without_leases(rules: set[Rule]) -> set[Rule]:
    return {r for r in rules if r[1] not in RELEASE_NAMESPACE_ONLY}


def _bridge_wide(rules: set[Rule] | frozenset[Rule]) -> set[Rule]:
    """The bridge's rules but the Lease's and its token Secret's (each granted on one name, in one namespace)."""
    return {r for r in _without_leases(set(rules)) if r[1] not in TOKEN_NAMESPACE_ONLY}


def _token_role(docs: list[Obj], role_name: str, namespace: str, service_account_ns: str) -> Obj:
    """The Role <role_name>-token, checking that it is in ``namespace`` and bound there to our ServiceAccount."""
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{role_name}-token"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == f"{role_name}-token"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{role_name}-token"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role_name, "namespace": service_account_ns}]
    return role


def _lease_role(docs: list[Obj], role_name: str) -> Obj:
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{role_name}-lease"]
    return role


def _lease_name(docs: list[Obj], deployment_name: str) -> str:
    """The Lease the chart tells slurm_sync to use (--lease-name, as SLURM_SYNC_LEASE_NAME)."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == deployment_name]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    return env["SLURM_SYNC_LEASE_NAME"]


def _lease_rules(docs: list[Obj], role_name: str, release_ns: str) -> set[Rule]:
    """The rules of the Role <role_name>-lease, checking that it is in the release namespace and bound
    there to our ServiceAccount."""
    role = _lease_role(docs, role_name)
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == f"{role_name}-lease"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == release_ns
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{role_name}-lease"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role_name, "namespace": release_ns}]
    return rbac.expand(role["rules"])


def _roles_by_namespace(docs: list[Obj], role_name: str, service_account_ns: str) -> dict[str, set[Rule]]:
    """Each namespace's Role rules, checking that a RoleBinding there gives them to our ServiceAccount."""
    roles = {
        d["metadata"]["namespace"]: rbac.expand(d["rules"])
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["name"] == role_name
    }
    bindings = {
        d["metadata"]["namespace"]: d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == role_name
    }
    assert set(bindings) == set(roles)
    for binding in bindings.values():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": role_name, "namespace": service_account_ns}]
    return roles


def test_every_client_call_in_slurm_sync_is_in_the_table() -> None:
    # A call the table does not know would otherwise be silently left out of the derived set.
    table = rbac.table()
    known = set(table["typed"]) | set(table["custom"])
    files = rbac.component_files("operator") + rbac.component_files("bridge")
    assert rbac.kubernetes_methods_called(files) - known == set()


def test_the_derivation_sees_the_operator_calls() -> None:
    # Guards the scanner itself: these calls exist in slurm_sync/kube.py today.
    rules = rbac.derived_rules("operator")
    assert ("", "pods/status", "patch") in rules
    assert ("slinky.slurm.net", "nodesets", "patch") in rules
    # through a helper that passes its own `plural` on (service._list_custom -> kube.list_custom)
    assert {("slinky.slurm.net", p, "list") for p in ("controllers", "restapis", "nodesets")} <= rules
    assert ("events.k8s.io", "events", "create") in rules


def test_operator_chart_grants_exactly_what_slurm_sync_calls() -> None:
    docs = helm.render("slurm-operator")
    cluster, namespaced = _rendered_rules(docs, "slurm-operator-slurm-sync")
    assert namespaced == set()
    derived = rbac.derived_rules("operator")
    assert cluster == _without_leases(derived)
    assert _lease_rules(docs, "slurm-operator-slurm-sync", "slinky") == derived - _without_leases(derived)


def test_leader_election_needs_exactly_get_create_update_on_leases() -> None:
    for component in ("operator", "bridge"):
        derived = rbac.derived_rules(component)
        assert derived - _without_leases(derived) == {
            ("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
        }


LEASE = "coordination.k8s.io", "leases"
UNNAMED_VERBS = {"create"}  # RBAC sees no object name on these requests, so resourceNames cannot narrow them


@pytest.mark.parametrize(
    ("chart", "values", "namespace"),
    [
        ("slurm-operator", {}, "slinky"),
        ("slurm-operator", {"slurmSync": {"namespaces": ["hpc-a"]}}, "slinky"),
        ("slurm-bridge", {}, "slurm-bridge-system"),
    ],
)
def test_lease_rights_name_only_the_lease_slurm_sync_uses(chart: str, values: Obj, namespace: str) -> None:
    docs = helm.render(chart, values, namespace, release="hpc")
    name = f"hpc-{chart}-slurm-sync"
    lease = _lease_name(docs, name)
    assert lease == name
    rules = _lease_role(docs, name)["rules"]
    component = chart.removeprefix("slurm-")
    derived = {verb for group, resource, verb in rbac.derived_rules(component) if (group, resource) == LEASE}
    named = {verb for rule in rules if rule.get("resourceNames") for verb in rule["verbs"]}
    assert named == derived - UNNAMED_VERBS, "every verb that can be narrowed to a name is"
    assert all(rule["resourceNames"] == [lease] for rule in rules if rule.get("resourceNames"))
    for verb in derived - UNNAMED_VERBS:
        assert rbac.allows(rules, *LEASE, verb, lease)
        assert not rbac.allows(rules, *LEASE, verb, "kube-scheduler"), f"{verb} on another Lease"
    assert rbac.allows(rules, *LEASE, "create")
    for verb in ("list", "watch", "patch", "delete", "deletecollection"):
        assert not rbac.allows(rules, *LEASE, verb, lease), verb


def test_the_rbac_check_refuses_a_rule_naming_another_lease() -> None:
    # Guards rbac.allows: a grant naming some other Lease does not reach ours, an unnamed one reaches any.
    other = [{"apiGroups": [LEASE[0]], "resources": [LEASE[1]], "verbs": ["get", "update"], "resourceNames": ["x"]}]
    assert not rbac.allows(other, *LEASE, "get", "slurm-operator-slurm-sync")
    assert rbac.allows(other, *LEASE, "update", "x") and not rbac.allows(other, *LEASE, "create")
    unnamed = [{**other[0], "resourceNames": []}]
    assert rbac.allows(unnamed, *LEASE, "get", "slurm-operator-slurm-sync")
    assert not rbac.allows(unnamed, "", LEASE[1], "get", "x"), "another API group"


def test_operator_chart_in_one_namespace_moves_namespaced_rules_to_a_role() -> None:
    docs = helm.render("slurm-operator", {"slurmSync": {"namespace": "slurm"}})
    cluster, namespaced = _rendered_rules(docs, "slurm-operator-slurm-sync")
    assert cluster | namespaced == _without_leases(rbac.derived_rules("operator"))
    assert {resource for _, resource, _ in cluster} == {"nodes"}, "only cluster-scoped resources stay cluster-wide"
    (role,) = [d for d in docs if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-lease")]
    assert role["metadata"]["namespace"] == "slurm"


def test_operator_chart_given_namespaces_gets_a_role_in_each_instead_of_a_cluster_role() -> None:
    docs = helm.render("slurm-operator", {"slurmSync": {"namespaces": ["hpc-a", "hpc-b"], "namespace": "hpc-b"}})
    cluster, _ = _rendered_rules(docs, "slurm-operator-slurm-sync")
    roles = _roles_by_namespace(docs, "slurm-operator-slurm-sync", "slinky")
    assert set(roles) == {"hpc-a", "hpc-b"}
    derived = _without_leases(rbac.derived_rules("operator"))
    assert {resource for _, resource, _ in cluster} == {"nodes"}
    assert all(rules == {r for r in derived if r[1] not in CLUSTER_SCOPED} for rules in roles.values())
    assert cluster == {r for r in derived if r[1] in CLUSTER_SCOPED}
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "slurm-operator-slurm-sync"
    ]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLURM_SYNC_NAMESPACE"] == "hpc-a,hpc-b"  # slurm_sync lists only where it may


def test_the_derivation_tells_a_status_patch_from_a_metadata_patch() -> None:
    # The bridge patches pod metadata (annotations, labels, finalizers) and, through two methods only, the
    # status field that names a pod's ResourceClaim and the PodScheduled condition of a pod whose job pends; it
    # evicts nothing (nor may its chart grant it).
    import ast

    rules = rbac.derived_rules("bridge")
    assert ("", "pods", "patch") in rules and ("", "pods/status", "patch") in rules
    for path in rbac.component_files("bridge"):
        tree = ast.parse(path.read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            status_writes = [
                n
                for n in ast.walk(function)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("patch_pod_status", "patch_namespaced_pod_status")
            ]
            allowed = ("patch_pod_claim_status", "patch_pod_scheduled")
            assert not status_writes or function.name in allowed, f"{path}: {function.name}"
    assert ("", "pods/eviction", "create") not in rules


def test_the_bridge_claims_devices_with_exactly_the_verbs_it_uses() -> None:
    rules = rbac.derived_rules("bridge")
    assert {r for r in rules if r[0] == "resource.k8s.io"} == {
        ("resource.k8s.io", "resourceclaims", "create"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims", "delete"),
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("resource.k8s.io", "resourceslices", "list"),
    }


def test_bridge_chart_grants_exactly_the_bridge_calls_derived_and_planned() -> None:
    docs = helm.render("slurm-bridge", {"slurmSync": {"enabled": True}}, "slurm-bridge-system")
    cluster, namespaced = _rendered_rules(docs, "slurm-bridge-slurm-sync")
    wanted = rbac.derived_rules("bridge") | rbac.planned_rules("bridge")
    assert cluster | namespaced == _bridge_wide(wanted)
    assert _lease_rules(docs, "slurm-bridge-slurm-sync", "slurm-bridge-system") == wanted - _without_leases(wanted)
    token = _token_role(docs, "slurm-bridge-slurm-sync", "slurm", "slurm-bridge-system")
    assert (
        rbac.expand(token["rules"]) == {r for r in wanted if r[1] in TOKEN_NAMESPACE_ONLY} == {("", "secrets", "get")}
    )


def test_the_bridge_reads_exactly_its_token_secret_and_nothing_else() -> None:
    """Default layout: the Secret is in the Slurm cluster's namespace (slurm); the bridge's slurm_sync may get that
    one Secret there, by name, and no other Secret anywhere: no list, no watch, no other name, no other Role."""
    docs = helm.render("slurm-bridge", {}, "slurm-bridge-system")
    rules = _token_role(docs, "slurm-bridge-slurm-sync", "slurm", "slurm-bridge-system")["rules"]
    assert all(rule["resourceNames"] == [TOKEN_SECRET] for rule in rules)
    assert rbac.allows(rules, "", "secrets", "get", TOKEN_SECRET)
    assert not rbac.allows(rules, "", "secrets", "get", "slurm-auth-jwt"), "the JWT key itself"
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not rbac.allows(rules, "", "secrets", verb, TOKEN_SECRET), verb
    others = [
        d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"] != "slurm-bridge-slurm-sync-token"
    ]
    assert not any(r[1] in TOKEN_NAMESPACE_ONLY for d in others for r in rbac.expand(d["rules"]))


@pytest.mark.parametrize("namespace", ["", "slurm-bridge-system"])
def test_the_bridge_token_in_its_own_namespace_is_mounted_and_needs_no_right(namespace: str) -> None:
    """Slinky's layout: the Secret in the release's namespace is a volume, and slurm_sync gets no Secret right."""
    values = {"sharedConfig": {"slurmJwtSecretNamespace": namespace}, "token": {"create": False}}
    docs = helm.render("slurm-bridge", values, "slurm-bridge-system")
    assert not [d for d in docs if d["metadata"]["name"].endswith("-token") and d["kind"] in ("Role", "RoleBinding")]
    assert not any(r[1] in TOKEN_NAMESPACE_ONLY for d in docs if d["kind"] in ("Role", "ClusterRole")
                   for r in rbac.expand(d["rules"]))  # fmt: skip


def test_bridge_pod_rights_only_in_the_managed_namespaces() -> None:
    docs = helm.render(
        "slurm-bridge",
        {"slurmSync": {"enabled": True}, "admission": {"managedNamespaces": ["team-a", "team-b"]}},
        "slurm-bridge-system",
    )
    cluster, _ = _rendered_rules(docs, "slurm-bridge-slurm-sync")
    roles = _roles_by_namespace(docs, "slurm-bridge-slurm-sync", "slurm-bridge-system")
    assert set(roles) == {"team-a", "team-b"}
    wanted = _bridge_wide(rbac.derived_rules("bridge") | rbac.planned_rules("bridge"))
    assert {resource for _, resource, _ in cluster} == CLUSTER_SCOPED  # no pod, binding or delete right cluster-wide
    assert all(rules == {r for r in wanted if r[1] not in CLUSTER_SCOPED} for rules in roles.values())
    assert ("", "pods", "delete") in roles["team-a"] and ("", "pods/binding", "create") in roles["team-a"]
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "slurm-bridge-slurm-sync"
    ]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLURM_SYNC_MANAGED_NAMESPACES"] == "team-a,team-b"  # the loop works exactly where the Roles are


def test_planned_bridge_calls_are_not_in_the_code_yet() -> None:
    # Once the bridge loop makes one of these calls, the entry must leave `planned` (it is derived now).
    called = {call.method for call in rbac.derived_calls("bridge")}
    assert called & set(rbac.planned_methods("bridge")) == set()


def test_hook_server_needs_no_kubernetes_api() -> None:
    # The hooks' ServiceAccounts get no role and no token; that is only right while hooks/ never
    # imports the Kubernetes client (docs/architecture.md §2: hooks do no network I/O).
    import ast

    for path in sorted(p for package in HOOK_PACKAGES for p in (rbac.REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(m == "kubernetes" or m.startswith("kubernetes.") for m in modules), (
                f"{path} imports the Kubernetes client"
            )
