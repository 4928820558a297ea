"""The cluster lab's Metacontroller stand-in (hack/cluster/lab/driver.py) against the lab's API server.

The hooks are served in-process on a free port; the project's Token and Controller CompositeControllers are
applied with url webhooks (and a parent label selector unique to the test, so nothing else on the shared
server is touched), and the driver, limited to those two, is run in a thread. They are annotated
driver.PRIVATE, so the lab's own driver, when the lab is up, leaves them to the test's (a real Metacontroller
given to the lab would not: these tests then race it). The Controller's has a finalize hook here (the
shipped manifest has none): a stub that forwards to /controller/sync, answers `finalized: false` with
`resyncAfterSeconds` once, then `finalized: true`.

The bridge's DecoratorControllers are rendered by the real helm from charts/slurm-bridge (as `helm install`
and `helm upgrade --set releaseFinalizers=true` would apply them), their hooks pointed at the same in-process
server and their selectors narrowed to the test's own Nodes and pods (the chart's expressions kept), to prove
docs/operations.md's "Uninstall" step 1: no finalizer of Metacontroller's is left once it is followed, and one
is left for good when the DecoratorControllers are deleted without the release step.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab import driver, kube, setup
from werkzeug.serving import make_server

from hooks.app import create_app
from slinky_common import names
from tests.charts.helm import render
from tests.cluster.plugin import eventually
from tests.kube.cli import kubectl
from tests.kube.kubeapi import stand_in_crd
from tests.kube.plugin import KubeLab
from tests.support.metacontroller_apply import LAST_APPLIED

REPO = Path(__file__).resolve().parents[2]


CRDS = kube.Resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
TOKENS = kube.Resource("slinky.slurm.net/v1beta1", "tokens")
CONTROLLERS = kube.Resource("slinky.slurm.net/v1beta1", "controllers")
SERVICES, CONFIGMAPS, STATEFULSETS = kube.SERVICES, kube.CONFIGMAPS, kube.STATEFULSETS
Obj = dict[str, Any]


# --- pure helpers (no server) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("5s", 5.0), ("1m30s", 90.0), ("250ms", 0.25), ("1.5h", 5400.0), ("0", 0.0)]
)
def test_go_duration(text: str, seconds: float) -> None:
    assert driver.go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "5s3"])
def test_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        driver.go_duration(text)


def test_selector_matches() -> None:
    selector = {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]},
                                                               {"key": "c", "operator": "DoesNotExist"}]}  # fmt: skip
    assert driver.selector_matches(selector, {"a": "1", "b": "x"})
    assert not driver.selector_matches(selector, {"a": "1", "b": "y"})
    assert not driver.selector_matches(selector, {"a": "1", "b": "x", "c": ""})
    assert driver.selector_matches(None, {}) and driver.selector_matches({}, {"any": "thing"})


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"children": [], "status": {}}, None),
        ({"children": None}, None),  # Go reads null as no children (and deletes them all)
        ([], "not a JSON object"),
        ({"children": [], "extra": 1}, "unknown field(s) ['extra']"),
        ({"children": {}}, "children is not a list"),
        ({"children": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}, "a child has no kind or apiVersion"),
        ({"children": [{"apiVersion": "v1", "kind": "Secret", "metadata": {}}]}, "a Secret child has no metadata.name"),
        ({"children": [], "resyncAfterSeconds": True}, "resyncAfterSeconds is not a number"),
        ({"children": [], "finalized": "yes"}, "finalized is not a boolean"),
    ],
)
def test_sync_answer_check(answer: Any, problem: str | None) -> None:
    assert driver._check_sync_answer(answer, strict=True) == problem


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"annotations": {"a": "1", "b": None}, "labels": {}, "finalized": True}, None),
        ({"status": None, "attachments": None}, None),  # null: leave the status, no attachments
        ({"annotations": {"a": 1}}, "annotations is not a map of strings and nulls"),
        ({"labels": []}, "labels is not a map of strings and nulls"),
        ({"children": []}, "unknown field(s) ['children']"),
        ({"attachments": {}}, "attachments is not a list"),
        ({"finalized": "yes"}, "finalized is not a boolean"),
    ],
)
def test_decorate_answer_check(answer: Any, problem: str | None) -> None:
    assert driver._check_decorate_answer(answer, strict=True) == problem


def test_update_strings() -> None:
    """updateStringMap: a value sets, null removes, an absent key stays; whether anything changed."""
    dest = {"keep": "1", "drop": "2", "same": "3"}
    assert driver._update_strings(dest, {"drop": None, "same": "3", "new": "4"})
    assert dest == {"keep": "1", "same": "3", "new": "4"}
    assert not driver._update_strings(dest, {"same": "3", "gone": None})
    assert not driver._update_strings(dest, None)


NODE_API = driver.ApiType(kube.NODES, "Node", namespaced=False, status=True)


def decorator(*rules: driver.ParentRule) -> driver.Decorator:
    hook = driver.Hook("finalize", "http://127.0.0.1:9/f", 5.0, True, None)
    return driver.Decorator(name="dc", obj={}, sync=None, customize=None, finalize=hook, resync=300.0, rules=rules)


def node(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": labels or {},
                                                             "annotations": annotations or {}, **meta}}  # fmt: skip


def test_decorator_selects_by_labels_and_annotations() -> None:
    """Both selectors must match; an absent one selects everything; another kind is never selected."""
    exists = {"matchExpressions": [{"key": "worker", "operator": "Exists"}]}
    dc = decorator(driver.ParentRule(NODE_API, exists, {"matchLabels": {"team": "a"}}, ignore_status=True))
    assert dc.selects(node({"worker": ""}, {"team": "a"}))
    assert not dc.selects(node({"worker": ""}, {"team": "b"})) and not dc.selects(node({}, {"team": "a"}))
    assert not dc.selects({**node({"worker": ""}, {"team": "a"}), "kind": "Pod"})
    assert dc.ignores_status(node()) and dc.finalizer == "metacontroller.io/decoratorcontroller-dc"
    assert decorator(driver.ParentRule(NODE_API, None, None, ignore_status=False)).selects(node())


class FakeDiscovery:
    """Discovery that serves v1 nodes only."""

    def lookup(self, api_version: str, plural: str) -> driver.ApiType:
        assert (api_version, plural) == ("v1", "nodes")
        return NODE_API


def test_decorator_config() -> None:
    """Two rules for one group and kind: the later replaces the earlier (why the bridge has two node
    decorators); attachments and a decorator without hooks are refused."""
    lab = driver.Driver(None)  # type: ignore[arg-type]
    lab._discovery = FakeDiscovery()  # type: ignore[assignment]
    first, second = ({"apiVersion": "v1", "resource": "nodes", "labelSelector": {"matchLabels": {k: "1"}}}
                     for k in ("a", "b"))  # fmt: skip
    (rule,) = lab._parent_rules([first, second])
    assert rule.labels == {"matchLabels": {"b": "1"}}
    webhook = {"version": "v2", "webhook": {"url": "http://127.0.0.1:9/s"}}
    with pytest.raises(driver.ConfigError, match="attachments is not modelled"):
        lab._decorator({"metadata": {"name": "x"}, "spec": {"hooks": {"sync": webhook}, "attachments": [{}]}})
    with pytest.raises(driver.ConfigError, match="no hooks defined"):
        lab._decorator({"metadata": {"name": "x"}, "spec": {"resources": [first]}})


class RecordingClient:
    """The writes _write_decoration makes, each answered with a new resourceVersion."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Obj]] = []

    def update_status(self, res: kube.Resource, obj: Obj) -> Obj:
        return self._answer("update_status", obj)

    def update(self, res: kube.Resource, obj: Obj) -> Obj:
        return self._answer("update", obj)

    def _answer(self, verb: str, obj: Obj) -> Obj:
        self.writes.append((verb, json.loads(json.dumps(obj))))
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(len(self.writes) + 10)}}


