"""The Kubernetes API as slurm_sync uses it, through the official client.

Reads come back as plain JSON dicts (``_preload_content=False``), the same shape the hooks see,
so the views never depend on the client's model classes. Writes are patches with the smallest
body: strategic merge for pods (the client's default for a dict body), JSON merge for our CRs,
JSON patch (a list body) for a PVC's ownerReferences.

The watch cache (slurm_sync/informer.py) lists a collection page by page (``*_page``) and then
watches it (``watch_*``) through the client's ``Watch``, with events decoded into the same plain
dicts (``DictWatch``).

Every request has a client deadline (``_request_timeout``; a watch brings its own, every other call
gets ``REQUEST_TIMEOUT``), so a stopped API server or a half-open connection fails a call instead of
blocking the pass for as long as the kernel keeps the socket; and each request in flight is recorded
(``Kube.calls``), so readiness names one that hangs before its deadline ends it. A request first takes
a token of the client's rate limit (``--kube-api-qps``/``--kube-api-burst``, slurm_sync/throttle.py); its
deadline, and its place among the calls in flight, start once it may go.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import watch
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from slinky_common import names
from slurm_sync.inflight import InFlight
from slurm_sync.kubeapi import CoreV1, CustomObjects, Discovery, EventsV1
from slurm_sync.shapes import Decode  # a listing page's bytes -> its JSON (the cache's decodes only what it keeps)
from slurm_sync.throttle import TokenBucket

JSON = dict[str, Any]
WriteCounter = Callable[[str, str], None]  # (kind, verb)
PAGE_SIZE = 500  # objects per page of a cache's listing (client-go's default): a bounded peak per request
CONNECT_TIMEOUT = 10.0
READ_MARGIN = 30.0  # a watch silent this long past the server's own timeout is a broken stream
REQUEST_TIMEOUT = 10.0  # seconds, connection to last byte, for every request but a watch, all its tries
RETRIES = 2  # more tries of a request whose connection failed at once, within REQUEST_TIMEOUT
# Connections kept to the API server: the watches' (one each) and the operator loop's pod writers
# (slurm_sync/operator/loop.py, WRITERS) with room; urllib3 opens more when needed, but closes them after.
POOL_SIZE = 32


@dataclass(frozen=True)
class Page:
    """One page of a listing: its objects, the listing's resourceVersion, and the token of the next page."""

    items: list[JSON]
    resource_version: str
    next_token: str  # "" on the last page


class DictWatch(watch.Watch):
    """The client's watch loop (chunk splitting, 410 and error events as ApiException) with each event's
    object kept as the plain dict the views read: the client's model objects cost memory and CPU and
    would change the shape slurm_sync reads."""

    def unmarshal_event(self, data: str, return_type: object) -> JSON | None:
        if not data or data.isspace():
            return None
        event = orjson.loads(data)
        if not isinstance(event, dict):
            raise ValueError(f"a watch event that is not a JSON object: {data[:200]!r}")
        event["raw_object"] = event.get("object")
        return event


def watch_options(resource_version: str, timeout: int) -> dict[str, Any]:
    """A watch from ``resource_version`` that the server ends after ``timeout`` seconds (a normal end: the
    caller watches again from where it is), with bookmarks, and a client read timeout a little longer
    (a connection silent past it is broken). ``timeout_seconds`` also turns off the client's own
    retries, so every re-watch and re-list is the cache's decision."""
    return {
        "resource_version": resource_version,
        "allow_watch_bookmarks": True,
        "timeout_seconds": timeout,
        "_request_timeout": (CONNECT_TIMEOUT, timeout + READ_MARGIN),
    }


def _page(response: Any, decode: Decode = orjson.loads) -> Page:
    body = decode(response.data)
    meta = body.get("metadata") or {}
    return Page(list(body.get("items") or []), str(meta.get("resourceVersion") or ""), str(meta.get("continue") or ""))


@dataclass(frozen=True)
class SecretValue:
    data: bytes
    resource_version: str


def released(response: Any) -> None:
    """A write's answer that nobody reads, read to its end and its connection handed back to the
    client's pool: left unread, it keeps its connection, and the next request opens another (a new
    TCP and TLS handshake with the API server for every write)."""
    response.drain_conn()
    response.release_conn()


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


