"""The hook server's HTTP contract (docs/architecture.md §3), through Flask's test client."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import InternalServerError
from werkzeug.test import create_environ, run_wsgi_app

from hooks import contract
from hooks.app import create_app
from hooks.routes import COMPOSITE_KINDS, route_table

NODESET = {
    "apiVersion": "slinky.slurm.net/v1beta1",
    "kind": "NodeSet",
    "metadata": {"name": "slurm-worker-debug", "namespace": "slurm", "uid": "u-1"},
    "spec": {"controllerRef": {"name": "slurm"}, "replicas": 2},
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "slurm"}, "spec": {}}


def _pod_child(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "slurm"}}


def _count_children(req: contract.CompositeRequest) -> dict:
    """A stand-in handler: a pure function of the request that tests can predict."""
    names = [p["metadata"]["name"] for p in req.children_of("Pod.v1")]
    return {"status": {"replicas": len(names)}, "children": [_pod_child(n) for n in names]}


def _valid_request(path: str) -> dict:
    """A minimal valid request for any route."""
    if path.startswith("/bridge/admission/"):
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "r-1", "operation": "CREATE", "namespace": "slurm", "object": POD},
        }
    kind = next(r.kind for r in route_table() if r.path == path)
    obj = NODESET if kind == "NodeSet" else {**NODESET, "kind": kind, "metadata": {"name": "x", "namespace": "slurm"}}
    if path.startswith("/bridge/") and not path.endswith("/customize"):
        return {"object": obj, "attachments": {}, "related": {}, "finalizing": path.endswith("/finalize")}
    if path.endswith("/customize"):
        return {"controller": {}, "parent": obj}
    return {"controller": {}, "parent": obj, "children": {}, "related": {}, "finalizing": path.endswith("/finalize")}


@pytest.fixture()
def client():
    return create_app().test_client()


def _strict_loads(data: bytes):
    def reject(token: str):
        raise ValueError(f"non-strict JSON constant {token}")

    return json.loads(data, parse_constant=reject)


ALL_ROUTES = [r.path for r in route_table()]


def test_every_design_route_is_served():
    expected = {f"/{k}/{h}" for k in COMPOSITE_KINDS for h in ("sync", "customize", "finalize")} | {
        "/bridge/pod/sync",
        "/bridge/pod/customize",
        "/bridge/pod/finalize",
        "/bridge/node/sync",
        "/bridge/node/finalize",
        "/bridge/admission/mutate",
        "/bridge/admission/validate",
    }
    assert set(ALL_ROUTES) == expected
    assert set(COMPOSITE_KINDS) == {"controller", "nodeset", "loginset", "restapi", "accounting", "token"}


@pytest.mark.parametrize("path", ALL_ROUTES)
def test_unbuilt_route_validates_then_answers_501(path):
    client = create_app(handlers={}).test_client()
    assert client.post(path, data="{}").status_code == 400
    resp = client.post(path, json=_valid_request(path))
    assert resp.status_code == 501
    assert path in resp.get_json()["error"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "empty"),
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, got array"),
        (b'{"parent": NaN}', "not valid JSON"),
        (b"{}", "parent is missing"),
        (b'{"parent": []}', "parent must be an object, got array"),
        (
            b'{"parent": {"kind": "Controller", "apiVersion": "slinky.slurm.net/v1beta1", "metadata": {"name": "a"}}}',
            "parent.kind must be 'NodeSet'",
        ),
        (b'{"parent": {"kind": "NodeSet", "apiVersion": "v", "metadata": {"name": ""}}}', "parent.metadata.name"),
        (
            b'{"parent": {"kind": "NodeSet", "apiVersion": "v", "metadata": {"name": "a", "labels": {"x": 1}}}}',
            "parent.metadata.labels",
        ),
        (b'{"parent": {"kind": "NodeSet", "apiVersion": "v", "metadata": {"name": "a"}, "spec": [1]}}', "parent.spec"),
    ],
)
def test_malformed_requests_get_400_naming_the_problem(body, needle):
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    resp = client.post("/nodeset/sync", data=body)
    assert resp.status_code == 400
    assert needle in resp.get_json()["error"]


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("children", [], "children must be an object"),
        ("children", {"Pod.v1": []}, "children['Pod.v1'] must be an object"),
        ("children", {"Pod.v1": {"slurm/p": "pod"}}, "children['Pod.v1']['slurm/p']"),
        ("related", "x", "related must be an object"),
        ("finalizing", "true", "finalizing must be a boolean"),
        ("controller", 3, "controller must be an object"),
    ],
)
def test_wrong_types_in_composite_requests_get_400(field, value, needle):
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    resp = client.post("/nodeset/sync", json={"parent": NODESET, field: value})
    assert resp.status_code == 400
    assert needle in resp.get_json()["error"]


def test_decorator_request_needs_object_not_parent():
    client = create_app(handlers={}).test_client()
    resp = client.post("/bridge/pod/sync", json={"parent": POD})
    assert resp.status_code == 400
    assert resp.get_json() == {"error": "object is missing"}


@pytest.mark.parametrize(
    ("review", "needle"),
    [
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}}, "apiVersion"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}, "request must be an object"),
        (
            {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"operation": "CREATE"}},
            "request.uid",
        ),
        (
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "u", "operation": "PATCH", "object": POD},
            },
            "request.operation",
        ),
        (
            {
                "kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "u", "operation": "CREATE", "object": {**POD, "kind": "Node"}},
            },
            "request.object.kind",
        ),
    ],
)
def test_malformed_admission_reviews_get_400(review, needle):
    resp = create_app(handlers={}).test_client().post("/bridge/admission/mutate", json=review)
    assert resp.status_code == 400
    assert needle in resp.get_json()["error"]


def test_v1_and_v2_child_keys_give_the_same_answer():
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    pods = {"a": _pod_child("a"), "b": _pod_child("b")}
    v1 = client.post("/nodeset/sync", json={"parent": NODESET, "children": {"Pod.v1": pods}})
    v2 = client.post(
        "/nodeset/sync", json={"parent": NODESET, "children": {"Pod.v1": {f"slurm/{k}": v for k, v in pods.items()}}}
    )
    assert v1.status_code == v2.status_code == 200
    assert v1.data == v2.data
    assert v1.get_json()["status"] == {"replicas": 2}


def test_unknown_request_fields_are_tolerated():
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    assert client.post("/nodeset/sync", json={"parent": NODESET, "futureField": 1}).status_code == 200


def test_handler_exception_is_a_500_with_json_never_a_200(caplog):
    def boom(_req):
        raise KeyError("spec")

    resp = create_app(handlers={"/nodeset/sync": boom}).test_client().post("/nodeset/sync", json={"parent": NODESET})
    assert resp.status_code == 500
    assert "/nodeset/sync failed" in resp.get_json()["error"]
    assert "KeyError" in caplog.text


@pytest.mark.parametrize(
    "bad",
    [
        {"status": {}},  # no children list: Metacontroller would delete every child
        {"children": None},
        {"children": [{"kind": "Pod", "metadata": {"name": "a"}}]},
        {"children": [_pod_child("a"), _pod_child("a")]},
        {"children": [], "resyncAfterSeconds": math.nan},
        {"children": [], "resyncAfterSeconds": -1},
        {"children": [], "finalized": "yes"},
        {"children": [], "Children": []},
        {"children": [], "status": []},
    ],
)
def test_responses_metacontroller_would_misread_are_never_sent(bad):
    resp = (
        create_app(handlers={"/nodeset/sync": lambda _r: bad})
        .test_client()
        .post("/nodeset/sync", json={"parent": NODESET})
    )
    assert resp.status_code == 500


def test_bad_decorator_and_customize_responses_are_500():
    app = create_app(
        handlers={
            "/bridge/pod/sync": lambda _r: {"labels": {"a": 1}},
            "/bridge/pod/customize": lambda _r: [{"apiVersion": "v1", "resource": "pods"}],
            "/nodeset/customize": lambda _r: {
                "relatedResources": [{"apiVersion": "v1", "resource": "secrets", "names": ["a"], "labelSelector": {}}]
            },
        }
    )
    client = app.test_client()
    assert client.post("/bridge/pod/sync", json=_valid_request("/bridge/pod/sync")).status_code == 500
    assert client.post("/bridge/pod/customize", json=_valid_request("/bridge/pod/customize")).status_code == 500
    assert client.post("/nodeset/customize", json=_valid_request("/nodeset/customize")).status_code == 500


def test_responses_are_strict_json_and_deterministic():
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    req = {"parent": NODESET, "children": {"Pod.v1": {"slurm/b": _pod_child("b"), "slurm/a": _pod_child("a")}}}
    first, second = client.post("/nodeset/sync", json=req), client.post("/nodeset/sync", json=req)
    assert first.data == second.data
    assert first.mimetype == "application/json"
    assert [c["metadata"]["name"] for c in _strict_loads(first.data)["children"]] == ["a", "b"]


def test_non_post_and_unknown_paths_answer_json_errors(client):
    assert client.get("/nodeset/sync").status_code == 405
    assert client.put("/bridge/pod/sync").get_json() == {"error": "The method is not allowed for the requested URL."}
    assert client.options("/nodeset/sync").headers["Allow"] == "OPTIONS, POST"
    missing = client.post("/nodeset/nope", data="{}")
    assert missing.status_code == 404
    assert "error" in missing.get_json()
    assert client.post("/nodeset/sync/", data="{}").status_code == 404


def test_an_unexpected_failure_outside_the_hook_is_a_json_500(client, monkeypatch):
    def broken(*args):
        raise RuntimeError("metrics backend gone")

    monkeypatch.setattr("hooks.metrics.observe", broken)
    resp = client.post("/nodeset/sync", json={"parent": NODESET})
    assert resp.status_code == 500 and resp.get_json() == {"error": InternalServerError.description}


def test_health_readiness_and_metrics(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    client.post("/token/sync", data="{}")
    client.post("/token/sync", data="{}")
    text = client.get("/metrics").get_data(as_text=True)
    line = next(
        x for x in text.splitlines() if x.startswith('slinky_hook_requests_total{code="400",route="/token/sync"}')
    )
    assert float(line.split()[-1]) >= 2
    assert 'slinky_hook_request_duration_seconds_count{route="/token/sync"}' in text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "parent": JSON_VALUES | st.just(NODESET),
            "children": JSON_VALUES,
            "related": JSON_VALUES,
            "finalizing": JSON_VALUES,
        },
    )
)
def test_arbitrary_bodies_get_400_or_a_computed_answer(body):
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    resp = client.post("/nodeset/sync", data=json.dumps(body))
    assert resp.status_code in (200, 400)
    if resp.status_code == 200:
        req = contract.parse_composite(body, "NodeSet")
        assert resp.get_json() == _count_children(req)


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "requests").glob("*.json"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_requests_get_a_computed_answer(example):
    """What README's `curl -d @examples/requests/<route>.json` shows: never a 400, a 500 or a 501."""
    route = next(r for r in route_table() if r.path.strip("/").replace("/", "-") == example.stem)
    resp = create_app().test_client().post(route.path, data=example.read_bytes())
    assert resp.status_code == 200, resp.get_json()
    _strict_loads(resp.data)