def test_write_decoration() -> None:
    """Nothing written when the answer changes nothing; the status through /status first, then one update
    of the version it returned with the labels, annotations and (on `finalized`) the finalizer off."""
    client = RecordingClient()
    lab = driver.Driver(client)  # type: ignore[arg-type]
    dc = decorator(driver.ParentRule(NODE_API, None, None, ignore_status=False))
    parent = {**node({"l": "1"}, {"a": "1"}, resourceVersion="5", finalizers=[dc.finalizer, "other"]),
              "status": {"phase": "x"}}  # fmt: skip
    lab._write_decoration(dc, parent, {"labels": {"l": "1"}, "annotations": {"b": None}, "finalized": False})
    assert client.writes == []
    lab._write_decoration(dc, parent, {"annotations": {"a": None, "b": "2"}, "status": {"phase": "y"},
                                       "finalized": True})  # fmt: skip
    (verb1, status), (verb2, update) = client.writes
    assert (verb1, status["status"], status["metadata"]["resourceVersion"]) == ("update_status", {"phase": "y"}, "5")
    assert verb2 == "update" and update["metadata"]["resourceVersion"] == "11"
    assert update["metadata"]["annotations"] == {"b": "2"} and update["metadata"]["finalizers"] == ["other"]
    assert parent["metadata"]["finalizers"] == [dc.finalizer, "other"], "the synced object itself is not changed"


def test_decorate_request_and_finalized() -> None:
    """An object being deleted goes to the finalize hook with Metacontroller's v2 request; `finalized: true`
    takes the finalizer off (the object already had it: no write before the call)."""
    client = RecordingClient()
    lab = driver.Driver(client)  # type: ignore[arg-type]
    sync = driver.Hook("sync", "http://127.0.0.1:9/s", 5.0, True, None)
    dc = dataclasses.replace(decorator(driver.ParentRule(NODE_API, None, None, ignore_status=False)), sync=sync)
    parent = node(resourceVersion="5", finalizers=[dc.finalizer], deletionTimestamp="2026-01-01T00:00:00Z")
    sent: list[tuple[str, Obj]] = []

    def call(hook: driver.Hook, request: Obj, check: Callable[[Any, bool], str | None]) -> Obj:
        sent.append((hook.name, request))
        return {"finalized": True}

    lab._call = call  # type: ignore[method-assign]
    lab._decorate(dc, parent, driver.Snapshot(client))  # type: ignore[arg-type]
    assert sent == [("finalize", {"controller": {}, "object": parent, "attachments": {}, "related": {},
                                  "finalizing": True})]  # fmt: skip
    ((verb, update),) = client.writes
    assert verb == "update" and update["metadata"]["finalizers"] == []


