"""docs/operations.md, run: its kubectl and helm commands in the page's order (install, upgrade, the
troubleshooting commands while everything is installed, then uninstall), with the real kubectl and
helm against the real API server, in the namespaces the page names.

The lab runs no kubelet, no controllers and no Metacontroller, so before a command that inspects what
they would have written, the test writes it through the API the way they would: the statuses are
what our hooks answer for the example requests (examples/requests/), Metacontroller's part; the
worker pods are those requests' observed pods, with slurm_sync's conditions and marks; a Deployment's
status is what the deployment controller writes once a rollout is done. Each command's output is
checked for what the page says it shows.

Not run here: `kubectl logs`, `kubectl port-forward` and the `curl` through it need a kubelet
(tests/test_operations_docs.py checks their containers, ports and paths); `make manifests` and
`kubectl apply -f dist/...` run in tests/charts/test_bundles_apply.py (here they would collide
with the helm releases of the same objects). Two commands change on the way: `helm install
slurm-operator` gets `--take-ownership`, because this session's tests installed the CRDs before it
(a new cluster has none), and `kubectl delete crd` runs with `--dry-run=server`, so the later tests
keep their CRDs; `kubectl wait` waits 20 s, not 10 min (the statuses are in place before it runs).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hooks.app import create_app
from slinky_common import names
from slurm_sync.leader import Fence, LeaseElector, LeaseSettings
from tests.kube.cli import run
from tests.kube.kubeapi import GROUP, VERSION
from tests.kube.plugin import KubeLab
from tests.support.operationsdoc import PLACEHOLDERS, Command, sections

REPO = Path(__file__).resolve().parents[1]
REQUESTS = REPO / "examples" / "requests"
ORDER = (
    "Install",
    "Upgrade",
    "Troubleshooting by symptom",
    "Draining a worker without deleting it",
    "Deleting a worker pod by hand",
    "Elastic NodeSets: Slurm's queue sizes the workers",  # no command: tests/cluster/test_elastic.py runs it
    "Uninstall",
)
NEEDS_KUBELET = {("kubectl", "logs"), ("kubectl", "port-forward"), ("curl", "-s")}
ELSEWHERE = {"make manifests", "kubectl apply -f dist/install.yaml", "kubectl apply -f dist/install-bridge.yaml"}
NAMESPACES = ("slurm-bridge", "slurm-bridge-system", "slurm", "slinky")
RELEASES = (("slurm-bridge", "slurm-bridge-system"), ("slurm", "slurm"), ("slurm-operator", "slinky"))
NODESET = "slurm-worker-debug"  # examples/crs/nodeset.yaml and examples/requests/nodeset-sync.json
BRIDGE_POD = "train-0"
LAB_NODE = "gpu-node-1"  # the Kubernetes Node the Install section gives the bridge
LEASES = "kubectl get leases -n slinky -o custom-columns=NAME:.metadata.name,HOLDER:.spec.holderIdentity"
LEADER = "slurm-operator-slurm-sync-7d9c8b6f5-x2x4k_0f3a"  # a pod name and the elector's suffix
JOB_ID = "4242"
DEADLINE = "2026-11-23T12:00:00Z"
BRIDGE_FINALIZER = "metacontroller.io/decoratorcontroller-slurm-bridge-pod"
Obj = dict[str, Any]


def hook_answer(route: str, request: Obj) -> Obj:
    response = create_app().test_client().post(route, json=request)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def example_request(kind: str) -> Obj:
    return json.loads((REQUESTS / f"{kind}-sync.json").read_text())


class Cluster:
    """What the controllers, Metacontroller and slurm_sync would write, written through the API."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.nodeset_request = example_request("nodeset")
        self.draining = ""  # the pod the NodeSet drains, once scaled in

    def slurm_sync_leads(self) -> None:
        """slurm_sync's elector (slurm_sync/leader.py) takes the chart's Lease, as a replica does."""
        settings = LeaseSettings("slinky", "slurm-operator-slurm-sync", LEADER)
        assert LeaseElector(self.core.api_client, settings, Fence(settings.renew_deadline)).attempt()

    def rolled_out(self, namespace: str) -> None:
        """The deployment controller's status for a finished rollout of every Deployment."""
        for deployment in self.apps.list_namespaced_deployment(namespace).items:
            replicas = deployment.spec.replicas or 1
            status = {
                "observedGeneration": deployment.metadata.generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            }
            self.apps.patch_namespaced_deployment_status(deployment.metadata.name, namespace, {"status": status})

    def status_from_hook(self, plural: str, name: str, kind: str, request: Obj) -> Obj:
        """Metacontroller's part: the hook's answer for the observed state becomes the CR's status."""
        status = hook_answer(f"/{kind}/sync", request)["status"]
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "slurm", plural, name, {"status": status})
        return status

    def slurm_cluster(self) -> None:
        """The example NodeSet with its two worker pods, and the hooks' statuses of the Controller,
        RestApi and NodeSet (all Ready: the examples are a healthy cluster)."""
        nodeset = copy.deepcopy(self.nodeset_request["parent"])
        nodeset["metadata"] = {"name": NODESET, "namespace": "slurm"}
        nodeset.pop("status", None)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, "slurm", "nodesets", nodeset)
        for pod in self.nodeset_request["children"]["Pod.v1"].values():
            self.create_pod(pod)
        for plural, kind in (("controllers", "controller"), ("restapis", "restapi")):
            self.status_from_hook(plural, "slurm", kind, example_request(kind))
        self.status_from_hook("nodesets", NODESET, "nodeset", self.nodeset_request)

    def create_pod(self, observed: Obj) -> None:
        meta = observed["metadata"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
            "spec": observed["spec"],
        }
        self.core.create_namespaced_pod(meta["namespace"], pod)
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": observed["status"]})

    def busy_pods_scaled_in(self) -> None:
        """Jobs run on both pods (slurm_sync's condition and deadline) and the NodeSet is scaled to
        one: the hook drains one of them and keeps it until its job ends (the page's symptom)."""
        allocated = {"type": f"{names.CONDITION_SLURM_NODE_STATE_PREFIX}Allocated", "status": "True", "message": ""}
        for pod in self.nodeset_request["children"]["Pod.v1"].values():
            meta, status = pod["metadata"], pod["status"]
            status["conditions"] = [
                c for c in status["conditions"] if not c["type"].startswith(names.CONDITION_SLURM_NODE_STATE_PREFIX)
            ] + [allocated]
            meta.setdefault("annotations", {})[names.ANNOTATION_POD_DEADLINE] = DEADLINE
            self.core.patch_namespaced_pod(meta["name"], "slurm", {"metadata": {"annotations": meta["annotations"]}})
            self.core.patch_namespaced_pod_status(
                meta["name"], "slurm", {"status": {"conditions": status["conditions"]}}
            )
        self.nodeset_request["parent"]["spec"]["replicas"] = 1
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, "slurm", "nodesets", NODESET, {"spec": {"replicas": 1}}
        )
        status = self.status_from_hook("nodesets", NODESET, "nodeset", self.nodeset_request)
        (self.draining,) = [p["name"] for p in status["drainingPods"]]

    def kubernetes_node(self) -> None:
        """The Node a user gives the bridge (made once; the lab has no kubelet to register one)."""
        if not any(n.metadata.name == LAB_NODE for n in self.core.list_node().items):
            self.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": LAB_NODE}})

    def bridge_pod(self) -> None:
        """A pod of the managed namespace as admission and slurm_sync leave it: the managed label, the
        job id and the pod DecoratorController's finalizer (made once; later steps find it)."""
        if any(p.metadata.name == BRIDGE_POD for p in self.core.list_namespaced_pod("slurm-bridge").items):
            return
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": BRIDGE_POD,
                "labels": {names.LABEL_BRIDGE_MANAGED: "true", names.LABEL_SLURM_JOB_ID: JOB_ID},
                "finalizers": [BRIDGE_FINALIZER],
            },
            "spec": {"schedulerName": "slurm-bridge-scheduler", "containers": [{"name": "main", "image": "busybox"}]},
        }
        self.core.create_namespaced_pod("slurm-bridge", pod)

    def bridge_pod_without_devices(self) -> None:
        """The bridge pod, unbound, with the Warning slurm_sync posts when its devices cannot be claimed
        (a real API server shows that events.k8s.io/v1 Event as this core/v1 one too)."""
        self.bridge_pod()
        uid = self.core.read_namespaced_pod(BRIDGE_POD, "slurm-bridge").metadata.uid
        ref = {"apiVersion": "v1", "kind": "Pod", "namespace": "slurm-bridge", "name": BRIDGE_POD, "uid": uid}
        note = (f"Slurm started job {JOB_ID} on node n1, but its devices cannot be given to the pod: "
                "driver gpu.nvidia.com publishes no such device")  # fmt: skip
        self.core.create_namespaced_event("slurm-bridge", {
            "metadata": {"name": f"{BRIDGE_POD}.dra"}, "involvedObject": ref, "reason": "DeviceClaimFailed",
            "type": "Warning", "message": note, "source": {"component": "slinky.slurm.net/slurm-sync"},
        })  # fmt: skip

    def terminating(self, namespace: str, name: str) -> None:
        """The page's case: the pod was deleted and only the finalizer holds it."""
        self.core.delete_namespaced_pod(name, namespace)
        assert self.core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp

    def pod_gone(self, namespace: str, name: str) -> None:
        with pytest.raises(ApiException) as gone:
            self.core.read_namespaced_pod(name, namespace)
        assert gone.value.status == 404

    def secrets_gone(self) -> None:
        kept = {s.metadata.name for s in self.core.list_namespaced_secret("slurm").items}
        assert not kept & {"slurm-auth-slurm", "slurm-auth-jwt"}

    def crds_kept(self) -> None:
        """`helm uninstall` of the operator keeps the CRDs (helm.sh/resource-policy: keep)."""
        crds = {
            c.metadata.name
            for c in client.ApiextensionsV1Api(self.core.api_client).list_custom_resource_definition().items
        }
        assert {f"nodesets.{GROUP}", f"controllers.{GROUP}"} <= crds


