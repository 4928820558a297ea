"""A small Kubernetes REST client for the cluster lab's stand-ins (Metacontroller, controllers, kubelet).

Plain JSON over HTTPS with the lab's kubeconfig: the stand-ins list and write objects as dicts, as
Metacontroller and the hooks see them. Resources are named by (apiVersion, plural), the way
CompositeController manifests name them.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

Obj = dict[str, Any]
TIMEOUT = 10.0


class ApiError(Exception):
    """A non-2xx answer: `status` is the HTTP code, `reason` the Status reason (NotFound, Conflict...)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Resource:
    """A resource as CompositeController manifests name it: apiVersion and plural name."""

    api_version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


PODS = Resource("v1", "pods")
SERVICEACCOUNTS = Resource("v1", "serviceaccounts")
NODES = Resource("v1", "nodes")
SERVICES = Resource("v1", "services")
SECRETS = Resource("v1", "secrets")
CONFIGMAPS = Resource("v1", "configmaps")
PVCS = Resource("v1", "persistentvolumeclaims")
NAMESPACES = Resource("v1", "namespaces")
EVENTS = Resource("v1", "events")
STATEFULSETS = Resource("apps/v1", "statefulsets")
DEPLOYMENTS = Resource("apps/v1", "deployments")


def namespace_of(obj: Obj) -> str | None:
    return obj["metadata"].get("namespace")


class Client:
    """One session to the API server named by a kubeconfig (token or client certificate)."""

    def __init__(self, kubeconfig: str | Path) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = cluster["server"].rstrip("/")
        self.session = requests.Session()
        self.session.trust_env = False  # else REQUESTS_CA_BUNDLE replaces our CA, and proxies apply
        ca = tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False)  # noqa: SIM115 - kept for the session
        self.ca_pem = base64.b64decode(cluster["certificate-authority-data"])  # the kubelet mounts it in pods as ca.crt
        ca.write(self.ca_pem)
        ca.close()
        self.session.verify = ca.name
        self.session.headers["Authorization"] = f"Bearer {user['token']}"
        self.session.headers["Content-Type"] = "application/json"

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                content_type: str | None = None) -> Obj:  # fmt: skip
        headers = {"Content-Type": content_type} if content_type else None
        data = None if body is None else json.dumps(body)
        answer = self.session.request(method, self.server + path, data=data, params=params, headers=headers,
                                      timeout=TIMEOUT)  # fmt: skip
        if answer.status_code >= 300:
            try:
                status = answer.json()
            except ValueError:
                status = {"reason": "", "message": answer.text[:200]}
            raise ApiError(answer.status_code, status.get("reason", ""), status.get("message", ""))
        return answer.json() if answer.content else {}

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj | None:
        """The object, or None on a 404 (an explicit answer that it does not exist)."""
        try:
            return self.request("GET", res.path(namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, res: Resource, namespace: str | None = None, selector: str | None = None) -> list[Obj]:
        params = {"labelSelector": selector} if selector else None
        answer = self.request("GET", res.path(namespace), params=params)
        kind = answer.get("kind", "List").removesuffix("List")
        version = answer.get("apiVersion", res.api_version)
        items = answer.get("items") or []
        for item in items:  # list items carry no kind; Metacontroller's objects do
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", version)
        return items

    def create(self, res: Resource, obj: Obj) -> Obj:
        return self.request("POST", res.path(namespace_of(obj)), obj)

    def update(self, res: Resource, obj: Obj) -> Obj:
        return self.request("PUT", res.path(namespace_of(obj), obj["metadata"]["name"]), obj)

    def update_status(self, res: Resource, obj: Obj) -> Obj:
        return self.request("PUT", res.path(namespace_of(obj), obj["metadata"]["name"], "status"), obj)

    def merge_patch(self, res: Resource, namespace: str | None, name: str, patch: Obj, sub: str | None = None) -> Obj:
        return self.request("PATCH", res.path(namespace, name, sub), patch,
                            content_type="application/merge-patch+json")  # fmt: skip

    def delete(self, res: Resource, namespace: str | None, name: str, grace: int | None = None,
               uid: str | None = None, propagation: str | None = None) -> bool:  # fmt: skip
        """Delete (preconditioned on `uid` when given); False when it was already gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        if uid:
            body["preconditions"] = {"uid": uid}
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            self.request("DELETE", res.path(namespace, name), body)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    def watch(self, res: Resource, resource_version: str, timeout: int = 30) -> Iterator[Obj]:
        """Watch events after `resource_version`, until the server ends the watch."""
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(timeout),
                  "allowWatchBookmarks": "false"}  # fmt: skip
        with self.session.get(self.server + res.path(), params=params, stream=True, timeout=timeout + 10) as answer:
            for line in answer.iter_lines():
                if line:
                    yield json.loads(line)
