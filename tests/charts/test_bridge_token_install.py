"""The bridge's Slurm token in the documented layout on the real API server: charts/slurm installed in one
namespace (the Slurm cluster's), charts/slurm-bridge in another, both with the real helm; then

* the Token CR the bridge chart made sits beside the JWT key charts/slurm made, and the Token hook's answer for
  it (written through the API as Metacontroller would) is the Secret slurm_sync is told to read;
* the Roles and bindings as the API server stored them let the bridge's ServiceAccount get exactly that Secret,
  in that namespace: not the JWT key, not another Secret, no list or watch, nothing in its own namespace (the lab
  authorizes every request, so the stored rules are evaluated as the RBAC authorizer would: tests/charts/rbac.py);
* slurm_sync's token source, configured from the stored Deployment's environment, reads the token across
  namespaces, says what is wrong when the Secret is missing, has no such key or an empty value (the API
  server's own NotFound), and picks up a re-issued token once its read bound has passed;
* `helm uninstall` of the bridge takes its Token and Role out of the Slurm cluster's namespace.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hooks import token as token_hook
from hooks.app import create_app
from slurm_sync import __main__ as cli
from slurm_sync.bridge.token import REFRESH_SECONDS, SecretToken
from slurm_sync.kube import Kube
from slurm_sync.slurm.errors import SlurmNoToken
from tests.charts import rbac
from tests.charts.helm import CHARTS
from tests.kube.cli import run_helm
from tests.kube.kubeapi import GROUP, VERSION
from tests.kube.plugin import KubeLab

Obj = dict[str, Any]
SYNC = "slurm-bridge-slurm-sync"
TOKEN_SECRET, TOKEN_KEY = "slurm-bridge-token", "auth-token"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def as_json(response: Any) -> Obj:
    return orjson.loads(response.data)


@pytest.fixture
def bridge_namespaces(kube_api: client.ApiClient, kube_namespace: str) -> Iterator[tuple[str, str]]:
    """(the bridge's release namespace, its managed namespace): helm and the chart create them; both deleted after."""
    names = (f"{kube_namespace}-bridge", f"{kube_namespace}-jobs")
    yield names
    core = client.CoreV1Api(kube_api)
    for name in names:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def token_answer(token: Obj, key_secret: Obj, namespace: str) -> Obj:
    """The Token hook's child Secret for the stored Token and key Secret, as Metacontroller would apply it."""
    related = {"Secret.v1": {f"{namespace}/{key_secret['metadata']['name']}": key_secret}}
    body = {"controller": {}, "parent": token, "children": {}, "related": related, "finalizing": False}
    answer = create_app().test_client().post("/token/sync", json=body)
    assert answer.status_code == 200, answer.get_json()
    (child,) = [c for c in answer.get_json()["children"] if c["kind"] == "Secret"]
    return dict(child)


def granted(api: client.ApiClient, service_account: tuple[str, str]) -> dict[str | None, list[Obj]]:
    """The rules bound to the ServiceAccount as stored: by namespace (a RoleBinding's), None for cluster-wide."""
    rbac_api = client.RbacAuthorizationV1Api(api)
    namespace, name = service_account

    def bound(binding: Obj) -> bool:
        return any(s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == (namespace, name)
                   for s in binding.get("subjects") or [])  # fmt: skip

    rules: dict[str | None, list[Obj]] = {}
    for binding in as_json(rbac_api.list_cluster_role_binding(_preload_content=False))["items"]:
        if bound(binding):
            role = as_json(rbac_api.read_cluster_role(binding["roleRef"]["name"], _preload_content=False))
            rules.setdefault(None, []).extend(role.get("rules") or [])
    for binding in as_json(rbac_api.list_role_binding_for_all_namespaces(_preload_content=False))["items"]:
        if bound(binding):
            where, ref = binding["metadata"]["namespace"], binding["roleRef"]
            role = as_json(
                rbac_api.read_namespaced_role(ref["name"], where, _preload_content=False)
                if ref["kind"] == "Role"
                else rbac_api.read_cluster_role(ref["name"], _preload_content=False)
            )
            rules.setdefault(where, []).extend(role.get("rules") or [])
    return rules


def may(rules: dict[str | None, list[Obj]], namespace: str, verb: str, name: str = "") -> bool:
    """Whether those rules let the ServiceAccount do ``verb`` on Secret ``name`` in ``namespace``."""
    return rbac.allows(rules.get(None, []) + rules.get(namespace, []), "", "secrets", verb, name)


def test_the_documented_layout_gives_the_bridge_its_token_across_namespaces(
    kube_lab: KubeLab, installed_crds, metacontroller, kube_api: client.ApiClient, kube_namespace: str,
    bridge_namespaces: tuple[str, str],
) -> None:  # fmt: skip
    slurm_ns, (bridge_ns, managed) = kube_namespace, bridge_namespaces
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    run_helm(kube_lab, "install", "slurm", str(CHARTS / "slurm"), "-n", slurm_ns)
    bridge = {"sharedConfig": {"slurmJwtSecretNamespace": slurm_ns}, "admission": {"managedNamespaces": [managed]}}
    run_helm(kube_lab, "install", "slurm-bridge", str(CHARTS / "slurm-bridge"), "-n", bridge_ns, "--create-namespace",
             values=bridge)  # fmt: skip
    try:
        # The Token CR beside charts/slurm's JWT key; Metacontroller's part: the Token hook's Secret, applied.
        token = custom.get_namespaced_custom_object(GROUP, VERSION, slurm_ns, "tokens", "slurm-bridge")
        assert token["spec"]["jwtKeyRef"] == {"name": "slurm-auth-jwt", "key": "jwt.key"}
        assert token["spec"]["secretRef"] == {"name": TOKEN_SECRET, "key": TOKEN_KEY}
        assert token["spec"]["username"] == "slurm"
        key_secret = as_json(core.read_namespaced_secret("slurm-auth-jwt", slurm_ns, _preload_content=False))

        # Exactly that Secret, in that namespace, for slurm_sync's ServiceAccount.
        rules = granted(kube_api, (bridge_ns, SYNC))
        assert may(rules, slurm_ns, "get", TOKEN_SECRET)
        for other in ("slurm-auth-jwt", "slurm-auth-slurm", "another"):
            assert not may(rules, slurm_ns, "get", other), other
        for verb in ("list", "watch", "create", "update", "patch", "delete"):
            assert not may(rules, slurm_ns, verb, TOKEN_SECRET), verb
        for namespace in (bridge_ns, managed, "default"):
            assert not may(rules, namespace, "get", TOKEN_SECRET), namespace

        # slurm_sync as the stored Deployment runs it: --token-secret from its environment.
        deployment = client.AppsV1Api(kube_api).read_namespaced_deployment(SYNC, bridge_ns)
        env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env if e.value}
        assert env["SLURM_SYNC_TOKEN_SECRET"] == f"{slurm_ns}/{TOKEN_SECRET}" and "SLURM_SYNC_TOKEN_FILE" not in env
        args = cli.parse_args(
            [f"--{k.removeprefix('SLURM_SYNC_').lower().replace('_', '-')}={v}" for k, v in env.items()]
        )
        kube = Kube(kube_api)
        tokens = cli.bridge_tokens(args, kube)
        assert isinstance(tokens, SecretToken)
        where = f"--token-secret {slurm_ns}/{TOKEN_SECRET}"
        with pytest.raises(SlurmNoToken, match=f"^{where}: no such Secret"):  # the API server's own NotFound
            tokens()

        issued = token_answer(token, key_secret, slurm_ns)
        core.create_namespaced_secret(slurm_ns, issued)
        first = base64.b64decode(issued["data"][TOKEN_KEY]).decode()
        clock = Clock()
        reading = SecretToken(kube, tokens.namespace, tokens.name, tokens.key, clock=clock)
        assert cli.bridge_tokens(args, kube)() == reading() == first

        # Re-issued (the hook's next token, a lifetime later): served once the bound has passed, not before.
        later = token_hook.now() + 15 * 60
        original_now = token_hook.now
        token_hook.now = lambda: later  # type: ignore[assignment]
        try:
            reissued = token_answer(token, key_secret, slurm_ns)
        finally:
            token_hook.now = original_now  # type: ignore[assignment]
        second = base64.b64decode(reissued["data"][TOKEN_KEY]).decode()
        assert second != first
        core.patch_namespaced_secret(TOKEN_SECRET, slurm_ns, {"data": reissued["data"]})
        clock.now += REFRESH_SECONDS - 1
        assert reading() == first
        clock.now += 1
        assert reading() == second

        for data, problem in (({"other": "eA=="}, f"has no key '{TOKEN_KEY}'"), ({TOKEN_KEY: ""}, "holds no token")):
            core.replace_namespaced_secret(TOKEN_SECRET, slurm_ns, {"metadata": {"name": TOKEN_SECRET}, "data": data})
            clock.now += REFRESH_SECONDS
            with pytest.raises(SlurmNoToken, match=problem):
                reading()
    finally:
        run_helm(kube_lab, "uninstall", "slurm-bridge", "-n", bridge_ns)
        run_helm(kube_lab, "uninstall", "slurm", "-n", slurm_ns)
    # The bridge's objects in the Slurm cluster's namespace went with its release.
    left = custom.list_namespaced_custom_object(GROUP, VERSION, slurm_ns, "tokens")["items"]
    assert left == []
    roles = client.RbacAuthorizationV1Api(kube_api).list_namespaced_role(slurm_ns).items
    assert [r.metadata.name for r in roles] == []
