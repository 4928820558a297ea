"""slurm_sync's Kubernetes calls without the generated API classes (slurm_sync/kubeapi.py, issue 30): each sends
exactly the request the official client's generated method sends (method, URL with its query, Content-Type,
body), answers as it does, and starting slurm_sync loads neither those classes nor what else it never runs."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from slurm_sync import kubeapi
from tests.slurm_sync.kubefixtures import api_client

REPO = Path(__file__).resolve().parents[2]
Sent = tuple[str, str, str | None, Any]


class Recorder:
    """A REST layer that answers every request with ``status`` and records what was sent."""

    def __init__(self, status: int = 200, body: bytes = b'{"kind": "Status"}') -> None:
        self.sent: list[Sent] = []
        self.status, self.body = status, body

    def request(self, method: str, url: str, headers: Any = None, body: Any = None, **_: Any) -> Any:
        self.sent.append((method, url, (headers or {}).get("Content-Type"), body))
        answer = Answer(self.status, self.body)
        return client.rest.RESTResponse(answer)


class Answer:
    """What urllib3 answers, as far as the client reads it."""

    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.reason, self.data, self.headers = status, "R", data, {}


def sent_by(call: Callable[[Any], Any], api: Any) -> Sent:
    """(method, URL with its query sorted, Content-Type, body) of the one request ``call`` sends. A Content-Type
    is compared only where the generated client sends one (it sends none with some bodies; ours sends JSON's,
    which the REST layer sends them as)."""
    recorder = Recorder()
    api.api_client.rest_client = recorder
    with contextlib.suppress(ValidationError, ApiException):  # the generated client decoding the answer: sent
        call(api)
    (sent,) = recorder.sent
    method, url, content_type, body = sent
    path, _, query = url.partition("?")
    return method, f"{path}?{'&'.join(sorted(query.split('&')))}", content_type or "application/json", body


BODY = {"metadata": {"labels": {"a": "b"}}}
BINDING = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}}
EVENT = {"metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00+00:00", "reason": "R"}  # as theirs sends it
OPS = [{"op": "remove", "path": "/metadata/ownerReferences/0"}]
PAGE = {"label_selector": "a=b", "limit": 500, "_continue": "tok", "_preload_content": False}
WATCH = {"watch": True, "resource_version": "7", "allow_watch_bookmarks": True, "timeout_seconds": 240}
CASES: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("CoreV1Api", "CoreV1", lambda a: a.list_namespaced_pod("ns", **PAGE)),
    ("CoreV1Api", "CoreV1", lambda a: a.list_namespaced_pod("ns", label_selector="a=b", **WATCH)),
    ("CoreV1Api", "CoreV1", lambda a: a.read_namespaced_pod("p/1", "ns", _preload_content=False)),
    ("CoreV1Api", "CoreV1", lambda a: a.patch_namespaced_pod("p", "ns", BODY, _preload_content=False)),
    ("CoreV1Api", "CoreV1", lambda a: a.patch_namespaced_pod_status("p", "ns", BODY, _preload_content=False)),
    ("CoreV1Api", "CoreV1", lambda a: a.delete_namespaced_pod("p", "ns", body={"preconditions": {"uid": "u"}},
                                                              _preload_content=False, _headers=dict(JSON))),
    ("CoreV1Api", "CoreV1", lambda a: a.create_namespaced_pod_binding("p", "ns", BINDING, _preload_content=False,
                                                                      _headers=dict(JSON))),
    ("CoreV1Api", "CoreV1", lambda a: a.list_namespaced_persistent_volume_claim("ns", label_selector="a=b")),
    ("CoreV1Api", "CoreV1", lambda a: a.patch_namespaced_persistent_volume_claim("c", "ns", OPS)),
    ("CoreV1Api", "CoreV1", lambda a: a.list_node(limit=500, _continue=None, _preload_content=False)),
    ("CoreV1Api", "CoreV1", lambda a: a.patch_node("n", BODY, _preload_content=False)),
    ("CoreV1Api", "CoreV1", lambda a: a.read_namespaced_secret("s", "ns", _preload_content=False)),
    ("CustomObjectsApi", "CustomObjects", lambda a: a.list_cluster_custom_object("g.io", "v1", "things", **PAGE)),
    ("CustomObjectsApi", "CustomObjects", lambda a: a.list_namespaced_custom_object("g.io", "v1", "ns", "things")),
    ("CustomObjectsApi", "CustomObjects",
     lambda a: a.get_namespaced_custom_object("g.io", "v1", "ns", "things", "t", _preload_content=False)),
    ("CustomObjectsApi", "CustomObjects",
     lambda a: a.patch_namespaced_custom_object("g.io", "v1", "ns", "things", "t", BODY, _preload_content=False)),
    ("CustomObjectsApi", "CustomObjects",
     lambda a: a.patch_namespaced_custom_object_status("g.io", "v1", "ns", "things", "t", BODY,
                                                       _content_type="application/merge-patch+json")),
    ("EventsV1Api", "EventsV1", lambda a: a.create_namespaced_event("ns", EVENT, _preload_content=False)),
    ("CoordinationV1Api", "CoordinationV1", lambda a: a.read_namespaced_lease("l", "ns", _request_timeout=5)),
    ("CoordinationV1Api", "CoordinationV1", lambda a: a.create_namespaced_lease("ns", BODY, _preload_content=False)),
    ("CoordinationV1Api", "CoordinationV1", lambda a: a.replace_namespaced_lease("l", "ns", BODY)),
    ("ResourceV1Api", "ResourceV1", lambda a: a.list_resource_slice(field_selector="spec.nodeName=n")),
    ("ResourceV1Api", "ResourceV1", lambda a: a.create_namespaced_resource_claim("ns", BODY, _preload_content=False)),
    ("ResourceV1Api", "ResourceV1", lambda a: a.read_namespaced_resource_claim("c", "ns", _preload_content=False)),
    ("ResourceV1Api", "ResourceV1",
     lambda a: a.patch_namespaced_resource_claim_status("c", "ns", BODY, _content_type="application/merge-patch+json")),
    ("ResourceV1Api", "ResourceV1", lambda a: a.delete_namespaced_resource_claim("c", "ns", body={},
                                                                                 _headers=dict(JSON))),
    ("VersionApi", "Discovery", lambda a: a.get_code(_request_timeout=10)),
    ("CoreApi", "Discovery", lambda a: a.get_api_versions(_preload_content=False)),
]  # fmt: skip
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(("generated", "ours", "call"), CASES)
def test_each_call_sends_what_the_generated_client_sends(generated: str, ours: str, call: Callable[[Any], Any]) -> None:
    theirs = getattr(client, generated)(api_client("http://kube.test"))
    mine = getattr(kubeapi, ours)(api_client("http://kube.test"))
    assert sent_by(call, mine) == sent_by(call, theirs)


def test_an_answer_is_the_generated_clients() -> None:
    recorder = Recorder(body=b'{"items": [1]}')
    api = api_client("http://kube.test")
    api.rest_client = recorder  # type: ignore[assignment]
    assert kubeapi.CoreV1(api).list_node() == {"items": [1]}
    assert orjson.loads(kubeapi.CoreV1(api).list_node(_preload_content=False).data) == {"items": [1]}
    recorder.status, recorder.body = 409, b'{"kind": "Status", "reason": "Conflict"}'
    with pytest.raises(ApiException) as refused:
        kubeapi.CoordinationV1(api).replace_namespaced_lease("l", "ns", BODY, _preload_content=False)
    assert refused.value.status == 409 and "Conflict" in str(refused.value.body)
    with pytest.raises(TypeError, match="unexpected arguments"):
        kubeapi.CoreV1(api).list_node(pretty="true")


def test_starting_slurm_sync_loads_only_what_it_runs() -> None:
    """The generated API classes (their pydantic models), cryptography, the kubernetes package's other
    subpackages, httpx's command line: none is loaded (slurm_sync/__init__.py, docs/architecture.md §7)."""
    code = (
        "import slurm_sync.__main__, slurm_sync.kube, slurm_sync.leader, slurm_sync.bridge.kube, sys; "
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes.client.api.', 'kubernetes.client.models.',"
        " 'cryptography', 'kubernetes.dynamic', 'kubernetes.stream', 'click'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_pyjwt_without_cryptography_signs_and_reads_hs256() -> None:
    """In slurm_sync's process PyJWT runs without its crypto extra: the token slurm_sync mints is the one PyJWT
    with cryptography mints (HS256 is an HMAC either way), and cryptography stays importable for others."""
    claims = {"iat": 1700000000, "exp": 4102444800, "sun": "slurm"}
    code = (
        "import slurm_sync, jwt, sys; from jwt.algorithms import has_crypto; "
        f"token = jwt.encode({claims!r}, b'k' * 32, algorithm='HS256'); "
        "print(has_crypto, token, jwt.decode(token, b'k' * 32, algorithms=['HS256'])['sun']); "
        "import cryptography.hazmat.primitives.serialization"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    lean, token, user = out.split()
    full = subprocess.run(
        [sys.executable, "-c", f"import jwt, jwt.algorithms as a; print(a.has_crypto, jwt.encode({claims!r}, "
         "b'k' * 32, algorithm='HS256'))"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()  # fmt: skip
    assert (lean, user) == ("False", "slurm")
    assert full == ["True", token]
