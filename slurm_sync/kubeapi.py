"""The Kubernetes API calls slurm_sync makes, on the official client's ``ApiClient`` but not its generated
API classes (docs/architecture.md §7, issue 30).

Why: a generated class imports, at its first use, every model of its API group as a pydantic class
(``CoreV1Api`` some 250 of them: 22 MB of slurm_sync's memory and 2 s of CPU) for answers slurm_sync reads
as plain JSON. What stays is the ``ApiClient``: its configuration and authentication, and its REST layer,
which slurm_sync wraps with deadlines (slurm_sync/kube.py) and the write fence (slurm_sync/leader.py).
Each method has the generated one's name, arguments and answer (``_preload_content=False``: the urllib3
response; else the decoded JSON; a status outside 2xx: ``ApiException``), so the client's ``Watch``
streams the listings, and the RBAC derivation (tests/charts/rbac.py) reads the calls as before.
"""

from __future__ import annotations

from typing import Any

import orjson
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

# The generated methods' keyword arguments that become query parameters, and their names on the wire.
QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "watch": "watch",
}
JSON_BODY = "application/json"
# The REST layer sends a dict body with this type as a strategic merge patch, a list as a JSON patch.
PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"  # custom resources know no strategic merge
CORE, CUSTOM = "/api/v1", "/apis/{group}/{version}"


class _Group:
    """One API group's calls over ``api_client``."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    def _call(
        self, method: str, path: str, path_params: dict[str, str], options: dict[str, Any], body: Any = None,
        content_type: str = JSON_BODY,
    ) -> Any:  # fmt: skip
        """One request; ``options`` the generated method's keyword arguments (an unknown one: TypeError)."""
        preload = options.pop("_preload_content", True)
        timeout = options.pop("_request_timeout", None)
        headers = {"Accept": "application/json", "Content-Type": options.pop("_content_type", content_type)}
        headers.update(options.pop("_headers", None) or {})
        unknown = options.keys() - QUERY.keys()
        if unknown:
            raise TypeError(f"{method} {path}: unexpected arguments {sorted(unknown)}")
        query = [(QUERY[key], value) for key, value in options.items() if value is not None]
        request = self.api_client.param_serialize(
            method, path, path_params=path_params, query_params=query, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if not preload:
            return response.response
        return orjson.loads(response.read())


class CoreV1(_Group):
    """The core group's calls (``CoreV1Api``)."""

    def list_namespaced_pod(self, namespace: str, **options: Any) -> Any:
        return self._call("GET", CORE + "/namespaces/{namespace}/pods", {"namespace": namespace}, options)

    def read_namespaced_pod(self, name: str, namespace: str, **options: Any) -> Any:
        return self._call("GET", CORE + "/namespaces/{namespace}/pods/{name}", _named(namespace, name), options)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/pods/{name}"
        return self._call("PATCH", path, _named(namespace, name), options, body, PATCH)

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/pods/{name}/status"
        return self._call("PATCH", path, _named(namespace, name), options, body, PATCH)

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any = None, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/pods/{name}"
        return self._call("DELETE", path, _named(namespace, name), options, body)

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/pods/{name}/binding"
        return self._call("POST", path, _named(namespace, name), options, body)

    def list_namespaced_persistent_volume_claim(self, namespace: str, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/persistentvolumeclaims"
        return self._call("GET", path, {"namespace": namespace}, options)

    def patch_namespaced_persistent_volume_claim(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        path = CORE + "/namespaces/{namespace}/persistentvolumeclaims/{name}"
        return self._call("PATCH", path, _named(namespace, name), options, body, PATCH)

    def list_node(self, **options: Any) -> Any:
        return self._call("GET", CORE + "/nodes", {}, options)

    def patch_node(self, name: str, body: Any, **options: Any) -> Any:
        return self._call("PATCH", CORE + "/nodes/{name}", {"name": name}, options, body, PATCH)

    def read_namespaced_secret(self, name: str, namespace: str, **options: Any) -> Any:
        return self._call("GET", CORE + "/namespaces/{namespace}/secrets/{name}", _named(namespace, name), options)


class CustomObjects(_Group):
    """Custom resources' calls (``CustomObjectsApi``): patches are JSON merge patches."""

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **options: Any) -> Any:
        return self._call("GET", CUSTOM + "/{plural}", _custom(group, version, plural), options)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **options: Any
    ) -> Any:
        path = CUSTOM + "/namespaces/{namespace}/{plural}"
        return self._call("GET", path, {**_custom(group, version, plural), "namespace": namespace}, options)

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **options: Any
    ) -> Any:
        path = CUSTOM + "/namespaces/{namespace}/{plural}/{name}"
        return self._call("GET", path, _custom(group, version, plural, namespace, name), options)

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        path = CUSTOM + "/namespaces/{namespace}/{plural}/{name}"
        return self._call("PATCH", path, _custom(group, version, plural, namespace, name), options, body, MERGE_PATCH)

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any, **options: Any
    ) -> Any:
        path = CUSTOM + "/namespaces/{namespace}/{plural}/{name}/status"
        return self._call("PATCH", path, _custom(group, version, plural, namespace, name), options, body, MERGE_PATCH)


