"""The cluster lab's kubelet parts that run the project's image as a cluster would (hack/cluster/lab/):
an unpacked OCI image's own filesystem, command, Env, WorkingDir and USER (images.py, agent.py); the Service
resolver the Metacontroller stand-in dials hooks through (agent.py); the relay of the `kubernetes` Service
(proxy.py); and each pod's own ServiceAccount token (serviceaccount.py), against the real API server.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from lab import agent, images, kube, proxy, runtime, serviceaccount, volumes

from tests.kube.plugin import KubeLab

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]


def unpacked(tmp_path: Path, config: Obj) -> Path:
    """A directory as hack/cluster/image-rootfs.sh leaves it."""
    root = tmp_path / "img"
    (root / "rootfs" / "etc").mkdir(parents=True)
    (root / "rootfs" / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n")
    (root / "rootfs" / "etc" / "group").write_text("root:x:0:\nstaff:x:50:\n")
    (root / "config.json").write_text(json.dumps(config))
    return root


IMAGE = "localhost/slinky-metacontroller:ci-0123"
CONFIG = {"User": "65532:65532", "Env": ["PATH=/opt/venv/bin:/usr/bin:/bin", "HOOKS_BIND=0.0.0.0:8080"],
          "Cmd": ["gunicorn", "-c", "hooks/gunicorn_conf.py"], "WorkingDir": "/app"}  # fmt: skip


def test_an_unpacked_image_runs_its_own_cmd_unless_the_container_says_otherwise(tmp_path: Path) -> None:
    catalog = images.Catalog({IMAGE: unpacked(tmp_path, CONFIG)})
    image = catalog.image(IMAGE)
    assert image.unpacked and image.rootfs == str(tmp_path / "img" / "rootfs")
    assert image.env["PATH"] == "/opt/venv/bin:/usr/bin:/bin" and image.workdir == "/app"
    assert catalog.argv({"image": IMAGE}) == ["gunicorn", "-c", "hooks/gunicorn_conf.py"]
    assert catalog.argv({"image": IMAGE, "args": ["x"]}) == ["x"]  # args replace Cmd
    # a command replaces the entrypoint, and the image's Cmd goes with it (Kubernetes' rule)
    assert catalog.argv({"image": IMAGE, "command": ["python", "-m", "slurm_sync"]}) == ["python", "-m", "slurm_sync"]
    # the lab's own images still come by name; another tag of ours is not the one unpacked
    assert not catalog.image("ghcr.io/slinkyproject/slurmd:25.11").unpacked
    with pytest.raises(images.UnknownImage, match="ci-other"):
        catalog.image("localhost/slinky-metacontroller:ci-other")


def test_the_image_option_names_what_is_wrong(tmp_path: Path) -> None:
    directory = unpacked(tmp_path, CONFIG)
    assert images.parse_image_option(f"{IMAGE}={directory}") == (IMAGE, directory)
    for bad in (IMAGE, f"={directory}", f"{IMAGE}={tmp_path}"):
        with pytest.raises(ValueError, match="want REFERENCE=DIR"):
            images.parse_image_option(bad)


def worker(tmp_path: Path, spec: Obj, catalog: images.Catalog) -> agent.PodWorker:
    node = agent.Agent.__new__(agent.Agent)  # no API server: only what a container's identity and env need
    node.catalog, node.rootfs, node.passwd = catalog, str(tmp_path / "img" / "rootfs"), {}
    node.stores = {"Secret": {}, "ConfigMap": {}}
    node.log, node.lab_dir = logging.getLogger("lab.agent"), tmp_path
    pod = {"metadata": {"name": "p", "namespace": "slinky"}, "spec": spec}
    return agent.PodWorker(node, pod, "10.77.0.20", tmp_path / "pod")


@pytest.mark.parametrize(
    ("user", "security", "want"),
    [
        ("65532:65532", {}, (65532, 65532)),
        ("app", {}, (1000, 1001)),  # a name: its passwd entry and primary group
        ("app:staff", {}, (1000, 50)),
        ("", {}, (0, 0)),  # no USER: root
        ("65532:65532", {"runAsUser": 1000}, (1000, 1001)),  # runAsUser wins, its primary group with it
        ("65532:65532", {"runAsUser": 7, "runAsGroup": 8}, (7, 8)),
    ],
)
def test_a_containers_user_is_its_security_contexts_else_the_images(
    tmp_path: Path, user: str, security: Obj, want: tuple[int, int]
) -> None:
    catalog = images.Catalog({IMAGE: unpacked(tmp_path, {**CONFIG, "User": user})})
    pod = worker(tmp_path, {"containers": [], "securityContext": security}, catalog)
    assert pod.identity({"image": IMAGE}) == want


def test_a_containers_env_is_the_images_then_the_service_variables_then_its_own(tmp_path: Path) -> None:
    catalog = images.Catalog({IMAGE: unpacked(tmp_path, CONFIG)})
    pod = worker(tmp_path, {"containers": []}, catalog)
    env = pod.env(
        {"name": "c", "image": IMAGE, "env": [{"name": "HOOKS_BIND", "value": "0.0.0.0:9090"}]}, catalog.image(IMAGE)
    )
    assert env["PATH"] == "/opt/venv/bin:/usr/bin:/bin" and env["HOOKS_BIND"] == "0.0.0.0:9090"
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("10.77.0.1", "443")
    assert env["HOSTNAME"] == "p" and "LANG" not in env  # the image sets no LANG: none is made up


def test_a_service_resolves_to_a_ready_endpoint_at_its_target_port() -> None:
    node = agent.Agent.__new__(agent.Agent)
    labels = {"app": "hooks"}
    ports = [{"name": "http", "containerPort": 8080}]

    def pod(name: str, ip: str, ready: bool) -> Obj:
        cond = [{"type": "Ready", "status": "True" if ready else "False"}]
        spec = {"containers": [{"name": "hooks", "ports": ports}]}
        meta = {"name": name, "namespace": "slinky", "labels": labels}
        return {"metadata": meta, "spec": spec, "status": {"podIP": ip, "conditions": cond}}

    service_ports = [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 9}]
    svc = {"metadata": {"name": "hooks", "namespace": "slinky"}, "spec": {"selector": labels, "ports": service_ports}}
    node.services, node.pods = [svc], [pod("a", "10.77.0.20", False), pod("b", "10.77.0.21", True)]
    assert node.service_address("slinky", "hooks", 80) == ("10.77.0.21", 8080)
    assert node.service_address("slinky", "hooks", 81) == ("10.77.0.21", 9)
    assert node.service_address("slinky", "hooks", 82) is None  # no such port
    assert node.service_address("slurm", "hooks", 80) is None  # another namespace's
    node.pods = [pod("a", "10.77.0.20", False)]
    assert node.service_address("slinky", "hooks", 80) is None  # none ready: no guess


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A TCP server that answers each connection with what it read, upper-cased, once the client half-closed."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[:2]
    listener.close()


def test_the_relay_carries_bytes_both_ways_and_half_closes(echo_server: tuple[str, int]) -> None:
    relay = proxy.ApiProxy("127.0.0.1", echo_server, port=0)
    stop = threading.Event()
    threading.Thread(target=relay.serve, args=(stop,), daemon=True).start()
    try:
        payload = b"tls bytes " * 50_000  # more than one read
        with socket.create_connection(relay.address, timeout=10) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := conn.recv(65536):
                got += chunk
        assert got == payload.upper()
    finally:
        stop.set()


@pytest.mark.parametrize(
    ("pod_says", "account_says", "want"),
    [(None, None, True), (False, None, False), (None, False, False), (True, False, True), (False, True, False)],
)
def test_automount_is_the_pods_setting_else_its_service_accounts_else_true(
    pod_says: bool | None, account_says: bool | None, want: bool
) -> None:
    pod = {"spec": {} if pod_says is None else {"automountServiceAccountToken": pod_says}}
    account = {} if account_says is None else {"automountServiceAccountToken": account_says}
    assert serviceaccount.automount(pod, account) is want


def test_a_pods_token_is_its_own_bound_to_it(kube_lab: KubeLab, kube_namespace: str) -> None:
    """The token the agent mounts authenticates as the pod's ServiceAccount, names the pod it is bound to,
    and the CA beside it is the API server's."""
    lab_client = kube.Client(kube_lab.kubeconfig)
    core = client.CoreV1Api(kube_lab.api_client())
    core.create_namespaced_service_account(kube_namespace, {"metadata": {"name": "worker"}})  # type: ignore[arg-type]
    body = {"metadata": {"name": "p"}, "spec": {"serviceAccountName": "worker", "nodeName": "n",
                                                  "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    pod = lab_client.create(kube.PODS, {**body, "metadata": {**body["metadata"], "namespace": kube_namespace}})
    credentials = serviceaccount.request_token(lab_client, pod)
    token = credentials.files["token"][0].decode()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))
    assert claims["sub"] == f"system:serviceaccount:{kube_namespace}:worker"
    assert claims["kubernetes.io"]["pod"] == {"name": "p", "uid": pod["metadata"]["uid"]}
    # the kubelet's 3607 s: kube-apiserver's default --service-account-extend-token-expiration keeps such a token a
    # year and says when it would have expired (warnafter); the agent renews at 80 % of the 3607 s all the same
    assert claims["kubernetes.io"]["warnafter"] - claims["iat"] == serviceaccount.EXPIRATION
    assert credentials.files["namespace"][0].decode() == kube_namespace
    assert credentials.files["ca.crt"][0] == lab_client.ca_pem and b"BEGIN CERTIFICATE" in lab_client.ca_pem
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    as_pod = kube.Client(kube_lab.kubeconfig)
    as_pod.session.headers["Authorization"] = f"Bearer {token}"
    who = as_pod.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{kube_namespace}:worker"


