"""The lab's API server authenticates ServiceAccount tokens and authorizes with RBAC, as kube-apiserver does
(hack/kube/apiserver: auth.go, rbac.go, reviews.go), so the charts' RBAC is exercised as a cluster would:
the operator chart's rules, rendered by the real helm and applied with kubectl into fresh namespaces,
answer `kubectl auth can-i` truly (and the bridge chart's too); a token minted with TokenRequest (as a
kubelet gets a pod's) does what they grant and gets 403 for the rest; editing the Role changes that; a
token outlives neither its ServiceAccount nor the pod it is bound to; the rule matcher's semantics, as a
table of SubjectAccessReviews; RBAC's escalation check. Against the old always-allow server every "no"
here is a yes, and none of TokenRequest, the access reviews or the bootstrap roles exists."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.charts.helm import render
from tests.fixtures.slurm import wait_for
from tests.kube.auth import (
    apply,
    can_i,
    client_as,
    forbidden_message,
    mint_token,
    raw_get,
    service_account_user,
    status_of,
)
from tests.kube.cli import kubectl
from tests.kube.plugin import KubeLab

Obj = dict[str, Any]
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass
class Release:
    """The operator chart's RBAC for slurm_sync, applied: the release's namespace holds the ServiceAccount
    and the Lease Role; ``watched`` is the namespace of a Slurm cluster (slurmSync.namespace)."""

    name: str  # what the chart names slurm_sync's objects (ServiceAccount, ClusterRole, Role, ...)
    namespace: str
    watched: str
    docs: list[Obj]
    directory: Path

    @property
    def user(self) -> str:
        return service_account_user(self.namespace, self.name)

    def doc(self, kind: str, namespace: str | None = None) -> Obj:
        return next(
            d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == self.name
            and d["metadata"].get("namespace") == namespace
        )  # fmt: skip


def new_namespace(api: client.ApiClient) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def watched_namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A second fresh namespace (the lab's garbage collector removes what it held)."""
    name = new_namespace(kube_api)
    yield name
    client.CoreV1Api(kube_api).delete_namespace(name)


def install_rbac(lab: KubeLab, namespace: str, directory: Path, values: Obj) -> tuple[str, list[Obj]]:
    """The operator chart's ServiceAccounts, roles and bindings (helm template), applied with kubectl."""
    release = f"rb{uuid.uuid4().hex[:8]}"  # cluster-scoped names are unique to the test
    docs = [d for d in render("slurm-operator", values, namespace, release=release) if d["kind"] in RBAC_KINDS]
    apply(lab, docs, directory)
    return f"{release}-slurm-operator-slurm-sync", docs


