"""Talking to the lab's API server as someone other than its administrator: a ServiceAccount's token
(minted with the TokenRequest API, as a kubelet asks for a pod's token), an impersonated user, or no
credentials at all; and `kubectl auth can-i`, the way a user asks what a ServiceAccount may do."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.kube.cli import kubectl
from tests.kube.plugin import KubeLab

Obj = dict[str, Any]


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def client_as(lab: KubeLab, token: str | None = None, impersonate: str | None = None) -> client.ApiClient:
    """A client of the lab's server with ``token`` (None: no credentials), or the administrator
    impersonating the user ``impersonate``. The caller closes it."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(lab.kubeconfig), client_configuration=configuration)
    if impersonate is None:
        # the kubeconfig loader re-sets the administrator's token before each request through this hook
        configuration.refresh_api_key_hook = None
        configuration.api_key = {"BearerToken": f"Bearer {token}"} if token else {}
        configuration.api_key_prefix = {}
    api = client.ApiClient(configuration)
    if impersonate is not None:
        api.set_default_header("Impersonate-User", impersonate)
    return api


def mint_token(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    audiences: list[str] | None = None,
    seconds: int | None = None,
    bound_to: Obj | None = None,
) -> str:
    """A token of the ServiceAccount from its TokenRequest subresource (``bound_to``: a boundObjectRef)."""
    spec: Obj = {}
    if audiences is not None:
        spec["audiences"] = audiences
    if seconds is not None:
        spec["expirationSeconds"] = seconds
    if bound_to is not None:
        spec["boundObjectRef"] = bound_to
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, body)  # type: ignore[arg-type]  # the client takes dicts too
    assert answer.status is not None and answer.status.token
    return str(answer.status.token)


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status a call gets: 200 when it succeeds, else the server's."""
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def raw_get(api: client.ApiClient, path: str) -> int:
    """GET a path (/api, /version, /metrics, ...) with the client's credentials; its HTTP status."""
    response = api.call_api(*api.param_serialize("GET", path, auth_settings=["BearerToken"]))
    response.read()
    return int(response.status)


def forbidden_message(exc: ApiException) -> str:
    """The message of the server's Status (a 403's: "<resource> ... is forbidden: User ... cannot ...")."""
    return str(json.loads(exc.body or "{}").get("message", ""))


def can_i(lab: KubeLab, user: str, *args: str) -> bool:
    """`kubectl auth can-i ARGS --as=USER`: True for yes, False for no (anything else fails the test)."""
    proc = kubectl(lab, "auth", "can-i", *args, f"--as={user}")
    answer = proc.stdout.strip()
    assert answer in ("yes", "no") and proc.returncode == (0 if answer == "yes" else 1), (
        f"kubectl auth can-i {' '.join(args)} --as={user}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return answer == "yes"


def apply(lab: KubeLab, docs: Iterable[Obj], directory: Path, name: str = "objects.yaml") -> None:
    """`kubectl apply -f` of the objects, as a user applies rendered manifests."""
    path = directory / name
    path.write_text(yaml.safe_dump_all(list(docs)))
    proc = kubectl(lab, "apply", "-f", str(path))
    assert proc.returncode == 0, f"kubectl apply -f {path}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
