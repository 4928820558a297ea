"""The cluster lab's Metacontroller stand-in (hack/cluster/lab/driver.py) against the lab's API server.

The hooks are served in-process on a free port; the project's Token and Controller CompositeControllers are
applied with url webhooks (and a parent label selector unique to the test, so nothing else on the shared
server is touched), and the driver, limited to those two, is run in a thread. They are annotated
driver.PRIVATE, so the lab's own driver, when the lab is up, leaves them to the test's (a real Metacontroller
given to the lab would not: these tests then race it). The Controller's has a finalize hook here (the
shipped manifest has none): a stub that forwards to /controller/sync, answers `finalized: false` with
`resyncAfterSeconds` once, then `finalized: true`.
"""

from __future__ import annotations

import base64
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
from lab import driver, kube
from werkzeug.serving import make_server

from hooks.app import create_app
from tests.cluster.plugin import eventually
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
        ({"service": {"name": "hooks", "namespace": "slinky"}, "path": "/token/sync"}, "no cluster DNS"),
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


@pytest.fixture
def run_driver(client: kube.Client) -> Iterator[Callable[[list[Obj]], driver.Driver]]:
    """Apply CompositeControllers and start a driver limited to them; stop it and delete them afterwards."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    applied: list[str] = []

    def start(ccs: list[Obj]) -> driver.Driver:
        for cc in ccs:
            client.create(driver.COMPOSITES, cc)
            applied.append(cc["metadata"]["name"])
        lab = driver.Driver(client, logging.getLogger("lab.driver"), only={cc["metadata"]["name"] for cc in ccs})
        threads.append(threading.Thread(target=lab.run, args=(stop,), daemon=True))
        threads[-1].start()
        return lab

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive(), "the driver did not stop"
    for name in applied:
        client.delete(driver.COMPOSITES, None, name)


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