def delete_cluster_scoped(api: client.ApiClient, docs: list[Obj]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    for doc in docs:
        if doc["kind"] == "ClusterRole":
            rbac.delete_cluster_role(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(doc["metadata"]["name"])


@pytest.fixture
def release(
    kube_lab: KubeLab, kube_api, installed_crds, kube_namespace: str, watched_namespace: str, tmp_path: Path
) -> Iterator[Release]:
    name, docs = install_rbac(kube_lab, kube_namespace, tmp_path, {"slurmSync": {"namespace": watched_namespace}})
    r = Release(name, kube_namespace, watched_namespace, docs, tmp_path)
    # the server's RBAC informers see new objects within milliseconds: wait until both bindings are in force
    wait_for(
        lambda: [can_i(kube_lab, r.user, "list", "nodes"), can_i(kube_lab, r.user, "patch", "pods", "-n", r.watched)],
        lambda answers: all(answers),
        timeout=10,
        what="the chart's bindings in force",
    )
    yield r
    delete_cluster_scoped(kube_api, docs)


def make_pod(
    api: client.ApiClient, namespace: str, name: str = "p", service_account: str | None = None
) -> client.V1Pod:
    spec: Obj = {"containers": [{"name": "c", "image": "busybox"}]}
    if service_account:
        spec["serviceAccountName"] = service_account
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    return client.CoreV1Api(api).create_namespaced_pod(namespace, body)


# --- what the chart grants, asked with `kubectl auth can-i --as=<its ServiceAccount>` ------------------


def test_can_i_answers_what_the_operator_charts_rbac_grants(kube_lab: KubeLab, release: Release) -> None:
    """True yes/no pairs from charts/slurm-operator/files/rbac/slurm-sync.yaml as templates/rbac.yaml
    renders it with slurmSync.namespace set: the cluster rules (nodes: list, watch) in a ClusterRole, the
    namespaced ones in a Role in the watched namespace only, the Lease rights in the release's namespace
    (get/update only on the chart's own Lease, by resourceNames), and the bootstrap roles every
    authenticated user has (discovery, self access reviews)."""
    ns, watched, lease = release.namespace, release.watched, f"leases.coordination.k8s.io/{release.name}"
    table = [
        # slurm_sync never deletes or patches Nodes: only its cache lists and watches them
        (("delete", "nodes"), False),
        (("patch", "nodes"), False),
        (("list", "nodes"), True),
        (("watch", "nodes"), True),
        # pods: read and patched in the watched namespace, never deleted, and nothing elsewhere
        (("patch", "pods", "-n", watched), True),
        (("delete", "pods", "-n", watched), False),
        (("patch", "pods", "-n", ns), False),
        (("list", "pods", "--all-namespaces"), False),
        # pods/status is its own resource: patch only
        (("patch", "pods", "--subresource=status", "-n", watched), True),
        (("update", "pods", "--subresource=status", "-n", watched), False),
        (("create", "pods", "--subresource=eviction", "-n", watched), False),
        # each cluster's jwt.key: get, never list
        (("get", "secrets", "-n", watched), True),
        (("list", "secrets", "-n", watched), False),
        (("patch", "nodesets.slinky.slurm.net", "-n", watched), True),
        (("delete", "nodesets.slinky.slurm.net", "-n", watched), False),
        (("patch", "controllers.slinky.slurm.net", "-n", watched), False),
        (("create", "events.events.k8s.io", "-n", watched), True),
        (("create", "events", "-n", watched), False),  # the core group's Events are another resource
        # leader election: create any Lease, get/update only its own, in the release's namespace only
        (("create", "leases.coordination.k8s.io", "-n", ns), True),
        (("update", lease, "-n", ns), True),
        (("update", "leases.coordination.k8s.io/another", "-n", ns), False),
        (("update", lease, "-n", watched), False),
        (("list", "leases.coordination.k8s.io", "-n", ns), False),
        # bootstrap roles of every authenticated user, and nothing else
        (("get", "/apis"), True),
        (("get", "/version"), True),
        (("get", "/metrics"), False),
        (("create", "selfsubjectaccessreviews.authorization.k8s.io"), True),
        (("create", "clusterroles.rbac.authorization.k8s.io"), False),
    ]
    answers = [(args, can_i(kube_lab, release.user, *args)) for args, _ in table]
    assert answers == [(args, want) for args, want in table]
    # another namespace's ServiceAccount of the same name is another user
    assert not can_i(kube_lab, service_account_user(watched, release.name), "list", "nodes")
    # the administrator (system:masters) may do anything
    assert kubectl(kube_lab, "auth", "can-i", "delete", "nodes").stdout.strip() == "yes"


def test_can_i_list_shows_the_service_accounts_rules(kube_lab: KubeLab, release: Release) -> None:
    """SelfSubjectRulesReview (`kubectl auth can-i --list`): the rules that apply in a namespace."""
    proc = kubectl(kube_lab, "auth", "can-i", "--list", "-n", release.watched, f"--as={release.user}")
    assert proc.returncode == 0, proc.stderr
    verbs: dict[str, set[str]] = {}  # resource -> verbs, from rows "RESOURCE  [URLS]  [NAMES]  [VERBS]"
    for line in proc.stdout.splitlines()[1:]:
        if line.strip() and not line.startswith(" "):
            verbs.setdefault(line.split()[0], set()).update(line[line.rindex("[") + 1 : line.rindex("]")].split())
    assert verbs["pods"] == {"get", "list", "watch", "patch"}
    assert verbs["pods/status"] == {"patch"}
    assert verbs["nodes"] == {"list", "watch"}
    assert verbs["nodesets.slinky.slurm.net"] == {"list", "watch", "patch"}
    assert "secrets" in verbs and "leases.coordination.k8s.io" not in verbs  # the Lease Role is in another namespace


def test_the_whole_cluster_mode_grants_pods_in_every_namespace(
    kube_lab: KubeLab, kube_api, installed_crds, kube_namespace: str, tmp_path: Path
) -> None:
    """Without slurmSync.namespace(s), the namespaced rules are in the ClusterRole: any namespace."""
    name, docs = install_rbac(kube_lab, kube_namespace, tmp_path, {})
    user = service_account_user(kube_namespace, name)
    try:
        wait_for(lambda: can_i(kube_lab, user, "patch", "pods", "-n", "default"), bool, timeout=10, what="in force")
        assert can_i(kube_lab, user, "list", "pods", "--all-namespaces")
        assert not can_i(kube_lab, user, "delete", "pods", "-n", "default")
        assert not can_i(kube_lab, user, "delete", "nodes")
    finally:
        delete_cluster_scoped(kube_api, docs)


def test_can_i_answers_what_the_bridge_charts_rbac_grants(
    kube_lab: KubeLab, kube_api, installed_crds, kube_namespace: str, watched_namespace: str, tmp_path: Path
) -> None:
    """charts/slurm-bridge/files/rbac/slurm-sync-bridge.yaml as rendered: the managed namespace's pods (bound,
    patched, deleted), Nodes patched but never deleted, and the one Slurm JWT Secret in the Slurm cluster's
    namespace (by resourceNames)."""
    secret_ns = new_namespace(kube_api)
    release = f"rb{uuid.uuid4().hex[:8]}"
    values = {
        "sharedConfig": {"slurmJwtSecretNamespace": secret_ns},
        "admission": {"managedNamespaces": [watched_namespace], "createManagedNamespaces": False},
        "token": {"create": False},
    }
    docs = [d for d in render("slurm-bridge", values, kube_namespace, release=release) if d["kind"] in RBAC_KINDS]
    apply(kube_lab, docs, tmp_path)
    user = service_account_user(kube_namespace, f"{release}-slurm-bridge-slurm-sync")
    managed, secret = watched_namespace, "secrets/slurm-bridge-token"
    table = [
        (("create", "pods", "--subresource=binding", "-n", managed), True),
        (("create", "pods", "--subresource=binding", "-n", kube_namespace), False),
        (("delete", "pods", "-n", managed), True),
        (("create", "pods", "--subresource=eviction", "-n", managed), False),
        (("patch", "nodes"), True),
        (("delete", "nodes"), False),
        (("list", "resourceslices.resource.k8s.io"), True),
        (("create", "resourceslices.resource.k8s.io"), False),
        (("create", "resourceclaims.resource.k8s.io", "-n", managed), True),
        (("patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-n", managed), True),
        (("update", "resourceclaims.resource.k8s.io", "-n", managed), False),
        (("get", secret, "-n", secret_ns), True),
        (("get", "secrets/another", "-n", secret_ns), False),
        (("get", secret, "-n", managed), False),
        (("list", "secrets", "-n", secret_ns), False),
    ]
    try:
        wait_for(lambda: can_i(kube_lab, user, "patch", "nodes"), bool, timeout=10, what="in force")
        assert [(args, can_i(kube_lab, user, *args)) for args, _ in table] == table
    finally:
        delete_cluster_scoped(kube_api, docs)
        client.CoreV1Api(kube_api).delete_namespace(secret_ns)


# --- a real token of the ServiceAccount -----------------------------------------------------------------


def test_a_minted_token_does_what_the_chart_grants_and_nothing_else(
    kube_lab: KubeLab, kube_api, release: Release
) -> None:
    make_pod(kube_api, release.watched)
    make_pod(kube_api, release.namespace)
    token = mint_token(kube_api, release.namespace, release.name)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    sa = client.CoreV1Api(kube_api).read_namespaced_service_account(release.name, release.namespace)
    assert claims["sub"] == release.user
    assert claims["kubernetes.io"]["namespace"] == release.namespace
    assert claims["kubernetes.io"]["serviceaccount"] == {"name": release.name, "uid": sa.metadata.uid}
    assert claims["iss"] in claims["aud"] and claims["exp"] - claims["iat"] == 3600

    who = json.loads(kubectl(kube_lab, f"--token={token}", "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == release.user
    assert sorted(who["groups"]) == sorted(
        ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}", "system:authenticated"]
    )

    with client_as(kube_lab, token) as api:
        core = client.CoreV1Api(api)
        patch = {"metadata": {"annotations": {"slinky.slurm.net/test": "1"}}}
        assert status_of(lambda: core.list_node()) == 200
        assert status_of(lambda: core.patch_namespaced_pod("p", release.watched, patch)) == 200
        assert status_of(lambda: core.patch_namespaced_pod_status("p", release.watched, {"status": {}})) == 200
        for path in ("/api", "/apis", "/version", "/healthz", "/openapi/v3"):
            assert raw_get(api, path) == 200, path
        assert raw_get(api, "/metrics") == 403

        with pytest.raises(ApiException) as refused:
            core.delete_namespaced_pod("p", release.watched)
        assert refused.value.status == 403
        assert forbidden_message(refused.value) == (
            f'pods "p" is forbidden: User "{release.user}" cannot delete resource "pods" in API group "" '
            f'in the namespace "{release.watched}"'
        )
        with pytest.raises(ApiException) as refused:
            core.delete_node("lab-node-x")
        assert refused.value.status == 403
        assert forbidden_message(refused.value) == (
            f'nodes "lab-node-x" is forbidden: User "{release.user}" cannot delete resource "nodes" in API group "" '
            "at the cluster scope"
        )
        assert status_of(lambda: core.patch_namespaced_pod("p", release.namespace, patch)) == 403
        assert status_of(lambda: core.list_namespaced_secret(release.watched)) == 403
        mint = core.create_namespaced_service_account_token
        assert status_of(lambda: mint(release.name, release.namespace, {})) == 403

    # `kubectl create token` works too, as a user mints one
    proc = kubectl(kube_lab, "create", "token", release.name, "-n", release.namespace, "--duration=20m")
    assert proc.returncode == 0, proc.stderr
    with client_as(kube_lab, proc.stdout.strip()) as api:
        assert status_of(lambda: client.CoreV1Api(api).list_node()) == 200


def test_editing_the_role_revokes_and_restores_a_right(kube_lab: KubeLab, kube_api, release: Release) -> None:
    """kubectl apply of the watched namespace's Role without its pods rule: patching a pod is 403 (as soon as
    the server's informer sees the edit); with the rule back, 200 again."""
    make_pod(kube_api, release.watched)
    token = mint_token(kube_api, release.namespace, release.name)
    role = release.doc("Role", release.watched)
    pods_rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}
    assert pods_rule in role["rules"]
    patch = {"metadata": {"annotations": {"slinky.slurm.net/test": "1"}}}
    with client_as(kube_lab, token) as api:
        core = client.CoreV1Api(api)

        def patch_status() -> int:
            return status_of(lambda: core.patch_namespaced_pod("p", release.watched, patch))

        assert patch_status() == 200
        edited = {**role, "rules": [r for r in role["rules"] if r != pods_rule]}
        apply(kube_lab, [edited], release.directory, "edited.yaml")
        wait_for(patch_status, lambda s: s == 403, timeout=10, what="patch refused without the rule")
        assert status_of(lambda: core.patch_namespaced_pod_status("p", release.watched, {"status": {}})) == 200
        apply(kube_lab, [role], release.directory, "restored.yaml")
        wait_for(patch_status, lambda s: s == 200, timeout=10, what="patch allowed with the rule back")


def test_a_token_outlives_neither_its_service_account_nor_its_pod(
    kube_lab: KubeLab, kube_api, release: Release
) -> None:
    core_admin = client.CoreV1Api(kube_api)
    token = mint_token(kube_api, release.namespace, release.name)
    old_uid = core_admin.read_namespaced_service_account(release.name, release.namespace).metadata.uid
    with client_as(kube_lab, token) as api:
        assert status_of(lambda: client.CoreV1Api(api).list_node()) == 200

    core_admin.delete_namespaced_service_account(release.name, release.namespace)
    apply(kube_lab, [release.doc("ServiceAccount", release.namespace)], release.directory, "sa.yaml")
    new_uid = core_admin.read_namespaced_service_account(release.name, release.namespace).metadata.uid
    assert new_uid != old_uid
    with client_as(kube_lab, token) as api:
        core = client.CoreV1Api(api)
        wait_for(lambda: status_of(core.list_node), lambda s: s == 401, timeout=10, what="the old token refused")
    review = client.AuthenticationV1Api(kube_api).create_token_review({"spec": {"token": token}})
    assert not review.status.authenticated
    assert review.status.error == f"service account UID ({new_uid}) does not match claim ({old_uid})"
    # the bindings name the ServiceAccount, not its uid: a new token of the new one has the same rights
    with client_as(kube_lab, mint_token(kube_api, release.namespace, release.name)) as api:
        assert status_of(lambda: client.CoreV1Api(api).list_node()) == 200

    # a token bound to a pod, as a kubelet asks for one (3607 s: kube-apiserver makes it a year that warns
    # after 3607 s), ends with the pod
    pod = make_pod(kube_api, release.namespace, "bound", service_account=release.name)
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "bound", "uid": pod.metadata.uid}
    bound = mint_token(kube_api, release.namespace, release.name, seconds=3607, bound_to=ref)
    claims = json.loads(base64.urlsafe_b64decode(bound.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["pod"] == {"name": "bound", "uid": pod.metadata.uid}
    assert claims["exp"] - claims["iat"] == 365 * 24 * 3600
    assert claims["kubernetes.io"]["warnafter"] - claims["iat"] == 3607
    who = client.AuthenticationV1Api(kube_api).create_token_review({"spec": {"token": bound}})
    assert who.status.authenticated
    assert who.status.user.extra["authentication.kubernetes.io/pod-name"] == ["bound"]
    core_admin.delete_namespaced_pod("bound", release.namespace)
    with client_as(kube_lab, bound) as api:
        assert status_of(lambda: client.CoreV1Api(api).list_node()) == 401


def test_token_request_refusals_and_audiences(kube_lab: KubeLab, kube_api, release: Release) -> None:
    assert status_of(lambda: mint_token(kube_api, release.namespace, "no-such-account")) == 404
    assert status_of(lambda: mint_token(kube_api, release.namespace, release.name, seconds=60)) == 422
    make_pod(kube_api, release.namespace, "other-sa", service_account="default")
    pod_ref = {"apiVersion": "v1", "kind": "Pod", "name": "other-sa"}
    assert status_of(lambda: mint_token(kube_api, release.namespace, release.name, bound_to=pod_ref)) == 400
    make_pod(kube_api, release.namespace, "own", service_account=release.name)
    stale_ref = {"apiVersion": "v1", "kind": "Pod", "name": "own", "uid": "00000000-0000-0000-0000-000000000000"}
    assert status_of(lambda: mint_token(kube_api, release.namespace, release.name, bound_to=stale_ref)) == 409
    other_kind = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "own"}
    assert status_of(lambda: mint_token(kube_api, release.namespace, release.name, bound_to=other_kind)) == 400

    # a token for another audience is not for the API server; TokenReview for that audience accepts it
    vault = mint_token(kube_api, release.namespace, release.name, audiences=["vault"])
    with client_as(kube_lab, vault) as api:
        assert status_of(lambda: client.CoreV1Api(api).list_node()) == 401
    authn = client.AuthenticationV1Api(kube_api)
    review = authn.create_token_review({"spec": {"token": vault, "audiences": ["vault"]}})
    assert review.status.authenticated and review.status.audiences == ["vault"]
    assert review.status.user.username == release.user
    assert not authn.create_token_review({"spec": {"token": vault}}).status.authenticated


def test_no_credentials_are_anonymous_and_a_bad_token_is_401(kube_lab: KubeLab) -> None:
    """As kube-apiserver's defaults: anonymous requests reach system:public-info-viewer only."""
    with client_as(kube_lab, None) as api:
        assert raw_get(api, "/version") == 200
        assert raw_get(api, "/healthz") == 200
        assert raw_get(api, "/api") == 403  # discovery is for authenticated users
        assert status_of(lambda: client.CoreV1Api(api).list_namespace()) == 403
    with client_as(kube_lab, "not-a-token") as api:
        assert raw_get(api, "/version") == 401
    forged = ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
        for part in ({"alg": "ES256"}, {"iss": "https://kubernetes.default.svc.cluster.local", "sub": "x"}, "sig")
    )
    with client_as(kube_lab, forged) as api:
        assert raw_get(api, "/version") == 401


# --- the rule matcher, through SubjectAccessReview ---------------------------------------------------------


def test_rbac_rule_semantics_through_subject_access_reviews(kube_lab: KubeLab, kube_api, kube_namespace: str) -> None:
    """A table of rules and requests, each answered by a SubjectAccessReview (the authorizer the
    requests meet): verbs and groups with "*", subresources, "*/scale", resourceNames, nonResourceURLs
    with a trailing "*", and User, Group and ServiceAccount subjects of ClusterRoleBindings and of
    RoleBindings granting a ClusterRole in one namespace."""
    tag = uuid.uuid4().hex[:8]
    user, group, ns = f"table-{tag}", f"table-group-{tag}", kube_namespace
    rbac = client.RbacAuthorizationV1Api(kube_api)
    cluster_rules = [
        {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
        {"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["*"]},
        {"nonResourceURLs": ["/logs/*", "/exact"], "verbs": ["get"]},
    ]
    local_rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"], "verbs": ["get", "update", "list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    names = {"cluster": f"table-cluster-{tag}", "local": f"table-local-{tag}"}
    rbac.create_cluster_role({"metadata": {"name": names["cluster"]}, "rules": cluster_rules})
    rbac.create_cluster_role({"metadata": {"name": names["local"]}, "rules": local_rules})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    rbac.create_cluster_role_binding({
        "metadata": {"name": names["cluster"]}, "roleRef": {**ref, "name": names["cluster"]},
        "subjects": [{"kind": "User", "name": user}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": names["local"]}, "roleRef": {**ref, "name": names["local"]},
        "subjects": [{"kind": "Group", "name": group}, {"kind": "ServiceAccount", "name": "builder"}],
    })  # fmt: skip
    authz = client.AuthorizationV1Api(kube_api)

    def allowed(subject: Obj, **attributes: str) -> bool:
        key = "nonResourceAttributes" if "path" in attributes else "resourceAttributes"
        review = authz.create_subject_access_review({"spec": {**subject, key: attributes}})
        return bool(review.status.allowed)

    as_user, as_group = {"user": user}, {"user": "someone", "groups": [group]}
    as_sa = {"user": f"system:serviceaccount:{ns}:builder", "groups": ["system:serviceaccounts"]}
    try:
        wait_for(lambda: allowed(as_group, verb="list", resource="configmaps", namespace=ns, name="one"), bool,
                 timeout=10, what="the bindings in force")  # fmt: skip
        wait_for(lambda: allowed(as_user, verb="update", group="apps", resource="deployments", subresource="scale"),
                 bool, timeout=10, what="the bindings in force")  # fmt: skip
        table = [
            (as_user, {"verb": "update", "group": "apps", "resource": "statefulsets", "subresource": "scale"}, True),
            (as_user, {"verb": "update", "group": "apps", "resource": "statefulsets"}, False),
            (as_user, {"verb": "update", "group": "apps", "resource": "statefulsets", "subresource": "status"}, False),
            (as_user, {"verb": "update", "resource": "replicationcontrollers", "subresource": "scale"}, False),
            (as_user, {"verb": "deletecollection", "resource": "nodes"}, True),
            (as_user, {"verb": "delete", "group": "example.com", "resource": "nodes", "name": "n"}, True),
            (as_user, {"verb": "patch", "resource": "nodes", "subresource": "status"}, False),
            (as_user, {"verb": "get", "path": "/logs/kube-apiserver.log"}, True),
            (as_user, {"verb": "get", "path": "/logs"}, False),
            (as_user, {"verb": "get", "path": "/exact"}, True),
            (as_user, {"verb": "get", "path": "/exact/below"}, False),
            (as_user, {"verb": "post", "path": "/exact"}, False),
            (as_user, {"verb": "get", "resource": "configmaps", "namespace": ns, "name": "one"}, False),
            (as_group, {"verb": "get", "resource": "configmaps", "namespace": ns, "name": "one"}, True),
            (as_group, {"verb": "update", "resource": "configmaps", "namespace": ns, "name": "one"}, True),
            (as_group, {"verb": "get", "resource": "configmaps", "namespace": ns, "name": "two"}, False),
            (as_group, {"verb": "list", "resource": "configmaps", "namespace": ns}, False),  # a list names no object
            (as_group, {"verb": "get", "resource": "configmaps", "namespace": "default", "name": "one"}, False),
            (as_group, {"verb": "get", "resource": "configmaps", "name": "one"}, False),  # not cluster-wide
            (as_group, {"verb": "get", "resource": "pods", "subresource": "log", "namespace": ns, "name": "p"}, True),
            (as_group, {"verb": "get", "resource": "pods", "namespace": ns, "name": "p"}, False),
            (as_sa, {"verb": "get", "resource": "pods", "subresource": "log", "namespace": ns, "name": "p"}, True),
            ({"user": "system:serviceaccount:default:builder"},
             {"verb": "get", "resource": "pods", "subresource": "log", "namespace": ns, "name": "p"}, False),
            ({"user": "nobody", "groups": ["system:masters"]}, {"verb": "delete", "resource": "namespaces"}, True),
        ]  # fmt: skip
        got = [(subject, attributes, allowed(subject, **attributes)) for subject, attributes, _ in table]
        assert got == table
    finally:
        rbac.delete_cluster_role_binding(names["cluster"])
        rbac.delete_cluster_role(names["cluster"])
        rbac.delete_cluster_role(names["local"])


def test_a_user_cannot_grant_rights_it_does_not_hold(kube_lab: KubeLab, kube_api, kube_namespace: str) -> None:
    """RBAC's escalation check on writing roles and bindings (kube's policybased storage)."""
    tag = uuid.uuid4().hex[:8]
    user, ns = f"delegate-{tag}", kube_namespace
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "delegate"}, "rules": [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]})  # fmt: skip
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "delegate"}, "subjects": [{"kind": "User", "name": user}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "delegate"},
    })  # fmt: skip
    wait_for(lambda: can_i(kube_lab, user, "create", "roles.rbac.authorization.k8s.io", "-n", ns), bool, timeout=10,
             what="in force")  # fmt: skip

    def role(name: str, verbs: list[str]) -> Obj:
        return {"metadata": {"name": name}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]}

    with client_as(kube_lab, impersonate=user) as api:
        delegated = client.RbacAuthorizationV1Api(api)
        delegated.create_namespaced_role(ns, role("readers", ["get"]))
        with pytest.raises(ApiException) as refused:
            delegated.create_namespaced_role(ns, role("deleters", ["get", "delete"]))
        assert refused.value.status == 403
        assert forbidden_message(refused.value) == (
            f'roles.rbac.authorization.k8s.io "deleters" is forbidden: user "{user}" (groups=["system:authenticated"]) '
            "is attempting to grant RBAC permissions not currently held:\n"
            '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}'
        )

        def binding(kind: str, name: str) -> Obj:
            return {
                "metadata": {"name": name},
                "subjects": [{"kind": "User", "name": user}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            }

        assert (
            status_of(lambda: delegated.create_namespaced_role_binding(ns, binding("ClusterRole", "cluster-admin")))
            == 403
        )
        assert status_of(lambda: delegated.create_namespaced_role_binding(ns, binding("Role", "readers"))) == 200