# What a command's output must contain, by the command's line on the page.
EXPECT: dict[str, list[str]] = {
    "kubectl get crds nodesets.slinky.slurm.net controllers.slinky.slurm.net": [
        "nodesets.slinky.slurm.net",
        "controllers.slinky.slurm.net",
    ],
    "kubectl get compositecontrollers -l app.kubernetes.io/part-of=slurm-operator": ["slurm-operator-nodeset"],
    "kubectl rollout status -n slinky deploy/slurm-operator-hooks deploy/slurm-operator-slurm-sync": [
        '"slurm-operator-hooks" successfully rolled out',
        '"slurm-operator-slurm-sync" successfully rolled out',
    ],
    "kubectl get controllers,restapis,nodesets -n slurm": ["controller.slinky.slurm.net/slurm", NODESET, "PodsReady"],
    "kubectl wait --for=condition=Ready -n slurm controllers,restapis,nodesets --all --timeout=10m": [
        "controller.slinky.slurm.net/slurm condition met",
        f"nodeset.slinky.slurm.net/{NODESET} condition met",
    ],
    "kubectl get decoratorcontrollers slurm-bridge-pod slurm-bridge-node-worker slurm-bridge-node-external": [
        "slurm-bridge-node-external"
    ],
    "kubectl get nodeset <nodeset> -n slurm -o jsonpath='{.status.drainingPods}'": [f'"name":"{NODESET}-'],
    "kubectl get pod <pod> -n slurm -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.message}{\"\\n\"}{end}'": [  # noqa: E501 - the page's command, verbatim
        "SlurmNodeStateAllocated=True"
    ],
    "kubectl get pod <pod> -n slurm -o jsonpath='{.metadata.annotations.nodeset\\.slinky\\.slurm\\.net/pod-deadline}'": [  # noqa: E501 - the page's command, verbatim
        DEADLINE
    ],
    "kubectl get controller slurm -n slurm -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.message}{\"\\n\"}{end}'": [  # noqa: E501 - the page's command, verbatim
        "Ready=True",
        "ReferencesResolved=True",
    ],
    "kubectl describe controller slurm -n slurm": ["Name:", "slurm", "Ready"],
    LEASES: [
        "slurm-operator-slurm-sync",
        LEADER,
    ],
    "kubectl get nodesets -n slurm -o jsonpath='{.items[*].status.drainingPods}'": [f'"name":"{NODESET}-'],
    "kubectl get pods -n slurm-bridge -l scheduler.slinky.slurm.net/managed": [BRIDGE_POD],
    "kubectl describe pod <pod> -n slurm-bridge": [BRIDGE_POD, "DeviceClaimFailed"],
    "kubectl get pod <pod> -n slurm-bridge -o jsonpath='{.metadata.labels.scheduler\\.slinky\\.slurm\\.net/slurm-jobid}'": [  # noqa: E501 - the page's command, verbatim
        JOB_ID
    ],
    "kubectl get controllers,nodesets,loginsets,restapis,accountings,tokens -A": [NODESET],
    "kubectl delete crd controllers.slinky.slurm.net nodesets.slinky.slurm.net loginsets.slinky.slurm.net restapis.slinky.slurm.net accountings.slinky.slurm.net tokens.slinky.slurm.net": [  # noqa: E501 - the page's command, verbatim
        "(server dry run)"
    ],
}