def _may_retry(method: str, exc: urllib3.exceptions.HTTPError) -> bool:
    """Whether a failed try may be made again: its connection could not be opened (nothing was sent), or a
    read's pooled connection was found closed (what urllib3's own retries were for)."""
    reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return True
    return method in ("GET", "HEAD") and isinstance(reason, urllib3.exceptions.ProtocolError)


class _TimedRest:
    """The client's REST layer with a deadline on every request that brings none, and each request
    recorded in ``calls`` until it is answered (the answer's headers: a body left to read is the caller's,
    and a watch's stream is its own read timeout's).

    The deadline holds in wall time, tries included: urllib3's own retries (three more tries of a read
    that timed out, 40 s for a GET to a stopped API server) are off for this client, and a try that failed
    at once (refused, a stale pooled connection) is made again only within the deadline, at most
    ``RETRIES`` times."""

    def __init__(
        self,
        inner: Any,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        throttle: TokenBucket | None = None,
    ) -> None:
        self._inner = inner
        self.timeout = timeout
        self.calls = InFlight()
        self._clock = clock
        self.throttle = throttle
        pools = getattr(inner, "pool_manager", None)  # the RESTClientObject's, through any wrapper (the fence's)
        if isinstance(pools, urllib3.PoolManager):
            # No try again of urllib3's own; up to 3 redirects are followed, as before.
            pools.connection_pool_kw["retries"] = urllib3.util.Retry(
                None, connect=0, read=0, status=0, other=0, redirect=3
            )
            pools.connection_pool_kw["maxsize"] = max(pools.connection_pool_kw.get("maxsize") or 1, POOL_SIZE)
            pools.clear()  # pools made before (the start's version check) had the default retries

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        method = method.upper()
        if self.throttle is not None:
            self.throttle.wait()
        with self.calls.call(f"{method} {urlsplit(url).path}"):
            if _request_timeout:  # its own (a watch): one try
                return self._inner.request(
                    method, url, headers=headers, body=body, post_params=post_params, _request_timeout=_request_timeout
                )
            deadline = self._clock() + self.timeout
            for tried in itertools.count(1):
                try:
                    return self._inner.request(
                        method,
                        url,
                        headers=headers,
                        body=body,
                        post_params=post_params,
                        _request_timeout=max(deadline - self._clock(), 0.001),
                    )
                except urllib3.exceptions.HTTPError as exc:
                    if tried > RETRIES or not _may_retry(method, exc) or self._clock() >= deadline:
                        raise
            raise AssertionError("unreachable: the last try returns or raises")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def timed_requests(api: ApiClient, timeout: float = REQUEST_TIMEOUT, throttle: TokenBucket | None = None) -> InFlight:
    """Give every request made through ``api`` a deadline (once per client), and a rate limit when
    ``throttle`` is given (the first call with one sets it); its calls in flight."""
    rest: Any = api.rest_client
    if not isinstance(rest, _TimedRest):
        rest = _TimedRest(rest, timeout)
        api.rest_client = rest  # the same request()
    if throttle is not None:
        rest.throttle = throttle
    return rest.calls


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


ChangeMark = tuple[int, int]  # (an informer's generation, a change's number in it): see Informer.mark
ChangeMarks = tuple[ChangeMark | None, ChangeMark | None, ChangeMark | None]  # pods, custom objects, Nodes