def test_no_container_starts_before_its_service_account_is_read(tmp_path: Path) -> None:
    """Unknown is not "no token": while the pod's ServiceAccount could not be read, its containers wait."""
    catalog = images.Catalog({IMAGE: unpacked(tmp_path, CONFIG)})
    pod = worker(tmp_path, {"containers": []}, catalog)
    with pytest.raises(volumes.MissingSource, match="not read yet"):
        pod.mounts({"name": "c", "image": IMAGE}, catalog.image(IMAGE))
    pod.automount = True
    with pytest.raises(volumes.MissingSource, match="no token yet"):
        pod.mounts({"name": "c", "image": IMAGE}, catalog.image(IMAGE))
    pod.automount = False
    assert all(m.target != serviceaccount.MOUNT_PATH for m in pod.mounts({"name": "c", "image": IMAGE},
                                                                        catalog.image(IMAGE)))  # fmt: skip


def test_the_shell_side_of_the_lab_names_the_gateway_and_namespace_the_python_side_uses() -> None:
    """hack/cluster/lib.sh sets them for the API server's certificate and the helm install; they must agree."""
    lib = (REPO / "hack" / "cluster" / "lib.sh").read_text()
    assert f"\nGATEWAY={runtime.GATEWAY} " in lib
    assert f"\nOPERATOR_NAMESPACE={agent.OPERATOR_NAMESPACE} " in lib