def test_endpoint_config_matches_by_host() -> None:
    configs = [{"host": "hooks.slinky:8080", "authorization": {}}, {"host": "other"}]
    assert driver._endpoint_config("http://hooks.slinky:8080/x", configs) is configs[0]
    assert driver._endpoint_config("http://other:80/x", configs) is configs[1]
    assert driver._endpoint_config("http://nowhere/x", configs) is None


def test_hook_answers_that_are_refused() -> None:
    """A hook past webhook.timeout, a 200 that is not JSON, an unknown field (v2 reads strictly): HookErrors,
    counted by path and status."""
    stub = Stub("http://127.0.0.1:9")
    lab = driver.Driver(None)  # type: ignore[arg-type]  # calling hooks needs no API server
    try:
        cases = (("slow", 0.3, "no answer within 0.3s"), ("bad", 5.0, "not JSON"), ("extra", 5.0, "unknown field"))
        for path, timeout, message in cases:
            hook = driver.Hook("sync", f"{stub.url}/{path}/sync", timeout, True, None)
            with pytest.raises(driver.HookError, match=message):
                lab._call(hook, {"parent": {}}, driver._check_sync_answer)
        loose = driver.Hook("sync", f"{stub.url}/extra/sync", 5.0, False, None)  # responseUnMarshallMode: loose
        assert lab._call(loose, {}, driver._check_sync_answer) == {"children": [], "surprise": True}
        assert lab.stats()["hook_calls"] == {"/slow/sync": {"timeout": 1}, "/bad/sync": {"200": 1},
                                             "/extra/sync": {"200": 2}}  # fmt: skip
    finally:
        stub.close()


@pytest.mark.parametrize(
    ("webhook", "message"),
    [
        ({"service": {"name": "hooks", "namespace": "slinky"}, "path": "/token/sync"}, "no way to reach Services"),
        ({}, "either a full 'url', or both 'service' and 'path'"),
    ],
)
def test_hook_config_errors(webhook: Obj, message: str) -> None:
    lab = driver.Driver(None)  # type: ignore[arg-type]
    with pytest.raises(driver.ConfigError, match=message):
        lab._hook({"hooks": {"sync": {"version": "v2", "webhook": webhook}}}, "sync")
    with pytest.raises(driver.ConfigError, match="v2 hooks only"):
        lab._hook({"hooks": {"sync": {"webhook": {"url": "http://x/y"}}}}, "sync")


def test_hook_config() -> None:
    lab = driver.Driver(None)  # type: ignore[arg-type]
    webhook = {"url": "http://x:1/a/sync", "timeout": "1m30s"}
    hook = lab._hook({"hooks": {"sync": {"version": "v2", "webhook": webhook}}}, "sync")
    assert hook == driver.Hook("sync", "http://x:1/a/sync", 90.0, True, None) and hook.path == "/a/sync"


def test_a_service_hook_is_called_at_a_ready_endpoint_of_its_service() -> None:
    """As Metacontroller names it (http://<name>.<namespace>:<port><path>), called where a cluster's DNS and
    kube-proxy would connect: the endpoint the resolver gives; none ready is a failed call, not a guess."""
    endpoints = {("slinky", "hooks", 8080): ("10.77.0.12", 8080)}
    lab = driver.Driver(None, resolve=lambda ns, name, port: endpoints.get((ns, name, port)))  # type: ignore[arg-type]
    webhook = {"service": {"name": "hooks", "namespace": "slinky", "port": 8080}, "path": "/token/sync"}
    hook = lab._hook({"hooks": {"sync": {"version": "v2", "webhook": webhook}}}, "sync")
    assert hook is not None and hook.url == "http://hooks.slinky:8080/token/sync"
    assert hook.service == ("slinky", "hooks", 8080) and hook.path == "/token/sync"
    assert lab._dial_url(hook) == "http://10.77.0.12:8080/token/sync"
    endpoints.clear()
    with pytest.raises(driver.HookError, match="Service slinky/hooks port 8080 has no ready endpoint"):
        lab._dial_url(hook)


# --- against the lab's API server -----------------------------------------------------------------


@pytest.fixture(scope="module")
def client(kube_lab: KubeLab) -> kube.Client:
    """The lab client on hack/kube's API server (no Metacontroller or stand-in runs there)."""
    return kube.Client(kube_lab.kubeconfig)