class EventsV1(_Group):
    """events.k8s.io/v1 (``EventsV1Api``)."""

    def create_namespaced_event(self, namespace: str, body: Any, **options: Any) -> Any:
        path = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        return self._call("POST", path, {"namespace": namespace}, options, body)


class CoordinationV1(_Group):
    """coordination.k8s.io/v1 Leases (``CoordinationV1Api``)."""

    PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def read_namespaced_lease(self, name: str, namespace: str, **options: Any) -> Any:
        return self._call("GET", self.PATH + "/{name}", _named(namespace, name), options)

    def create_namespaced_lease(self, namespace: str, body: Any, **options: Any) -> Any:
        return self._call("POST", self.PATH, {"namespace": namespace}, options, body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        return self._call("PUT", self.PATH + "/{name}", _named(namespace, name), options, body)


class ResourceV1(_Group):
    """resource.k8s.io/v1, DRA's claims and slices (``ResourceV1Api``)."""

    CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"

    def list_resource_slice(self, **options: Any) -> Any:
        return self._call("GET", "/apis/resource.k8s.io/v1/resourceslices", {}, options)

    def create_namespaced_resource_claim(self, namespace: str, body: Any, **options: Any) -> Any:
        return self._call("POST", self.CLAIMS, {"namespace": namespace}, options, body)

    def read_namespaced_resource_claim(self, name: str, namespace: str, **options: Any) -> Any:
        return self._call("GET", self.CLAIMS + "/{name}", _named(namespace, name), options)

    def patch_namespaced_resource_claim_status(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        return self._call("PATCH", self.CLAIMS + "/{name}/status", _named(namespace, name), options, body, PATCH)

    def delete_namespaced_resource_claim(self, name: str, namespace: str, body: Any = None, **options: Any) -> Any:
        return self._call("DELETE", self.CLAIMS + "/{name}", _named(namespace, name), options, body)


class Discovery(_Group):
    """What any identity may read: the API server's version (``VersionApi``) and the core group's versions
    (``CoreApi``)."""

    def get_code(self, **options: Any) -> Any:
        return self._call("GET", "/version/", {}, options)

    def get_api_versions(self, **options: Any) -> Any:
        return self._call("GET", "/api/", {}, options)


def _named(namespace: str, name: str) -> dict[str, str]:
    return {"namespace": namespace, "name": name}


def _custom(group: str, version: str, plural: str, namespace: str = "", name: str = "") -> dict[str, str]:
    params = {"group": group, "version": version, "plural": plural}
    return {**params, "namespace": namespace, "name": name} if name else params