class Exited:
    """A container process that has ended with `code` (the runtime's Process, as far as the worker reads it)."""

    def __init__(self, code: int) -> None:
        self.code, self.started = code, 0.0

    def exit_code(self) -> int:
        return self.code


@pytest.mark.parametrize(("policy", "code", "phase", "restarted"), [
    ("Never", 0, "Succeeded", False), ("Never", 1, "Failed", False), ("OnFailure", 0, "Succeeded", False),
    ("OnFailure", 1, "Running", True), ("Always", 0, "Running", True),
])  # fmt: skip
def test_a_pod_whose_containers_ended_for_good_ends_in_its_phase_and_nothing_restarts(
    tmp_path: Path, policy: str, code: int, phase: str, restarted: bool
) -> None:
    """As a kubelet: a container its restart policy does not start again stays terminated (a bridge pod that
    exited 0 is Succeeded, so its placeholder job ends); one it restarts waits in back-off, the pod Running."""
    pod = worker(tmp_path, {"restartPolicy": policy, "containers": [{"name": "c", "image": "busybox"}]},
                 images.Catalog())  # fmt: skip
    (container,) = pod.containers = [agent.Container(pod.pod["spec"]["containers"][0])]
    container.process = Exited(code)  # type: ignore[assignment]
    pod.ran = True
    starts: list[str] = []
    pod.start = lambda c: starts.append(c.name)  # type: ignore[method-assign]
    pod.run_container(container)
    container.restart_at = 0.0  # past any back-off: only the policy may keep it down
    pod.run_container(container)
    status = pod.status()
    assert (status["phase"], bool(starts)) == (phase, restarted)
    state = status["containerStatuses"][0]["state"]
    assert ("terminated" in state) == (not restarted), state
    if not restarted:
        assert state["terminated"]["exitCode"] == code
        ready = {c["type"]: c for c in status["conditions"]}["Ready"]
        assert ready == {"type": "Ready", "status": "False", "reason": "PodCompleted"}


def test_a_deleted_pods_containers_end_in_their_exit_codes_and_its_phase_is_terminal(tmp_path: Path) -> None:
    """Graceful deletion as a kubelet ends it: before the final delete, the status says how each container
    ended (128 + the signal) and the phase is terminal, which is what a finalizer's holder waits for."""
    spec = {"containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}]}
    pod = worker(tmp_path, spec, images.Catalog())
    pod.containers = [agent.Container(c) for c in spec["containers"]]
    pod.containers[0].process, pod.containers[1].process = Exited(-15), Exited(0)  # type: ignore[assignment]
    pod.ran = True
    pod.record_ends()
    status = pod.status()
    codes = [c["state"]["terminated"]["exitCode"] for c in status["containerStatuses"]]
    assert (codes, status["phase"]) == ([143, 0], "Failed")