@pytest.fixture(scope="module")
def crds(client: kube.Client) -> None:
    """The project's six CRDs and Metacontroller's two kinds (stand-ins: the repo ships no Metacontroller CRD)."""
    wanted = [doc for path in sorted((REPO / "crds").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    group = "metacontroller.k8s.io"
    wanted += [stand_in_crd(group, "v1alpha1", "CompositeController", "compositecontrollers"),
               stand_in_crd(group, "v1alpha1", "DecoratorController", "decoratorcontrollers")]  # fmt: skip
    for crd in wanted:
        if client.get(CRDS, None, crd["metadata"]["name"]) is None:
            client.create(CRDS, crd)
    for crd in wanted:
        eventually(f"{crd['metadata']['name']} Established", lambda n=crd["metadata"]["name"]: _established(client, n))


def _established(client: kube.Client, name: str) -> bool:
    crd = client.get(CRDS, None, name) or {}
    return any(
        c["type"] == "Established" and c["status"] == "True" for c in crd.get("status", {}).get("conditions", [])
    )


@pytest.fixture(scope="module")
def hooks_url() -> Iterator[str]:
    """The hook server (the same Flask app gunicorn serves) on a free loopback port."""
    server = make_server("127.0.0.1", 0, create_app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(5)


class Stub:
    """Hooks the test controls: /controller/finalize forwards to /controller/sync, not finalized at first and
    finalized when called again; /fail/... answers 500; /prog/sync answers `children` as set by the test."""

    def __init__(self, hooks_url: str) -> None:
        self.requests: list[Obj] = []
        self.children: list[Obj] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith("/fail/"):
                    self._answer(500, {"error": "boom: the stub always fails"})
                    return
                if self.path.startswith("/slow/"):
                    time.sleep(2)
                if self.path.startswith(("/slow/", "/extra/")):
                    self._answer(200, {"children": [], "surprise": True})
                    return
                if self.path.startswith("/bad/"):
                    self._answer(200, "not JSON", raw=True)
                    return
                if self.path.startswith("/prog/"):
                    self._answer(200, {"children": stub.children, "status": {"children": len(stub.children)}})
                    return
                stub.requests.append(body)
                forward = urllib.request.Request(hooks_url + "/controller/sync", data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"})  # fmt: skip
                with urllib.request.urlopen(forward, timeout=5) as answer:
                    out = json.loads(answer.read())
                out["finalized"] = len(stub.requests) > 1
                if not out["finalized"]:
                    out["resyncAfterSeconds"] = 0.5
                self._answer(200, out)

            def _answer(self, code: int, out: Any, raw: bool = False) -> None:
                data = out.encode() if raw else json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def namespace(client: kube.Client, crds: None) -> Iterator[str]:
    name = f"driver-test-{secrets.token_hex(4)}"
    client.create(kube.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for secret, key, value in (("slurm-auth-slurm", "slurm.key", secrets.token_urlsafe(768)),
                               ("slurm-auth-jwt", "jwt.key", secrets.token_hex(32))):  # fmt: skip
        client.create(kube.SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret,
                      "namespace": name}, "stringData": {key: value}})  # fmt: skip
    yield name
    for res in (TOKENS, CONTROLLERS):  # a parent left with our finalizer (a failed test) would hold the namespace
        for obj in client.list(res, name):
            client.merge_patch(res, name, obj["metadata"]["name"], {"metadata": {"finalizers": None}})
    client.delete(kube.NAMESPACES, None, name, propagation="Background")


def composite(kind: str, namespace: str, urls: dict[str, str]) -> Obj:
    """The shipped CompositeController for `kind`, its hooks at `urls`, limited to this test's parents."""
    cc = yaml.safe_load((REPO / "compositecontrollers" / f"{kind}.yaml").read_text())
    cc["metadata"]["name"] = f"{kind}-{namespace}"  # short: the finalizer's name part has 63 bytes at most
    cc["metadata"]["annotations"] = {driver.PRIVATE: "tests/cluster/test_driver.py"}  # not the running lab's driver
    cc["spec"]["parentResource"]["labelSelector"] = {"matchLabels": {"driver-test": namespace}}
    cc["spec"]["hooks"] = {
        hook: {"version": "v2", "webhook": {"url": url, "timeout": "5s"}} for hook, url in urls.items()
    }
    return cc


def example(kind: str, namespace: str) -> Obj:
    obj = yaml.safe_load((REPO / "examples" / "crs" / f"{kind}.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["labels"] = {"driver-test": namespace}
    return obj


KINDS = {"CompositeController": driver.COMPOSITES, "DecoratorController": driver.DECORATORS}


@pytest.fixture
def run_driver(client: kube.Client) -> Iterator[Callable[[list[Obj]], driver.Driver]]:
    """Apply Composite- or DecoratorControllers and start a driver limited to them; stop it and delete them
    afterwards."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    applied: list[Obj] = []

    def start(ccs: list[Obj]) -> driver.Driver:
        for cc in ccs:
            client.create(KINDS[cc["kind"]], cc)
            applied.append(cc)
        lab = driver.Driver(client, logging.getLogger("lab.driver"), only={cc["metadata"]["name"] for cc in ccs})
        threads.append(threading.Thread(target=lab.run, args=(stop,), daemon=True))
        threads[-1].start()
        return lab

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive(), "the driver did not stop"
    for cc in applied:
        client.delete(KINDS[cc["kind"]], None, cc["metadata"]["name"])


def owned_by(client: kube.Client, res: kube.Resource, parent: Obj) -> list[Obj]:
    ns, uid = parent["metadata"]["namespace"], parent["metadata"]["uid"]
    return [o for o in client.list(res, ns) if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))]


def assert_controlled(child: Obj, parent: Obj) -> None:
    (ref,) = child["metadata"]["ownerReferences"]
    assert ref == {"apiVersion": parent["apiVersion"], "kind": parent["kind"], "name": parent["metadata"]["name"],
                   "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    assert child["metadata"]["labels"]["controller-uid"] == parent["metadata"]["uid"]
    assert LAST_APPLIED in child["metadata"]["annotations"]


def versions(client: kube.Client, namespace: str) -> dict[str, str]:
    """resourceVersion of every parent and child in the namespace."""
    out = {}
    for res in (TOKENS, CONTROLLERS, kube.SECRETS, SERVICES, CONFIGMAPS, STATEFULSETS):
        for obj in client.list(res, namespace):
            out[f"{obj['kind']}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return out


def settle(lab: driver.Driver, quiet: float = 2.0, timeout: float = 15.0) -> dict[str, int]:
    """Wait until the driver has written nothing for `quiet` seconds; its write counts then."""
    deadline = time.monotonic() + timeout
    last, since = lab.stats()["writes"], time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"the driver kept writing: {lab.stats()}"
        time.sleep(0.25)
        now = lab.stats()["writes"]
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_driver_runs_token_and_controller(client: kube.Client, namespace: str, hooks_url: str, run_driver) -> None:
    stub = Stub(hooks_url)
    try:
        token_cc = composite("token", namespace, {"sync": f"{hooks_url}/token/sync",
                                                  "customize": f"{hooks_url}/token/customize"})  # fmt: skip
        controller_cc = composite("controller", namespace, {"sync": f"{hooks_url}/controller/sync",
                                                            "customize": f"{hooks_url}/controller/customize",
                                                            "finalize": f"{stub.url}/controller/finalize"})  # fmt: skip
        controller = example("controller", namespace)
        del controller["spec"]["accountingRef"]  # no Accounting here: its absence would hold the children back
        client.create(TOKENS, example("token", namespace))
        client.create(CONTROLLERS, controller)
        lab = run_driver([token_cc, controller_cc])

        # Token -> its Secret, owned as Metacontroller owns children; the status through /status.
        token = client.get(TOKENS, namespace, "slurm-token-slurm")
        secret = eventually("the Token's Secret", lambda: client.get(kube.SECRETS, namespace, "slurm-token-slurm"))
        assert_controlled(secret, token)
        assert secret["data"]["SLURM_JWT"]
        token = eventually("Token status", lambda: _with_status(client.get(TOKENS, namespace, "slurm-token-slurm")))
        assert token["status"]["observedGeneration"] == token["metadata"]["generation"]

        # Controller -> StatefulSet, Services, ConfigMap; our finalizer because it has a finalize hook.
        controller = client.get(CONTROLLERS, namespace, "slurm")
        for res in (STATEFULSETS, SERVICES, CONFIGMAPS):
            for child in eventually(f"the Controller's {res.plural}", lambda r=res: owned_by(client, r, controller)):
                assert_controlled(child, controller)
        controller = eventually("Controller status", lambda: _with_status(client.get(CONTROLLERS, namespace, "slurm")))
        assert controller["status"]["observedGeneration"] == controller["metadata"]["generation"]
        assert (
            f"metacontroller.io/compositecontroller-{controller_cc['metadata']['name']}"
            in controller["metadata"]["finalizers"]
        )

        # A fixed point: once settled, no write and no resourceVersion change for 5 s.
        writes = settle(lab)
        before = versions(client, namespace)
        time.sleep(5)
        assert lab.stats()["writes"] == writes
        assert versions(client, namespace) == before
        calls = lab.stats()["hook_calls"]
        assert calls["/token/sync"]["200"] >= 1 and calls["/controller/sync"]["200"] >= 1, calls

        # Deleting the Controller: finalize is called (finalizing, with its children), then the finalizer goes.
        client.delete(CONTROLLERS, namespace, "slurm")
        eventually("the Controller gone", lambda: client.get(CONTROLLERS, namespace, "slurm") is None)
        assert len(stub.requests) >= 2
        assert all(r["finalizing"] is True for r in stub.requests)
        assert stub.requests[0]["children"]["StatefulSet.apps/v1"], "finalize saw no StatefulSet"
        assert lab.stats()["hook_calls"]["/controller/finalize"]["200"] >= 2
    finally:
        stub.close()


def test_failing_hook_writes_nothing(client: kube.Client, namespace: str, hooks_url: str, run_driver,
                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    stub = Stub(hooks_url)
    try:
        cc = composite(
            "token", namespace, {"sync": f"{stub.url}/fail/sync", "customize": f"{hooks_url}/token/customize"}
        )
        client.create(TOKENS, example("token", namespace))
        with caplog.at_level(logging.WARNING, logger="lab.driver"):
            lab = run_driver([cc])
            eventually("two failed calls", lambda: lab.stats()["hook_calls"].get("/fail/sync", {}).get("500", 0) >= 2)
        assert client.get(kube.SECRETS, namespace, "slurm-token-slurm") is None
        assert "status" not in client.get(TOKENS, namespace, "slurm-token-slurm")
        assert lab.stats()["writes"] == {}, lab.stats()
        failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert failures and all("500" in m and "boom" in m for m in failures), failures
    finally:
        stub.close()


def _with_status(obj: Obj | None) -> Obj | None:
    return obj if obj and "status" in obj else None


def test_update_strategies_adoption_and_deletion(client: kube.Client, namespace: str, hooks_url: str,
                                                 run_driver) -> None:  # fmt: skip
    """InPlace updates in place, Recreate deletes and creates anew, OnDelete leaves the child; a matching orphan
    is adopted; a child left out of the answer is deleted."""
    stub = Stub(hooks_url)
    try:
        cc = composite("token", namespace, {"sync": f"{stub.url}/prog/sync"})
        cc["spec"]["childResources"] = [
            {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}},
            {"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "Recreate"}},
            {"apiVersion": "v1", "resource": "serviceaccounts", "updateStrategy": {"method": "OnDelete"}},
        ]
        parent = client.create(TOKENS, {**example("token", namespace), "metadata": {
            "name": "prog", "namespace": namespace, "labels": {"driver-test": namespace}}})  # fmt: skip
        uid = parent["metadata"]["uid"]
        orphan_meta = {"name": "orphan", "namespace": namespace, "labels": {"controller-uid": uid}}
        orphan = client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": orphan_meta,
                                            "data": {"o": "1"}})  # fmt: skip

        def child(kind: str, name: str, **fields: Any) -> Obj:
            return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, **fields}

        stub.children = [child("ConfigMap", "cm", data={"a": "1"}), child("Secret", "sec", stringData={"x": "1"}),
                         child("ServiceAccount", "sa"), child("ConfigMap", "orphan", data={"o": "1"})]  # fmt: skip
        run_driver([cc])
        first = {
            (res.plural, name): eventually(
                f"{name} owned", lambda r=res, n=name: _owned(client.get(r, namespace, n), uid)
            )
            for res, name in ((CONFIGMAPS, "cm"), (kube.SECRETS, "sec"), (SA, "sa"), (CONFIGMAPS, "orphan"))
        }
        assert first[("configmaps", "orphan")]["metadata"]["uid"] == orphan["metadata"]["uid"]  # adopted, not made anew

        stub.children = [child("ConfigMap", "cm", data={"a": "2"}), child("Secret", "sec", stringData={"x": "2"}),
                         child("ServiceAccount", "sa", automountServiceAccountToken=False)]  # fmt: skip
        cm = eventually("cm updated", lambda: _where(client.get(CONFIGMAPS, namespace, "cm"), data={"a": "2"}))
        assert cm["metadata"]["uid"] == first[("configmaps", "cm")]["metadata"]["uid"]
        sec = eventually(
            "sec recreated", lambda: _owned(client.get(kube.SECRETS, namespace, "sec"), uid, renewed=first)
        )
        assert base64.b64decode(sec["data"]["x"]) == b"2"
        eventually("orphan deleted", lambda: client.get(CONFIGMAPS, namespace, "orphan") is None)
        sa = client.get(SA, namespace, "sa")
        assert sa["metadata"]["resourceVersion"] == first[("serviceaccounts", "sa")]["metadata"]["resourceVersion"]
        assert "automountServiceAccountToken" not in sa
    finally:
        stub.close()


SA = kube.Resource("v1", "serviceaccounts")


def _owned(obj: Obj | None, uid: str, renewed: dict | None = None) -> Obj | None:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences", [])
    if not any(r["uid"] == uid and r.get("controller") for r in refs):
        return None
    if renewed and obj["metadata"]["uid"] == renewed[("secrets", obj["metadata"]["name"])]["metadata"]["uid"]:
        return None
    return obj


def _where(obj: Obj | None, **fields: Any) -> Obj | None:
    return obj if obj and all(obj.get(k) == v for k, v in fields.items()) else None


# --- the bridge's DecoratorControllers, and uninstalling the bridge ----------------------------------


def bridge_decorators(namespace: str, hooks_url: str, release_finalizers: bool = False) -> list[Obj]:
    """charts/slurm-bridge's DecoratorControllers as the real helm renders them, hooks at `hooks_url`, each
    selector narrowed to this test's objects (label driver-test=<namespace>, the chart's expressions kept)."""
    release = f"drv-{namespace.rpartition('-')[2]}"  # short: the finalizer's name part has 63 bytes at most
    values = {"releaseFinalizers": release_finalizers}
    out = []
    for doc in render("slurm-bridge", values, "slurm-bridge-system", release=release):
        if doc["kind"] != "DecoratorController":
            continue
        dc = setup.with_url_webhooks(doc, hooks_url)
        dc["metadata"]["annotations"][driver.PRIVATE] = "tests/cluster/test_driver.py"
        for rule in dc["spec"]["resources"]:
            rule["labelSelector"].setdefault("matchLabels", {})["driver-test"] = namespace
        out.append(dc)
    return out


def finalizer_of(dcs: list[Obj], suffix: str) -> str:
    (name,) = (d["metadata"]["name"] for d in dcs if d["metadata"]["name"].endswith(suffix))
    return f"metacontroller.io/decoratorcontroller-{name}"


@pytest.fixture
def bridge_objects(client: kube.Client, namespace: str) -> Iterator[Callable[..., Obj]]:
    """Make this test's labelled Nodes and managed pods; afterwards take every finalizer off them and delete
    them (a failed test must not leave them Terminating on the shared server). Request it before run_driver,
    so this runs once the driver is stopped and cannot put a finalizer back."""
    made: list[tuple[kube.Resource, str | None, str]] = []

    def make(kind: str, name: str, labels: dict[str, str]) -> Obj:
        labels = {**labels, "driver-test": namespace}
        if kind == "Node":
            obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{namespace}-{name}", "labels": labels}}
            res, ns = kube.NODES, None
        else:
            obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                   "labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
            res, ns = kube.PODS, namespace
        made.append((res, ns, obj["metadata"]["name"]))
        return client.create(res, obj)

    yield make
    for res, ns, name in made:
        if client.get(res, ns, name) is not None:
            client.merge_patch(res, ns, name, {"metadata": {"finalizers": None}})
            client.delete(res, ns, name)


def finalizers_of(client: kube.Client, res: kube.Resource, obj: Obj) -> list[str] | None:
    """The object's finalizers now ([] when it has none), None once it is gone."""
    live = client.get(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
    return None if live is None else live["metadata"].get("finalizers", [])


def held(client: kube.Client, res: kube.Resource, obj: Obj, finalizer: str) -> bool:
    """Deleted, still there, and held by `finalizer`."""
    live = client.get(res, obj["metadata"].get("namespace"), obj["metadata"]["name"]) or {"metadata": {}}
    return bool(live["metadata"].get("deletionTimestamp")) and finalizer in live["metadata"].get("finalizers", [])


WORKER = {names.LABEL_BRIDGE_WORKER: "worker"}
MANAGED = {names.LABEL_BRIDGE_MANAGED: "true"}


def test_decorator_follows_a_node_into_and_out_of_the_bridge(client: kube.Client, namespace: str, hooks_url: str,
                                                             bridge_objects, run_driver) -> None:  # fmt: skip
    """A labelled Node gets the worker decorator's finalizer and the sync hook's annotation, then the driver is
    at a fixed point (no hook call, no write); once the Node loses the label, the finalize hook (finalizing:
    not deleted, no longer selected) withdraws the annotation and releases the Node."""
    dcs = bridge_decorators(namespace, hooks_url)
    finalizer = finalizer_of(dcs, "-node-worker")
    name = bridge_objects("Node", "in-out", WORKER)["metadata"]["name"]
    lab = run_driver(dcs)
    live = eventually("the worker finalizer", lambda: _with_finalizer(client.get(kube.NODES, None, name), finalizer))
    assert live["metadata"]["annotations"][names.ANNOTATION_DESIRED_TAINT].endswith(":NoExecute")
    writes, calls = settle(lab), lab.stats()["hook_calls"]
    time.sleep(3)
    assert lab.stats()["writes"] == writes and lab.stats()["hook_calls"] == calls, "no hook call, no write"
    assert "/bridge/node/finalize" not in calls

    labels = {k: v for k, v in live["metadata"]["labels"].items() if k != names.LABEL_BRIDGE_WORKER}
    client.merge_patch(kube.NODES, None, name, {"metadata": {"labels": {names.LABEL_BRIDGE_WORKER: None}}})
    left = eventually("the Node released", lambda: _without_finalizer(client.get(kube.NODES, None, name), finalizer))
    assert names.ANNOTATION_DESIRED_TAINT not in left["metadata"].get("annotations", {})
    assert left["metadata"]["labels"] == labels
    assert lab.stats()["hook_calls"]["/bridge/node/finalize"]["200"] >= 1


def _with_finalizer(obj: Obj | None, finalizer: str) -> Obj | None:
    return obj if obj and finalizer in obj["metadata"].get("finalizers", []) else None


def _without_finalizer(obj: Obj | None, finalizer: str) -> Obj | None:
    return obj if obj and finalizer not in obj["metadata"].get("finalizers", []) else None


def test_uninstall_procedure_leaves_no_finalizer(client: kube.Client, kube_lab: KubeLab, namespace: str,
                                                 hooks_url: str, bridge_objects, run_driver) -> None:  # fmt: skip
    """docs/operations.md, "Uninstall", step 1, with the chart's own DecoratorControllers: the driver puts the
    decorators' finalizers on a labelled Node and two managed pods; a deleted pod whose Slurm job is not
    released stays Terminating; `releaseFinalizers=true` (the same controllers without finalize hooks, applied
    as `helm upgrade` would) takes every finalizer off, which lets that pod go, and the docs' kubectl check
    finds none; once the DecoratorControllers are deleted (`helm uninstall`), the Node and the other pod are
    deleted at once."""
    dcs = bridge_decorators(namespace, hooks_url)
    worker, pod_finalizer = finalizer_of(dcs, "-node-worker"), finalizer_of(dcs, "-pod")
    node = bridge_objects("Node", "worker", WORKER)
    with_job = bridge_objects("Pod", "with-job", {**MANAGED, names.LABEL_SLURM_JOB_ID: "4242"})
    idle = bridge_objects("Pod", "idle", MANAGED)
    lab = run_driver(dcs)
    for res, obj, finalizer in (
        (kube.NODES, node, worker),
        (kube.PODS, with_job, pod_finalizer),
        (kube.PODS, idle, pod_finalizer),
    ):
        eventually(
            f"{finalizer} on {obj['metadata']['name']}",
            lambda r=res, o=obj, f=finalizer: f in (finalizers_of(client, r, o) or []),
        )

    client.delete(kube.PODS, namespace, "with-job")  # its job 4242 not released by slurm_sync: finalize holds it
    eventually("the pod with a job held", lambda: held(client, kube.PODS, with_job, pod_finalizer))
    time.sleep(3)
    assert held(client, kube.PODS, with_job, pod_finalizer)
    assert lab.stats()["hook_calls"]["/bridge/pod/finalize"]["200"] >= 1

    started = time.monotonic()
    upgrade = bridge_decorators(namespace, hooks_url, release_finalizers=True)  # --set releaseFinalizers=true
    for dc in upgrade:
        live = client.get(driver.DECORATORS, None, dc["metadata"]["name"])
        client.update(driver.DECORATORS, {**live, "spec": dc["spec"]})
    eventually("the held pod gone", lambda: client.get(kube.PODS, namespace, "with-job") is None)
    for res, obj in ((kube.NODES, node), (kube.PODS, idle)):
        eventually(f"no finalizer on {obj['metadata']['name']}", lambda r=res, o=obj: finalizers_of(client, r, o) == [])
    released = time.monotonic() - started
    assert released < 10, f"releaseFinalizers took {released:.1f}s"
    check = kubectl(kube_lab, "get", "nodes,pods", "-A",
                    "-o", "custom-columns=KIND:.kind,NAME:.metadata.name,FINALIZERS:.metadata.finalizers")  # fmt: skip
    assert check.returncode == 0, check.stderr
    ours = [finalizer_of(dcs, suffix) for suffix in ("-node-worker", "-node-external", "-pod")]
    assert not [line for line in check.stdout.splitlines() if any(f in line for f in ours)]  # the docs' check

    for dc in dcs:  # helm uninstall
        client.delete(driver.DECORATORS, None, dc["metadata"]["name"])
    client.delete(kube.NODES, None, node["metadata"]["name"])
    client.delete(kube.PODS, namespace, "idle")
    eventually("the Node gone", lambda: finalizers_of(client, kube.NODES, node) is None, timeout=5)
    eventually("the idle pod gone", lambda: finalizers_of(client, kube.PODS, idle) is None, timeout=5)


def test_uninstall_without_release_leaves_finalizers(client: kube.Client, kube_lab: KubeLab, namespace: str,
                                                     hooks_url: str, bridge_objects, run_driver) -> None:  # fmt: skip
    """The bug the procedure exists for: DecoratorControllers deleted with their finalize hooks in place (as a
    plain `helm uninstall` does) leave their finalizers, so a labelled Node or managed pod deleted afterwards
    stays Terminating while the driver keeps running; the pod then needs the documented manual patch."""
    dcs = bridge_decorators(namespace, hooks_url)
    worker, pod_finalizer = finalizer_of(dcs, "-node-worker"), finalizer_of(dcs, "-pod")
    node = bridge_objects("Node", "left", WORKER)
    pod = bridge_objects("Pod", "left", MANAGED)
    lab = run_driver(dcs)
    eventually("the Node's finalizer", lambda: worker in (finalizers_of(client, kube.NODES, node) or []))
    eventually("the pod's finalizer", lambda: pod_finalizer in (finalizers_of(client, kube.PODS, pod) or []))

    for dc in dcs:
        client.delete(driver.DECORATORS, None, dc["metadata"]["name"])
    client.delete(kube.NODES, None, node["metadata"]["name"])
    client.delete(kube.PODS, namespace, "left")
    time.sleep(5)
    assert held(client, kube.NODES, node, worker) and held(client, kube.PODS, pod, pod_finalizer)
    assert lab.stats()["passes"] >= 4

    patch = kubectl(kube_lab, "patch", "pod", "left", "-n", namespace, "--type=json",
                    "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')  # fmt: skip
    assert patch.returncode == 0, patch.stderr
    eventually("the pod gone after the manual patch", lambda: finalizers_of(client, kube.PODS, pod) is None, timeout=5)
    assert held(client, kube.NODES, node, worker)
