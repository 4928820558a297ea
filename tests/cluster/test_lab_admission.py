"""The cluster lab's API server calls admission webhooks as kube-apiserver does (hack/kube/apiserver/webhooks.go: the
MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins of k8s.io/apiserver): the bridge chart's own
webhook configurations, rendered by the real helm for a namespace of the test's, call the project's hook
server (in-process, over TLS with a CA of the test's as the configuration's caBundle, the chart's way when
there is no cert-manager) when a pod is created there. The stored pod is the mutated one; a pod elsewhere is
untouched; a pod the validating webhook refuses is refused with its message; with the webhook server gone,
failurePolicy Fail refuses pods there and nowhere else. A configuration naming a Service is resolved to a
ready pod by the server (its unit test, webhooks_test.go; test_bridge_admission.py has it call the bridge
chart's Service). The chart's clientConfig names its Service; here it is given the url of the in-process
server instead, which runs on the host. (hack/kube's own lab runs no webhooks: it has no pod network, so
charts installed there without their pods would refuse every pod they select.)"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from werkzeug.serving import make_server

from hooks.app import create_app
from hooks.bridge.admission import managed_node_toleration
from tests.charts.helm import render
from tests.cluster.plugin import ClusterLab
from tests.fixtures.slurm import wait_for

pytestmark = pytest.mark.cluster
Obj = dict[str, Any]
SCHEDULER = "slurm-bridge-scheduler"  # the chart's default schedulerConfig.schedulerName


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def certificates(directory: Path) -> tuple[bytes, Path, Path]:
    """A CA, and a serving certificate it signed for 127.0.0.1: (CA PEM, certificate file, key file)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("test-ca")).issuer_name(_name("test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    cert = (x509.CertificateBuilder().subject_name(_name("hooks")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file


class HookServer:
    """The project's hook server on a free loopback port, over TLS."""

    def __init__(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = make_server("127.0.0.1", 0, create_app(), threaded=True, ssl_context=context)
        self.url = f"https://127.0.0.1:{self.server.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def kube_api(cluster_lab: ClusterLab) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=str(cluster_lab.kubeconfig)) as api:
        yield api


@pytest.fixture
def managed(kube_api: client.ApiClient, tmp_path: Path) -> Iterator[tuple[str, str, HookServer]]:
    """A managed namespace, an unmanaged one, the hook server, and the chart's two webhook configurations
    for the managed one pointed at it (deleted afterwards: they are cluster-wide)."""
    core = client.CoreV1Api(kube_api)
    names = [f"t-bridge-{uuid.uuid4().hex[:8]}", f"t-plain-{uuid.uuid4().hex[:8]}"]
    for ns in names:
        core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    ca, cert, key = certificates(tmp_path)
    server = HookServer(cert, key)
    docs = render("slurm-bridge", {"admission": {"managedNamespaces": [names[0]], "createManagedNamespaces": False}})
    registration = client.AdmissionregistrationV1Api(kube_api)
    made = []
    for doc in docs:
        if doc["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{names[0]}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": server.url + path, "caBundle": base64.b64encode(ca).decode()}
        if doc["kind"] == "MutatingWebhookConfiguration":
            registration.create_mutating_webhook_configuration(doc)
        else:
            registration.create_validating_webhook_configuration(doc)
        made.append((doc["kind"], doc["metadata"]["name"]))
    assert len(made) == 2, made
    try:
        yield names[0], names[1], server
    finally:
        server.stop()
        for kind, name in made:
            if kind == "MutatingWebhookConfiguration":
                registration.delete_mutating_webhook_configuration(name)
            else:
                registration.delete_validating_webhook_configuration(name)
        for ns in names:
            core.delete_namespace(ns)


def pod(name: str, **spec: Any) -> Obj:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_a_pod_in_a_managed_namespace_is_stored_as_the_webhook_mutated_it(
    kube_api: client.ApiClient, managed: tuple[str, str, HookServer]
) -> None:
    ns, plain, _ = managed
    core = client.CoreV1Api(kube_api)
    # webhook configurations reach the plugins through their informers: the first pods may be admitted before
    created = iter(range(100))

    def mutated() -> Obj | None:
        stored = core.create_namespaced_pod(ns, pod(f"p{next(created)}")).to_dict()
        return stored if stored["spec"]["scheduler_name"] == SCHEDULER else None

    stored = wait_for(mutated, bool, timeout=30, interval=0.5, what="a pod mutated by the bridge's webhook")
    again = core.read_namespaced_pod(stored["metadata"]["name"], ns).to_dict()
    assert again["spec"]["scheduler_name"] == SCHEDULER  # stored so, not only answered so
    # and with the toleration of the bridge's managed-node taint, as the hook answered (snake_case: the client's)
    want = managed_node_toleration(SCHEDULER)
    assert {"key": want["key"], "value": want.get("value"), "effect": want.get("effect")} in [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in again["spec"]["tolerations"] or []
    ], again["spec"]["tolerations"]
    elsewhere = core.create_namespaced_pod(plain, pod("p")).to_dict()
    assert elsewhere["spec"]["scheduler_name"] in (None, "default-scheduler")


def test_the_validating_webhook_refuses_with_its_message_and_failure_policy_fail_holds_when_it_is_gone(
    kube_api: client.ApiClient, managed: tuple[str, str, HookServer]
) -> None:
    ns, plain, server = managed
    core = client.CoreV1Api(kube_api)
    wait_for(lambda: core.create_namespaced_pod(ns, pod(f"w{uuid.uuid4().hex[:6]}")).spec.scheduler_name == SCHEDULER,
             bool, timeout=30, interval=0.5, what="the webhooks in effect")  # fmt: skip
    # what Slurm cannot place is the bridge's to refuse, with its reason
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, pod("spread", topologySpreadConstraints=spread))
    assert refused.value.status == 403 and "validate.pods.scheduler.slinky.slurm.net" in refused.value.body
    assert "topologySpreadConstraints is not supported" in refused.value.body
    server.stop()
    with pytest.raises(ApiException) as down:
        core.create_namespaced_pod(ns, pod("down"))
    assert "mutate.pods.scheduler.slinky.slurm.net" in down.value.body and "failed calling webhook" in down.value.body
    assert core.create_namespaced_pod(plain, pod("fine")).metadata.name == "fine"  # other namespaces go on