def test_every_served_route_and_no_501_route_has_an_example_request():
    served = {r.path.strip("/").replace("/", "-") for r in route_table() if r.handler is not None}
    assert {p.stem for p in EXAMPLES} == served


def test_nodeset_example_is_a_steady_state():
    """README's first curl shows a healthy cluster: nothing to create, nothing to drain."""
    body = (Path(__file__).resolve().parents[2] / "examples" / "requests" / "nodeset-sync.json").read_bytes()
    resp = create_app().test_client().post("/nodeset/sync", data=body).get_json()
    observed = sorted(json.loads(body)["children"]["Pod.v1"])
    assert sorted(f"slurm/{c['metadata']['name']}" for c in resp["children"] if c["kind"] == "Pod") == observed
    assert resp["status"]["drainingPods"] == []
    assert resp["status"]["updatedReplicas"] == resp["status"]["replicas"] == 2


def test_the_parsed_request_is_freed_before_the_answer_and_nothing_is_hidden_from_the_collector():
    """Holding it until the answer was sent, out of the collector's sight (gc.freeze), leaked every
    request's garbage cycles behind gunicorn (issue 22)."""
    import gc
    import weakref

    kept: list[weakref.ref] = []

    def handler(req):
        kept.append(weakref.ref(req))
        return {"children": []}

    client = create_app(handlers={"/nodeset/sync": handler}).test_client()
    large = {"parent": {**NODESET, "spec": {"padding": "x" * (1 << 20)}}}
    for body in ({"parent": dict(NODESET)}, large):
        resp = client.post("/nodeset/sync", json=body)  # not closed, as a server would before sending
        assert resp.status_code == 200 and kept[-1]() is None
        assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_hook_request_makes_no_reference_cycle_with_its_environ():
    """werkzeug's request puts itself in its environ, which holds the body: a cycle only a collection frees."""
    import gc

    app = create_app(handlers={"/nodeset/sync": _count_children})
    body = json.dumps({"parent": NODESET}).encode()

    def post() -> list[bytes]:  # as a WSGI server calls it (the test client makes cycles of its own)
        environ = create_environ("/nodeset/sync", method="POST", data=body)
        answer = app(environ, lambda status, headers, exc_info=None: None)
        try:
            return list(answer)
        finally:
            answer.close()

    post()
    gc.collect()
    gc.disable()
    try:
        assert json.loads(b"".join(post()))["children"] == []
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_the_garbage_collector_is_paused_during_a_hook_and_back_on_after_it():
    import gc

    seen: list[bool] = []

    def handler(_req):
        seen.append(gc.isenabled())
        return {"children": []}

    def failing(_req):
        raise RuntimeError("boom")

    client = create_app(handlers={"/nodeset/sync": handler, "/loginset/sync": failing}).test_client()
    assert gc.isenabled()
    assert client.post("/nodeset/sync", json={"parent": NODESET}).status_code == 200
    assert seen == [False] and gc.isenabled()
    assert client.post("/loginset/sync", json={"parent": {**NODESET, "kind": "LoginSet"}}).status_code == 500
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off itself keeps it off
    try:
        client.post("/nodeset/sync", json={"parent": NODESET})
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_bearer_token_is_enforced_when_configured(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", str(token))
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    body = {"parent": NODESET}
    assert client.post("/nodeset/sync", json=body).status_code == 401
    wrong = client.post("/nodeset/sync", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Bearer")
    assert "s3cret" not in wrong.get_data(as_text=True)
    assert client.post("/nodeset/sync", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open
    token.write_text("rotated")  # a rotated Secret applies without a restart
    assert client.post("/nodeset/sync", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 401
    assert client.post("/nodeset/sync", json=body, headers={"Authorization": "Bearer rotated"}).status_code == 200


def test_unreadable_token_file_fails_closed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", str(tmp_path / "missing"))
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    resp = client.post("/nodeset/sync", json={"parent": NODESET}, headers={"Authorization": "Bearer x"})
    assert resp.status_code == 503


def test_readiness_is_503_naming_the_token_file_while_every_hook_would_answer_503(tmp_path, monkeypatch):
    """A Ready pod whose every hook answers 503 kept receiving Metacontroller's calls (issue 22)."""
    token = tmp_path / "token"
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", str(token))
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    missing = client.get("/readyz")
    assert (
        missing.status_code == 503 and str(token) in missing.json["reason"] and "cannot read" in missing.json["reason"]
    )
    token.write_text("s3cret")  # the Secret is mounted
    assert client.get("/readyz").status_code == 200
    token.write_text("")
    assert client.get("/readyz").status_code == 503 and "is empty" in client.get("/readyz").json["reason"]
    assert client.get("/healthz").status_code == 200  # alive all along: a restart would not help


@pytest.mark.parametrize("header", ["bearer s3cret", "BEARER s3cret", "Bearer  s3cret", " Bearer s3cret "])
def test_the_bearer_scheme_is_case_insensitive(tmp_path, monkeypatch, header):
    token = tmp_path / "token"
    token.write_text("s3cret")
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", str(token))
    client = create_app(handlers={"/nodeset/sync": _count_children}).test_client()
    assert client.post("/nodeset/sync", json={"parent": NODESET}, headers={"Authorization": header}).status_code == 200
    wrong = {"Authorization": header.replace("s3cret", "s3cre")}
    assert client.post("/nodeset/sync", json={"parent": NODESET}, headers=wrong).status_code == 401


# --- body limit and authentication set-up ---------------------------------------------------------


class CountingStream(io.RawIOBase):
    """A request body of `size` bytes that counts how much of it the server read."""

    def __init__(self, size: int) -> None:
        self.size, self.consumed = size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size - self.consumed)
        buffer[:n] = b" " * n
        self.consumed += n
        return n


def raw_post(app, stream: CountingStream, headers: dict) -> tuple[str, dict]:
    environ = create_environ("/nodeset/sync", method="POST", content_type="application/json")
    environ.pop("CONTENT_LENGTH", None)
    environ.update(headers)
    environ["wsgi.input"] = stream
    body, status, _ = run_wsgi_app(app, environ)
    return status, json.loads(b"".join(body))


def test_a_body_over_the_limit_gets_413_without_being_read(monkeypatch):
    monkeypatch.setenv("HOOKS_MAX_BODY_BYTES", "1000")
    app = create_app(handlers={"/nodeset/sync": _count_children})
    declared = CountingStream(10**9)
    status, body = raw_post(app, declared, {"CONTENT_LENGTH": str(10**9)})
    assert status.startswith("413") and "HOOKS_MAX_BODY_BYTES" in body["error"] and declared.consumed == 0
    streamed = CountingStream(10**8)  # chunked: no Content-Length to judge from
    status, body = raw_post(app, streamed, {"HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True})
    assert status.startswith("413") and streamed.consumed == 1001
    assert app.test_client().post("/nodeset/sync", json={"parent": NODESET}).status_code == 200


def test_the_default_body_limit_fits_a_ten_thousand_pod_nodeset():
    pod = json.loads((Path(__file__).resolve().parents[2] / "examples" / "requests" / "nodeset-sync.json").read_bytes())
    one = len(json.dumps(next(iter(pod["children"]["Pod.v1"].values()))))
    assert 10_000 * one * 2 < create_app().config["HOOKS_MAX_BODY_BYTES"], "pods and as many Nodes (DaemonSet mode)"


@pytest.mark.parametrize("value", ["0", "-1", "64MiB", "1e9"])
def test_a_body_limit_that_is_not_a_positive_byte_count_stops_the_server(monkeypatch, value):
    monkeypatch.setenv("HOOKS_MAX_BODY_BYTES", value)
    with pytest.raises(ValueError, match="HOOKS_MAX_BODY_BYTES"):
        create_app()


def test_auth_token_file_set_but_empty_stops_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", "")
    with pytest.raises(ValueError, match="set but empty"):
        create_app()
    empty = tmp_path / "token"
    empty.write_text("\n")
    monkeypatch.setenv("HOOKS_AUTH_TOKEN_FILE", str(empty))
    with pytest.raises(ValueError, match="is empty"):
        create_app()