class Kube:
    """Typed reads and counted writes over one ``ApiClient``."""

    # Whether a listing hands out the same dict for an object that did not change (a cache does: the
    # views of such objects need not be made again); a listing from the API server never does.
    same_dicts = False

    def __init__(
        self, api: ApiClient, count_write: WriteCounter = lambda kind, verb: None, throttle: TokenBucket | None = None
    ) -> None:
        # every call through ``api`` has a deadline, and hangs are seen; with ``throttle``, a rate limit
        self.calls = timed_requests(api, throttle=throttle)
        self.core = CoreV1(api)
        self.custom = CustomObjects(api)
        self.events = EventsV1(api)
        self.discovery = Discovery(api)
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
        # The listing decoded (no _preload_content=False): the JSON object.
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

    def change_marks(self, namespace: str, labels: dict[str, str], plural: str) -> ChangeMarks | None:
        """Where the pods with ``labels`` and the ``plural`` objects of ``namespace``, and the Nodes, are now, for
        ``changes_since``; None: this reader cannot tell what changed (only a cache can)."""
        return None

    def changes_since(
        self, namespace: str, labels: dict[str, str], plural: str, marks: ChangeMarks | None
    ) -> tuple[list[JSON], list[JSON], list[JSON]] | None:
        """The pods, ``plural`` objects and Nodes (as ``change_marks``) changed since ``marks``; None: unknown."""
        return None

    # --- pages and watches, for the cache (slurm_sync/informer.py) ----------------------------

    def list_pods_page(self, namespace: str, labels: dict[str, str], token: str, decode: Decode = orjson.loads) -> Page:
        return _page(
            self.core.list_namespaced_pod(
                namespace, label_selector=selector(labels), limit=PAGE_SIZE, _continue=token or None,
                _preload_content=False,
            ),
            decode,
        )  # fmt: skip

    def watch_pods(
        self, stream: DictWatch, namespace: str, labels: dict[str, str], resource_version: str, timeout: int
    ) -> Iterator[JSON]:
        return stream.stream(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=selector(labels),
            **watch_options(resource_version, timeout),
        )

    def list_nodes_page(self, token: str, decode: Decode = orjson.loads) -> Page:
        return _page(self.core.list_node(limit=PAGE_SIZE, _continue=token or None, _preload_content=False), decode)

    def watch_nodes(self, stream: DictWatch, resource_version: str, timeout: int) -> Iterator[JSON]:
        return stream.stream(self.core.list_node, **watch_options(resource_version, timeout))

    def list_custom_page(self, plural: str, namespace: str | None, token: str) -> Page:
        paging: dict[str, Any] = {"limit": PAGE_SIZE, "_continue": token or None, "_preload_content": False}
        if namespace is None:
            return _page(self.custom.list_cluster_custom_object(names.GROUP, names.VERSION, plural, **paging))
        return _page(self.custom.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, **paging))

    def watch_custom(
        self, stream: DictWatch, plural: str, namespace: str | None, resource_version: str, timeout: int
    ) -> Iterator[JSON]:
        options = watch_options(resource_version, timeout)
        if namespace is None:
            return stream.stream(self.custom.list_cluster_custom_object, names.GROUP, names.VERSION, plural, **options)
        return stream.stream(
            self.custom.list_namespaced_custom_object, names.GROUP, names.VERSION, namespace, plural, **options
        )

    def heartbeat(self) -> None:
        """The smallest read there is (``GET /api``, the core group's versions, which any identity may
        read): an API server that stopped answering is named by readiness while it is in flight."""
        released(self.discovery.get_api_versions(_preload_content=False))

    def read_secret_key(self, namespace: str, name: str, key: str) -> SecretValue:
        """One key of a Secret, decoded; KeyError when the key is missing."""
        secret = self._json(self.core.read_namespaced_secret(name, namespace, _preload_content=False))
        data = (secret.get("data") or {})[key]
        return SecretValue(base64.b64decode(data), str(secret["metadata"].get("resourceVersion", "")))

    # --- writes ---------------------------------------------------------------------------

    def patch_pod(self, namespace: str, name: str, body: JSON) -> None:
        """Strategic merge patch of a pod's metadata (a dict body makes the client send
        ``application/strategic-merge-patch+json``)."""
        released(self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False))
        self._count("pod", "patch")

    def patch_pod_status(self, namespace: str, name: str, body: JSON) -> None:
        """Strategic merge patch of a pod's status subresource (conditions). A separate method so
        that the RBAC derivation (tests/charts/rbac.py matches wrapper methods by name) grants
        ``pods/status`` only to the code that calls this one."""
        released(self.core.patch_namespaced_pod_status(name, namespace, body, _preload_content=False))
        self._count("pod_status", "patch")

    def annotate_nodeset(self, namespace: str, name: str, key: str, value: str) -> None:
        """JSON merge patch (custom resources have no strategic merge)."""
        body = {"metadata": {"annotations": {key: value}}}
        released(
            self.custom.patch_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, "nodesets", name, body, _preload_content=False
            )
        )
        self._count("nodeset", "patch")

    def patch_pvc(self, namespace: str, name: str, operations: list[JSON]) -> None:
        """JSON patch (a list body makes the client send ``application/json-patch+json``)."""
        released(
            self.core.patch_namespaced_persistent_volume_claim(name, namespace, operations, _preload_content=False)
        )
        self._count("pvc", "patch")

    def create_event(self, namespace: str, body: JSON) -> None:
        """An events.k8s.io/v1 Event (slurm_sync/events.py builds it)."""
        released(
            self.events.create_namespaced_event(
                namespace,
                body,
                _preload_content=False,
            )
        )
        self._count("event", "create")