def preparations(cluster: Cluster) -> dict[str, Callable[[], None]]:
    """State written before a command (by its line on the page)."""
    return {
        "kubectl rollout status -n slinky deploy/slurm-operator-hooks deploy/slurm-operator-slurm-sync": (
            lambda: cluster.rolled_out("slinky")
        ),
        "kubectl get controllers,restapis,nodesets -n slurm": cluster.slurm_cluster,
        "kubectl get nodeset <nodeset> -n slurm -o jsonpath='{.status.drainingPods}'": cluster.busy_pods_scaled_in,
        "kubectl get pods -n slurm-bridge -l scheduler.slinky.slurm.net/managed": cluster.bridge_pod,
        "kubectl label node <node> scheduler.slinky.slurm.net/external-node=true": cluster.kubernetes_node,
        "kubectl describe pod <pod> -n slurm-bridge": cluster.bridge_pod_without_devices,
        LEASES: cluster.slurm_sync_leads,
        'kubectl patch pod <pod> -n slurm-bridge --type=json -p \'[{"op":"remove","path":"/metadata/finalizers"}]\'': (
            lambda: cluster.terminating("slurm-bridge", BRIDGE_POD)
        ),
    }


def checks(cluster: Cluster) -> dict[str, Callable[[], None]]:
    """What must hold after a command (by its line on the page)."""
    return {
        'kubectl patch pod <pod> -n slurm-bridge --type=json -p \'[{"op":"remove","path":"/metadata/finalizers"}]\'': (
            lambda: cluster.pod_gone("slurm-bridge", BRIDGE_POD)
        ),
        "kubectl delete secret -n slurm slurm-auth-slurm slurm-auth-jwt": cluster.secrets_gone,
        "helm uninstall slurm-operator -n slinky": cluster.crds_kept,
    }


