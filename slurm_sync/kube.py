"""The Kubernetes API as slurm_sync uses it, through the official client.

Reads come back as plain JSON dicts (``_preload_content=False``), the same shape the hooks see,
so the views never depend on the client's model classes. Writes are patches with the smallest
body: strategic merge for pods (the client's default for a dict body), JSON merge for our CRs,
JSON patch (a list body) for a PVC's ownerReferences.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hooks import names

JSON = dict[str, Any]
WriteCounter = Callable[[str, str], None]  # (kind, verb)


@dataclass(frozen=True)
class SecretValue:
    data: bytes
    resource_version: str


def describe_error(exc: BaseException) -> str:
    """An apiserver answer as ``HTTP <status> <reason>``; anything else (urllib3's MaxRetryError when
    the apiserver is unreachable, a timeout, an unreadable body) by its type and message."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def is_not_found(exc: ApiException) -> bool:
    """The apiserver's own "no such object": 404 with a Status of reason NotFound (a bare 404, say
    from a proxy or a wrong path, is not proof that the object is gone)."""
    if exc.status != 404:
        return False
    try:
        body = orjson.loads(exc.body or b"")
    except (orjson.JSONDecodeError, TypeError):
        return False
    return isinstance(body, dict) and body.get("kind") == "Status" and body.get("reason") == "NotFound"


def pod_gone(kube: Kube, namespace: str, name: str) -> tuple[bool, str]:
    """(gone, error): gone only on the apiserver's NotFound for the pod; error says why it is unknown
    ("" when the pod simply exists). A listing that lacks a pod is no such proof."""
    try:
        kube.read_pod(namespace, name)
    except ApiException as exc:
        return (True, "") if is_not_found(exc) else (False, f"read pod {name}: {describe_error(exc)}")
    except Exception as exc:  # the apiserver unreachable (MaxRetryError ...): unknown
        return False, f"read pod {name}: {describe_error(exc)}"
    return False, ""


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Kube:
    """Typed reads and counted writes over one ``ApiClient``."""

    def __init__(self, api: client.ApiClient, count_write: WriteCounter = lambda kind, verb: None) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events = client.EventsV1Api(api)
        self._count = count_write

    @staticmethod
    def _json(response: Any) -> JSON:
        return orjson.loads(response.data)

    # --- reads ----------------------------------------------------------------------------

    def list_custom(self, plural: str, namespace: str | None) -> list[JSON]:
        if namespace is None:
            body = self.custom.list_cluster_custom_object(names.GROUP, names.VERSION, plural)
        else:
            body = self.custom.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural)
        # The client decodes a custom object listing into the JSON object; its types say object.
        return list(cast(JSON, body).get("items") or [])

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[JSON]:
        response = self.core.list_namespaced_pod(namespace, label_selector=selector(labels), _preload_content=False)
        return list(self._json(response).get("items") or [])

    def read_pod(self, namespace: str, name: str) -> JSON:
        return self._json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    def list_pvcs(self, namespace: str, labels: dict[str, str]) -> list[JSON]:
        response = self.core.list_namespaced_persistent_volume_claim(
            namespace, label_selector=selector(labels), _preload_content=False
        )
        return list(self._json(response).get("items") or [])

    def list_nodes(self) -> list[JSON]:
        return list(self._json(self.core.list_node(_preload_content=False)).get("items") or [])

    def read_secret_key(self, namespace: str, name: str, key: str) -> SecretValue:
        """One key of a Secret, decoded; KeyError when the key is missing."""
        secret = self._json(self.core.read_namespaced_secret(name, namespace, _preload_content=False))
        data = (secret.get("data") or {})[key]
        return SecretValue(base64.b64decode(data), str(secret["metadata"].get("resourceVersion", "")))

    # --- writes ---------------------------------------------------------------------------

    def patch_pod(self, namespace: str, name: str, body: JSON) -> None:
        """Strategic merge patch of a pod's metadata (a dict body makes the client send
        ``application/strategic-merge-patch+json``)."""
        self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False)
        self._count("pod", "patch")

    def patch_pod_status(self, namespace: str, name: str, body: JSON) -> None:
        """Strategic merge patch of a pod's status subresource (conditions). A separate method so
        that the RBAC derivation (tests/charts/rbac.py matches wrapper methods by name) grants
        ``pods/status`` only to the code that calls this one."""
        self.core.patch_namespaced_pod_status(name, namespace, body, _preload_content=False)
        self._count("pod_status", "patch")

    def annotate_nodeset(self, namespace: str, name: str, key: str, value: str) -> None:
        """JSON merge patch (custom resources have no strategic merge)."""
        body = {"metadata": {"annotations": {key: value}}}
        self.custom.patch_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "nodesets", name, body, _preload_content=False
        )
        self._count("nodeset", "patch")

    def patch_pvc(self, namespace: str, name: str, operations: list[JSON]) -> None:
        """JSON patch (a list body makes the client send ``application/json-patch+json``)."""
        self.core.patch_namespaced_persistent_volume_claim(name, namespace, operations, _preload_content=False)
        self._count("pvc", "patch")

    def create_event(self, namespace: str, body: JSON) -> None:
        """An events.k8s.io/v1 Event (slurm_sync/events.py builds it)."""
        self.events.create_namespaced_event(
            namespace,
            body,  # type: ignore[arg-type]  # the client sends a dict body as it is, no model needed
            _preload_content=False,
        )
        self._count("event", "create")
