"""`make release` (hack/release.sh) against a local OCI registry (Debian's docker-registry, hack/registry.sh), then
`helm install oci://...` of the operator chart from it against the real API server, as Slinky's quickstart
installs: the image and the three charts are pushed; each chart's version is the release's, the operator's
and the bridge's default image is the one pushed beside them; a bad REGISTRY or VERSION is refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.kube.plugin import KubeLab

ROOT = Path(__file__).resolve().parents[1]
HELM = ROOT / ".cache" / "bin" / "helm"
VERSION = "0.1.0-test"
CHARTS = ("slurm-operator", "slurm-bridge", "slurm")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return dict(json.loads(answer.read()))


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port/path of a local registry, empty at first."""
    if os.geteuid() != 0 or not (shutil.which("buildah") or shutil.which("podman") or shutil.which("docker")):
        pytest.skip("make release builds and pushes the image: needs root and an engine (make test's image part)")
    directory, port = tmp_path_factory.mktemp("registry"), free_port()
    log = open(directory / "registry.log", "w")  # noqa: SIM115 - open while the registry runs
    proc = subprocess.Popen([str(ROOT / "hack" / "registry.sh"), str(directory), str(port)], stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # apt-get may install it first
        while True:
            try:
                get(f"http://127.0.0.1:{port}/v2/")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, (directory / "registry.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the local registry did not answer /v2/"
                time.sleep(0.5)
        yield f"127.0.0.1:{port}/slinky"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def make_release(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELEASE_PLAIN_HTTP": "1"}
    return subprocess.run(["make", "-s", "release", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=1800)  # fmt: skip


@pytest.fixture(scope="module")
def released(registry: str) -> str:
    done = make_release(f"REGISTRY={registry}", f"VERSION={VERSION}")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == [f"{registry}/slinky-metacontroller:{VERSION}",
                                   *(f"oci://{registry}/charts/{c}:{VERSION}" for c in CHARTS)]  # fmt: skip
    return registry


def helm(*args: str, kubeconfig: Path | None = None) -> str:
    argv = [str(HELM), *args, *(["--kubeconfig", str(kubeconfig)] if kubeconfig else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def test_the_image_and_the_three_charts_are_in_the_registry(released: str) -> None:
    host, _, path = released.partition("/")
    catalog = get(f"http://{host}/v2/_catalog")["repositories"]
    assert set(catalog) == {f"{path}/slinky-metacontroller", *(f"{path}/charts/{c}" for c in CHARTS)}
    request = urllib.request.Request(f"http://{host}/v2/{path}/slinky-metacontroller/manifests/{VERSION}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                                              "application/vnd.docker.distribution.manifest.v2+json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        manifest = json.loads(answer.read())
    assert len(manifest["layers"]) >= 2  # the base and ours
    for chart in CHARTS:
        meta = yaml.safe_load(helm("show", "chart", f"oci://{released}/charts/{chart}", "--version", VERSION,
                                   "--plain-http"))  # fmt: skip
        assert meta["version"] == VERSION
        assert meta["appVersion"] == (VERSION if chart != "slurm" else "26.05")  # charts/slurm's is Slurm's
    for chart in ("slurm-operator", "slurm-bridge"):
        values = yaml.safe_load(helm("show", "values", f"oci://{released}/charts/{chart}", "--version", VERSION,
                                     "--plain-http"))  # fmt: skip
        assert values["image"]["repository"] == f"{released}/slinky-metacontroller"


def test_helm_installs_the_operator_chart_from_the_registry(
    released: str, kube_lab: KubeLab, kube_api, metacontroller, installed_crds
) -> None:
    """As the quickstart reads: `helm install ... oci://<registry>/charts/slurm-operator`, nothing else given
    but where (the CRDs stay with the release that owns them on this shared server)."""
    release, namespace = f"rel-{uuid.uuid4().hex[:6]}", f"t-rel-{uuid.uuid4().hex[:6]}"
    chart = f"oci://{released}/charts/slurm-operator"
    helm("install", release, chart, "--version", VERSION, "--plain-http", "-n", namespace, "--create-namespace",
         "--set", "crds.enabled=false", kubeconfig=kube_lab.kubeconfig)  # fmt: skip
    try:
        listed = json.loads(helm("list", "-n", namespace, "-o", "json", kubeconfig=kube_lab.kubeconfig))
        assert [(r["name"], r["status"], r["chart"]) for r in listed] == [
            (release, "deployed", f"slurm-operator-{VERSION}")
        ]
        deployments = client.AppsV1Api(kube_api).list_namespaced_deployment(namespace).items
        images = {c.image for d in deployments for c in d.spec.template.spec.containers}
        assert images == {f"{released}/slinky-metacontroller:{VERSION}"}
    finally:
        helm("uninstall", release, "-n", namespace, kubeconfig=kube_lab.kubeconfig)
        client.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("REGISTRY=https://example.invalid/x",), "REGISTRY is host[:port][/path], without a scheme"),
        (("REGISTRY=127.0.0.1:1/x", "VERSION=v1"), "VERSION must be a semantic version"),
        ((), "REGISTRY="),
    ],
)
def test_bad_settings_are_refused_in_one_line(args: tuple[str, ...], message: str) -> None:
    done = make_release(*args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