def as_run(command: Command, cluster: Cluster) -> list[str]:
    """The words to run: placeholders filled in, and the two changes the module docstring explains."""
    pod = BRIDGE_POD if command.option("-n") == "slurm-bridge" else cluster.draining
    fill = {**PLACEHOLDERS, "<nodeset>": NODESET, "<pod>": pod, "<node>": LAB_NODE}
    words = [fill.get(w, w) for w in command.words]
    words = [w.replace("<registry>", PLACEHOLDERS["<registry>"]).replace("<tag>", PLACEHOLDERS["<tag>"]) for w in words]
    if words[:3] == ["helm", "install", "slurm-operator"]:
        words.append("--take-ownership")
    if words[:3] == ["kubectl", "delete", "crd"]:
        words.append("--dry-run=server")
    if words[:2] == ["kubectl", "wait"]:  # the statuses are written before it runs: no need to wait long
        words = [w if not w.startswith("--timeout=") else "--timeout=20s" for w in words]
    return words


def remove_everything(lab: KubeLab) -> None:
    for release, namespace in RELEASES:
        run(lab, "helm", "uninstall", release, "-n", namespace, "--ignore-not-found")
    for namespace in NAMESPACES:
        run(lab, "kubectl", "delete", "namespace", namespace, "--ignore-not-found", "--wait=true")
    run(lab, "kubectl", "delete", "node", LAB_NODE, "--ignore-not-found")


def test_every_expectation_names_a_command_of_the_page() -> None:
    lines = {c.line for commands in sections().values() for c in commands}
    assert set(EXPECT) <= lines, set(EXPECT) - lines
    assert lines >= ELSEWHERE
    assert set(ORDER) == set(sections())


def test_the_operations_page_runs_against_the_api_server(
    kube_lab: KubeLab, installed_crds, metacontroller, kube_api
) -> None:
    cluster = Cluster(kube_api)
    before, after = preparations(cluster), checks(cluster)
    assert set(before) | set(after) <= {c.line for commands in sections().values() for c in commands}
    remove_everything(kube_lab)
    ran: list[str] = []
    try:
        for section in ORDER:
            for command in sections()[section]:
                if command.line in ELSEWHERE or tuple(command.words[:2]) in NEEDS_KUBELET:
                    continue
                if prepare := before.get(command.line):
                    prepare()
                words = as_run(command, cluster)
                proc: subprocess.CompletedProcess[str] = run(kube_lab, words[0], *words[1:])
                assert proc.returncode == 0, f"{command.line}\nexited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
                for text in EXPECT.get(command.line, []):
                    assert text in proc.stdout, f"{command.line}\nprinted no {text!r}:\n{proc.stdout}\n{proc.stderr}"
                if check := after.get(command.line):
                    check()
                ran.append(command.line)
    finally:
        remove_everything(kube_lab)
    assert len(ran) >= 35, ran
