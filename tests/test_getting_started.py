"""docs/getting-started.md, run: its commands in the page's order with the real kubectl and helm against
the real API server, up to those that need running pods; and what its last steps promise (two workers
`cpu-0` and `cpu-1` in the default partition) checked on what the chart renders and the hooks answer.
Steps 5 and 6 run to `srun` on the cluster lab (tests/cluster/test_getting_started.py).

Not run against the API server: what needs a kubelet, a running Metacontroller, the internet or an API
the lab does not serve (NOT_RUN); `helm install slurm-operator` gets `--take-ownership`, because this
session's tests installed the CRDs before it, as in tests/test_operations_commands.py. The published charts
(`oci://ghcr.io/slinky-metacontroller/charts/...`) are read from charts/, which `make release` packages them
from; tests/test_release.py publishes them to a registry of its own and installs from there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from hooks.app import create_app
from slinky_common import names
from tests.charts import helm
from tests.kube.cli import run
from tests.kube.plugin import KubeLab
from tests.support.hooks import by_kind, related, request, secret
from tests.support.operationsdoc import PLACEHOLDERS, PUBLISHED_CHARTS, Command, local_charts, sections

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
NOT_RUN = {
    "kubectl get storageclass": "a StorageClass API (the lab's API server serves none)",
    "kubectl apply -k https://github.com/metacontroller/metacontroller/manifests/production": "the internet",
    "kubectl rollout status -n metacontroller statefulset/metacontroller": "a kubelet",
    "make release REGISTRY=<registry> VERSION=<tag>": "a registry (tests/test_release.py runs it against a local one)",
    "kubectl rollout status -n slinky deploy/slurm-operator-hooks deploy/slurm-operator-slurm-sync": "a kubelet",
    "kubectl wait --for=condition=Ready -n slurm controllers,nodesets,restapis --all --timeout=10m": "Metacontroller",
    "kubectl exec -n slurm statefulset/slurm-controller -c slurmctld -- sinfo": "a kubelet",
    "kubectl exec -n slurm statefulset/slurm-controller -c slurmctld -- srun -N2 hostname": "a kubelet",
}
EXPECT = {
    "kubectl get compositecontrollers -l app.kubernetes.io/part-of=slurm-operator": ["slurm-operator-nodeset"],
    "kubectl get controllers,nodesets,restapis -n slurm": ["controller.slinky.slurm.net/slurm", "slurm-worker-cpu"],
}
RELEASES = (("slurm", "slurm"), ("slurm-operator", "slinky"))


def steps() -> dict[str, list[Command]]:
    return sections(PAGE)


def page_commands() -> list[Command]:
    return [c for step in steps().values() for c in step]


def test_six_numbered_steps_each_with_commands_and_every_skip_named() -> None:
    assert [t.split(".")[0] for t in steps()] == ["1", "2", "3", "4", "5", "6"]
    assert all(steps().values())
    lines = [c.line for c in page_commands()]
    assert set(NOT_RUN) <= set(lines) and set(EXPECT) <= set(lines)


def chart_objects() -> dict[str, dict]:
    """charts/slurm as step 5 installs it, by kind/name."""
    (install,) = [c for c in page_commands() if c.words[:3] == ["helm", "install", "slurm"]]
    assert install.words[3] == f"{PUBLISHED_CHARTS}slurm", install.line
    sets = [install.words[i + 1] for i, w in enumerate(install.words) if w == "--set"]
    args = ["template", "slurm", "charts/slurm", "-n", "slurm", *(a for s in sets for a in ("--set", s))]
    out = subprocess.run([str(helm.helm()), *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(out) if o}


def hook(route: str, body: dict) -> dict:
    response = create_app().test_client().post(route, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_step_five_gives_two_workers_cpu_0_and_cpu_1_in_the_default_partition() -> None:
    objects = chart_objects()
    controller, nodeset = objects["Controller/slurm"], objects["NodeSet/slurm-worker-cpu"]
    keys = [secret(o["metadata"]["name"], {k: b"k" * 32 for k in o.get("stringData") or o.get("data") or {}})
            for key, o in objects.items() if key.startswith("Secret/")]  # fmt: skip
    conf = by_kind(hook("/controller/sync", request(controller, rel=related(*keys, nodeset))))
    slurm_conf = conf["ConfigMap/slurm-config"]["data"]["slurm.conf"]
    (partition,) = [line for line in slurm_conf.splitlines() if line.startswith("PartitionName=all ")]
    assert "Nodes=cpu" in partition or "Nodes=ALL" in partition, partition
    assert "Default=YES" in partition, partition
    rel = {f"Controller.{names.API_VERSION}": {"slurm/slurm": controller}}
    pods = [c for c in hook("/nodeset/sync", request(nodeset, rel=rel))["children"] if c["kind"] == "Pod"]
    assert sorted(p["spec"]["hostname"] for p in pods) == ["cpu-0", "cpu-1"]


def remove_releases(lab: KubeLab) -> None:
    for release, namespace in RELEASES:
        run(lab, "helm", "uninstall", release, "-n", namespace, "--ignore-not-found")
    for namespace in ("slurm", "slinky"):
        run(lab, "kubectl", "delete", "namespace", namespace, "--ignore-not-found", "--wait=true")


@pytest.mark.kube
def test_the_page_runs_against_the_api_server(kube_lab: KubeLab, installed_crds, metacontroller) -> None:
    remove_releases(kube_lab)
    ran = []
    try:
        for command in page_commands():
            if command.line in NOT_RUN:
                continue
            words = [w.replace("<registry>", PLACEHOLDERS["<registry>"]).replace("<tag>", PLACEHOLDERS["<tag>"])
                     for w in local_charts(command.words)]  # fmt: skip
            if words[:3] == ["helm", "install", "slurm-operator"]:
                words.append("--take-ownership")
            proc = run(kube_lab, words[0], *words[1:])
            assert proc.returncode == 0, f"{command.line}\nexited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            for text in EXPECT.get(command.line, []):
                assert text in proc.stdout, f"{command.line}\nprinted no {text!r}:\n{proc.stdout}\n{proc.stderr}"
            ran.append(command.line)
    finally:
        remove_releases(kube_lab)
    assert len(ran) == len(page_commands()) - len(NOT_RUN)
