"""docs/migration.md, run: its shell blocks, in the page's order, with the real helm, kubectl and bash against the
real API server holding a Slinky install (tests/fixtures/slinky_install: Slinky's releases with real Helm records,
the CRDs owned by `slurm-operator-crds` or by the operator release, CRs, Secrets, Slinky's children of every CR,
its reservation finalizer, a drain in flight, bridge pods with its finalizer, its webhook configurations).

Then what the page promises is checked on the objects: every CR, Secret and pod is the object it was (same uid)
and the CRDs were never deleted; the finalizers left are Metacontroller's and slurm_sync's; Helm forgot
`slurm-operator-crds` and holds the CRDs in `slurm-operator` under `keep`; nothing of Slinky's operator, webhooks or
bridge is left; and this operator reconciles what Slinky made: its hooks answer every CR with Slinky's children
kept (no pod left out; the cordoned pod is the one drained), and slurm_sync's bridge planner keeps the running
bridge pod and its job.

The lab runs no kubelet, no controllers, no admission webhooks and no Metacontroller. The test stands in for two
of them, as tests/test_operations_commands.py does: a deployment controller that writes each Deployment's status
once its spec changed (so `kubectl rollout status` reads what it would), and Metacontroller's part after the
upgrade (step 6): for each CR, the customize hook names the related objects, the children are those labelled
`controller-uid=<uid>` (orphans adopted), the sync hook is called with them, its status written and, for
NodeSets, Metacontroller's finalizer added. Changed on the way: `kubectl scale` runs as the `kubectl patch` of
`spec.replicas` it amounts to (the lab serves no scale subresource). Not run: the `kubectl exec` of step 2 (no
kubelet). Not shown here: that a webhook of a stopped operator refuses writes (this API server calls no webhook;
the page's order is argued from Kubernetes' `failurePolicy: Fail`), Metacontroller applying our StatefulSets and
Deployments over Slinky's, and Slurm's side of drains and bridge jobs (the planner is fed the job states it would
read).

Besides the page: both roll backs, and the obvious ways the page warns against, done, deleting CRDs and CRs.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hooks.app import create_app
from slurm_sync.bridge import plan, view
from slurm_sync.slurm.types import Job
from tests.charts.helm import helm, isolated_env
from tests.fixtures import slinky_install
from tests.fixtures.slinky_install import GROUP, VERSION, Cluster, Installed, crd_uids, kept_uids
from tests.fixtures.slurm import wait_for
from tests.kube.cli import kubectl_binary, run
from tests.kube.kubeapi import plural
from tests.kube.plugin import KubeLab

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "migration.md"
PLACEHOLDERS = {"<registry>": "registry.example", "<tag>": "1.0.0"}
NEEDS_KUBELET = ("kubectl exec ",)
MIGRATION = (
    "Before you start",
    "1. Back up",
    "2. Look at the work in flight",
    "3. Stop Slinky's operator",
    "4. Make Helm forget the CRD release",
    "5. Hand Slinky's objects to Metacontroller",
    "6. Install this operator in Slinky's release",
    "7. Finalizers",
    "8. Drains in flight, after the swap",
    "9. The bridge",
    "Check",
)
ROLL_BACK = "Roll back"
PROSE = ("What the obvious way does", "The path, and why", "What the test shows, and what it cannot")
METACONTROLLER = "metacontroller.k8s.io"
NODESET_FINALIZER = "metacontroller.io/compositecontroller-slurm-operator-nodeset"
BRIDGE_POD_FINALIZER = "metacontroller.io/decoratorcontroller-slurm-bridge-pod"
KINDS = {"Controller": "controller", "NodeSet": "nodeset", "LoginSet": "loginset", "RestApi": "restapi",
         "Accounting": "accounting", "Token": "token"}  # fmt: skip
Obj = dict[str, Any]


# --- the page ------------------------------------------------------------------------------------------------


def sections() -> dict[str, list[str]]:
    """The ```sh blocks of each `## ` section, by its title, in the page's order."""
    parts = re.split(r"^## (.+)$", DOC.read_text(), flags=re.M)
    return {
        title.strip(): re.findall(r"^```sh\n(.*?)^```", body, flags=re.S | re.M)
        for title, body in zip(parts[1::2], parts[2::2], strict=True)
    }


SCALE = re.compile(r"^kubectl scale deployment -n (\S+) (.+) --replicas=(\d+)$")


def script(block: str) -> str:
    """The block as run: placeholders filled in, lines that need a kubelet left out, and `kubectl scale` made
    the same change to `spec.replicas` without the scale subresource, which the lab's API server does not serve."""
    lines = []
    for line in block.splitlines():
        if line.strip().startswith(NEEDS_KUBELET):
            continue
        if scale := SCALE.match(line):
            namespace, deployments, replicas = scale.groups()
            patch = f'\'{{"spec":{{"replicas":{replicas}}}}}\''
            line = f'for d in {deployments}; do kubectl patch deployment "$d" -n {namespace} -p {patch}; done'
        lines.append(line)
    text = "\n".join(lines) + "\n"
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


class Page:
    """Runs the page's blocks as a user pastes them into bash: in one working directory (where the backup
    goes), with the repository's charts and crds/ beside it, helm and kubectl on PATH, the lab as cluster."""

    def __init__(self, lab: KubeLab, workdir: Path) -> None:
        self.workdir = workdir
        for name in ("charts", "crds"):
            (workdir / name).symlink_to(REPO / name)
        home = workdir / ".home"
        home.mkdir()
        binaries = {helm().parent, kubectl_binary().parent}
        self.env = {
            **isolated_env(str(home)),
            "KUBECONFIG": str(lab.kubeconfig),
            "PATH": os.pathsep.join([*map(str, binaries), os.environ.get("PATH", "")]),
        }
        self.output: dict[str, str] = {}

    def run(self, title: str, block_index: int | None = None) -> str:
        """Run the section's blocks (or only its block number ``block_index``); their output."""
        out = []
        blocks = sections()[title]
        for block in blocks if block_index is None else [blocks[block_index]]:
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script(block)],
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.workdir,
                timeout=600,
                check=False,
            )
            assert proc.returncode == 0, f"{title}: exited {proc.returncode}\n{block}\n{proc.stdout}\n{proc.stderr}"
            out.append(proc.stdout + proc.stderr)
        self.output[title] = "\n".join(out)
        return self.output[title]


# --- stand-ins for what the lab does not run -----------------------------------------------------------------


class DeploymentController:
    """kube-controller-manager's deployment controller, as far as `kubectl rollout status` reads it: every
    Deployment's status follows its spec (a finished rollout) within a fraction of a second."""

    def __init__(self, lab: KubeLab) -> None:
        self.lab = lab
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="deployment-controller", daemon=True)

    def __enter__(self) -> DeploymentController:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)

    def loop(self) -> None:
        with self.lab.api_client() as api:
            apps = client.AppsV1Api(api)
            while not self.stopped.wait(0.2):
                try:
                    listed = json.loads(apps.list_deployment_for_all_namespaces(_preload_content=False).data)
                    for deployment in listed["items"]:
                        self.finish(apps, deployment)
                except ApiException:
                    continue  # a namespace going away; the next sweep sees the rest

    @staticmethod
    def finish(apps: client.AppsV1Api, deployment: Obj) -> None:
        meta, replicas = deployment["metadata"], deployment["spec"].get("replicas", 1)
        keys = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
        status = {"observedGeneration": meta["generation"], **dict.fromkeys(keys, replicas)}
        if any((deployment.get("status") or {}).get(k, 0) != v for k, v in status.items()):
            apps.patch_namespaced_deployment_status(meta["name"], meta["namespace"], {"status": status})


# The child and related resources our CompositeControllers name, read with the typed client.
def lister(api: client.ApiClient, api_version: str, resource: str) -> Any:
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    custom = client.CustomObjectsApi(api)
    if api_version == f"{GROUP}/{VERSION}":
        return lambda ns, **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, resource, **kw)
    return {
        ("v1", "pods"): core.list_namespaced_pod,
        ("v1", "services"): core.list_namespaced_service,
        ("v1", "configmaps"): core.list_namespaced_config_map,
        ("v1", "secrets"): core.list_namespaced_secret,
        ("v1", "persistentvolumeclaims"): core.list_namespaced_persistent_volume_claim,
        ("apps/v1", "statefulsets"): apps.list_namespaced_stateful_set,
        ("apps/v1", "deployments"): apps.list_namespaced_deployment,
        ("policy/v1", "poddisruptionbudgets"): policy.list_namespaced_pod_disruption_budget,
    }[(api_version, resource)]


def listed(api: client.ApiClient, api_version: str, resource: str, namespace: str, **kwargs: Any) -> list[Obj]:
    """Objects as Metacontroller passes them: plain JSON, each with its apiVersion and kind."""
    response = lister(api, api_version, resource)(namespace, _preload_content=False, **kwargs)
    body = json.loads(response.data) if hasattr(response, "data") else response
    kind = body["kind"].removesuffix("List")
    return [{"apiVersion": api_version, "kind": kind, **item} for item in body["items"]]


class Metacontroller:
    """One sync of a CR as Metacontroller does it with our CompositeController for its kind (read from the
    API server, as the chart installed it): customize, claim the children, sync, write the status."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.hooks = create_app().test_client()

    def composite(self, kind: str) -> Obj:
        name = f"slurm-operator-{KINDS[kind]}"
        found: Obj = self.custom.get_cluster_custom_object(METACONTROLLER, "v1alpha1", "compositecontrollers", name)
        return found

    def post(self, path: str, request: Obj) -> Obj:
        response = self.hooks.post(path, json=request)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.get_data(as_text=True)}"
        answer: Obj = response.get_json()
        return answer

    def related(self, kind: str, controller: Obj, parent: Obj) -> Obj:
        rules = self.post(f"/{KINDS[kind]}/customize", {"controller": controller, "parent": parent})
        related: Obj = {}
        for rule in rules.get("relatedResources") or []:
            selector = ",".join(
                f"{k}={v}" for k, v in ((rule.get("labelSelector") or {}).get("matchLabels") or {}).items()
            )
            for obj in listed(
                self.api, rule["apiVersion"], rule["resource"], rule["namespace"], label_selector=selector
            ):
                if not rule.get("names") or obj["metadata"]["name"] in rule["names"]:
                    meta = obj["metadata"]
                    related.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[
                        f"{meta['namespace']}/{meta['name']}"
                    ] = obj
        return related

    def children(self, controller: Obj, parent: Obj) -> Obj:
        """The children Metacontroller claims: labelled with the parent's uid, controlled by it or by nothing
        (then adopted: the controller reference added, as Metacontroller's adoptChild does)."""
        uid, found = parent["metadata"]["uid"], {}
        for child in controller["spec"]["childResources"]:
            group_kind: dict[str, Obj] = {}
            for obj in listed(self.api, child["apiVersion"], child["resource"], parent["metadata"]["namespace"],
                              label_selector=f"controller-uid={uid}"):  # fmt: skip
                refs = obj["metadata"].get("ownerReferences") or []
                controllers = [r for r in refs if r.get("controller")]
                if controllers and controllers[0]["uid"] != uid:
                    continue
                if not controllers:
                    obj = self.adopt(child, obj, parent)
                group_kind[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
            kind = KIND_OF[(child["apiVersion"], child["resource"])]
            found[f"{kind}.{child['apiVersion']}"] = group_kind
        return found

    def adopt(self, child: Obj, obj: Obj, parent: Obj) -> Obj:
        ref = {"apiVersion": parent["apiVersion"], "kind": parent["kind"], "name": parent["metadata"]["name"],
               "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        refs = [*(obj["metadata"].get("ownerReferences") or []), ref]
        patch = {"metadata": {"ownerReferences": refs}}
        meta = obj["metadata"]
        if child["resource"] == "services":
            client.CoreV1Api(self.api).patch_namespaced_service(meta["name"], meta["namespace"], patch)
        elif child["resource"] == "poddisruptionbudgets":
            client.PolicyV1Api(self.api).patch_namespaced_pod_disruption_budget(meta["name"], meta["namespace"], patch)
        elif child["resource"] == "secrets":
            client.CoreV1Api(self.api).patch_namespaced_secret(meta["name"], meta["namespace"], patch)
        else:
            raise AssertionError(f"no orphan {child['resource']} expected: {meta['name']}")
        obj["metadata"]["ownerReferences"] = refs
        return obj

    def sync(self, kind: str, parent: Obj, hook: str = "sync") -> tuple[Obj, Obj]:
        """The request and the answer of the sync hook (or, while the parent is deleted, the finalize hook)."""
        controller = self.composite(kind)
        request = {
            "controller": controller,
            "parent": parent,
            "children": self.children(controller, parent),
            "related": self.related(kind, controller, parent),
            "finalizing": hook == "finalize",
        }
        return request, self.post(f"/{KINDS[kind]}/{hook}", request)

    def reconcile(self, parent: Obj) -> Obj:
        """A sync as Metacontroller runs it: its finalizer first (a CompositeController with a finalize
        hook), then the hook, then the status."""
        kind, meta = parent["kind"], parent["metadata"]
        if "finalize" in self.composite(kind)["spec"]["hooks"] and NODESET_FINALIZER not in meta.get("finalizers", []):
            finalizers = [*meta.get("finalizers", []), NODESET_FINALIZER]
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"], plural(kind), meta["name"],
                                                       {"metadata": {"finalizers": finalizers}})  # fmt: skip
        _, answer = self.sync(kind, parent)
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], plural(kind), meta["name"], {"status": answer["status"]}
        )
        return answer


KIND_OF = {
    ("v1", "pods"): "Pod",
    ("v1", "services"): "Service",
    ("v1", "configmaps"): "ConfigMap",
    ("v1", "secrets"): "Secret",
    ("v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("apps/v1", "statefulsets"): "StatefulSet",
    ("apps/v1", "deployments"): "Deployment",
    ("policy/v1", "poddisruptionbudgets"): "PodDisruptionBudget",
}


# --- fixtures --------------------------------------------------------------------------------------------------


@pytest.fixture
def slinky(request: pytest.FixtureRequest, kube_lab: KubeLab, metacontroller, tmp_path: Path) -> Iterator[Installed]:
    """A Slinky install in the given layout (the test's parameter), removed afterwards with our CRDs restored."""
    layout = getattr(request, "param", "crds-release")
    with kube_lab.api_client() as api:
        charts = tmp_path / "slinky-charts"
        charts.mkdir()
        try:
            yield slinky_install.install(kube_lab, api, layout, charts)
        finally:
            slinky_install.remove(kube_lab, api)


@pytest.fixture
def page(kube_lab: KubeLab, tmp_path: Path) -> Iterator[Page]:
    workdir = tmp_path / "user"
    workdir.mkdir()
    with DeploymentController(kube_lab):
        yield Page(kube_lab, workdir)


# --- what holds after the page -------------------------------------------------------------------------------


def releases(lab: KubeLab) -> dict[tuple[str, str], Obj]:
    proc = run(lab, "helm", "list", "-A", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return {(r["name"], r["namespace"]): r for r in json.loads(proc.stdout)}


def exists(call: Any) -> bool:
    return not slinky_install.gone(call)


def assert_kept(api: client.ApiClient, installed: Installed, crds_before: dict[str, str]) -> None:
    """Every CR, Secret and pod of the install is the object it was; the CRDs were never deleted."""
    after = kept_uids(api)
    changed = {k: (v, after.get(k)) for k, v in installed.uids.items() if after.get(k) != v}
    assert changed == {}, f"gone or re-created (uid before, after): {changed}"
    assert crd_uids(api) == crds_before


def assert_finalizers(api: client.ApiClient) -> None:
    """Only Metacontroller's finalizers and slurm_sync's bridge finalizer are left (none of Slinky's)."""
    cluster = Cluster(api)
    on_crs = {
        f"{cr['kind']}/{cr['metadata']['name']}": cr["metadata"].get("finalizers", []) for cr in cluster.crs("slurm")
    }
    assert on_crs["NodeSet/slurm-worker-maint"] == [NODESET_FINALIZER]
    assert {k: v for k, v in on_crs.items() if set(v) - {NODESET_FINALIZER}} == {}
    for pod in cluster.items("pods", "slurm"):
        assert not pod["metadata"].get("finalizers"), pod["metadata"]["name"]
    for pod in cluster.items("pods", "slurm-bridge"):
        assert set(pod["metadata"].get("finalizers", [])) <= {slinky_install.BRIDGE_FINALIZER, BRIDGE_POD_FINALIZER}


def assert_helm(lab: KubeLab, api: client.ApiClient) -> None:
    """Helm forgot slurm-operator-crds; release slurm-operator is this chart and holds the CRDs under keep;
    Slinky's bridge release is gone and ours installed; Slinky's `slurm` release untouched."""
    found = releases(lab)
    assert ("slurm-operator-crds", "default") not in found
    records = client.CoreV1Api(api).list_secret_for_all_namespaces(label_selector="owner=helm,name=slurm-operator-crds")
    assert not records.items
    assert found[("slurm-operator", "slinky")]["chart"].startswith("slurm-operator-0.")
    assert found[("slurm-operator", "slinky")]["status"] == "deployed"
    assert found[("slurm", "slurm")]["chart"] == f"slurm-{slinky_install.SLINKY_VERSION}"
    assert ("slurm-bridge", "slurm") not in found
    assert found[("slurm-bridge", "slurm-bridge-system")]["status"] == "deployed"
    for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items:
        if crd.metadata.name in slinky_install.CRD_NAMES:
            annotations = crd.metadata.annotations or {}
            assert annotations.get("meta.helm.sh/release-name") == "slurm-operator", crd.metadata.name
            assert annotations.get("meta.helm.sh/release-namespace") == "slinky"
            assert annotations.get("helm.sh/resource-policy") == "keep"


def assert_slinky_gone(api: client.ApiClient) -> None:
    apps, admission = client.AppsV1Api(api), client.AdmissionregistrationV1Api(api)
    deployments = {d.metadata.name for d in apps.list_deployment_for_all_namespaces().items}
    slinky = {"slurm-operator", "slurm-operator-webhook", "slurm-bridge-scheduler", "slurm-bridge-controllers",
              "slurm-bridge-admission"}  # fmt: skip
    ours = {"slurm-operator-hooks", "slurm-operator-slurm-sync", "slurm-bridge-hooks", "slurm-bridge-slurm-sync"}
    assert not deployments & slinky and ours <= deployments, deployments
    webhooks = {w.metadata.name for w in admission.list_validating_webhook_configuration().items}
    webhooks |= {w.metadata.name for w in admission.list_mutating_webhook_configuration().items}
    assert webhooks == {"slurm-bridge"}  # ours
    custom = client.CustomObjectsApi(api)
    composites = custom.list_cluster_custom_object(METACONTROLLER, "v1alpha1", "compositecontrollers")["items"]
    assert {c["metadata"]["name"] for c in composites} == {f"slurm-operator-{k}" for k in KINDS.values()}


def assert_reconciled(api: client.ApiClient) -> None:
    """Our hooks answer every CR with what Slinky made: each child Slinky made is claimed (labelled) and stays
    a desired child, so Metacontroller deletes none; the NodeSet drains the pod Slinky was draining."""
    meta = Metacontroller(api)
    cluster = Cluster(api)
    made = {(i["object"]["kind"], i["object"]["metadata"]["name"]) for i in slinky_install.children()}
    claimed: set[tuple[str, str]] = set()
    for cr in cluster.crs("slurm"):
        request, answer = meta.sync(cr["kind"], cr)
        observed = {(o["kind"], o["metadata"]["name"]) for objs in request["children"].values() for o in objs.values()}
        desired = {(c["kind"], c["metadata"]["name"]) for c in answer["children"]}
        assert observed <= desired, f"{cr['kind']}/{cr['metadata']['name']} would delete {observed - desired}"
        claimed |= observed
        if cr["metadata"]["name"] == "slurm-worker-slinky":  # Slinky's scale-in goes on, its pod first
            draining = {p["name"]: p["reason"] for p in answer["status"]["drainingPods"]}
            assert draining["slurm-worker-slinky-1"].startswith("scale-in"), draining
        if cr["metadata"]["name"] == "slurm-worker-maint":  # the maintenance reservation keeps Slinky's name
            assert answer["status"]["reservation"]["name"] == "SlurmOperatorMaint-slurm-worker-maint"
    assert made <= claimed, f"Slinky's children no CR claims: {made - claimed}"
    # Deleting the NodeSet that carried Slinky's finalizer now runs our finalize hook: it keeps the pod, whose
    # node is busy, to drain it first (Metacontroller removes its finalizer once the hook says finalized).
    deleted = cluster.cr("NodeSet", "slurm", "slurm-worker-maint")
    deleted["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    _, answer = meta.sync("NodeSet", deleted, "finalize")
    assert answer["finalized"] is False
    assert [c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod"] == ["slurm-worker-maint-0"]
    assert [p["name"] for p in answer["status"]["drainingPods"]] == ["slurm-worker-maint-0"]


def assert_bridge(api: client.ApiClient) -> None:
    """The bridge pods are ours now, and slurm_sync's planner carries their jobs on: the running one keeps its
    pod (deleted only once its job ended), the pending one's job is updated with our hook's body."""
    hooks = create_app().test_client()
    custom = client.CustomObjectsApi(api)
    decorator = custom.get_cluster_custom_object(METACONTROLLER, "v1alpha1", "decoratorcontrollers", "slurm-bridge-pod")
    pods = []
    for pod in listed(api, "v1", "pods", "slurm-bridge"):
        assert pod["metadata"]["labels"].get("scheduler.slinky.slurm.net/managed") == "true", pod["metadata"]["name"]
        request = {"controller": decorator, "object": pod, "attachments": {}, "related": {}, "finalizing": False}
        response = hooks.post("/bridge/pod/sync", json=request)
        assert response.status_code == 200, response.get_data(as_text=True)
        annotations = {**(pod["metadata"].get("annotations") or {}), **response.get_json()["annotations"]}
        pod["metadata"]["annotations"] = {k: v for k, v in annotations.items() if v is not None}
        pods.append(view.read_pod(pod))
    nodes = {n: view.read_node({"metadata": {"name": n}}) for n in slinky_install.NODES}
    now = datetime.datetime.now(datetime.UTC)

    def job(job_id: int, state: str) -> Job:
        return Job(job_id, "slinky", frozenset({state}), "", "slinky-0" if job_id == 4711 else "", "", "slurm-bridge",
                   "slurm", 1000, "", "", frozenset({"EXTERNAL_JOB"}), None, None)  # fmt: skip

    running = plan.plan_pods(pods, nodes, {4711: job(4711, "RUNNING"), 4712: job(4712, "PENDING")}, {}, now, set(nodes))
    assert not running.deletes and not running.cancels and not running.submits, running
    assert [(u.job_id, [p.name for p in u.pods]) for u in running.updates] == [(4712, ["train-1"])]
    ended = plan.plan_pods(pods, nodes, {4711: job(4711, "COMPLETED"), 4712: job(4712, "PENDING")}, {}, now, set(nodes))
    assert [d.pod.name for d in ended.deletes] == ["train-0"]


# --- the tests -------------------------------------------------------------------------------------------------


def test_the_page_has_the_sections_the_test_runs() -> None:
    found = sections()
    assert list(found) == [*PROSE[:2], *MIGRATION, ROLL_BACK, PROSE[2]]
    assert all(found[title] for title in (*MIGRATION, ROLL_BACK))
    assert not any(found[title] for title in PROSE)
    for title in (*MIGRATION, ROLL_BACK):
        for block in found[title]:
            proc = subprocess.run(["bash", "-n", "-c", script(block)], capture_output=True, text=True, check=False)
            assert proc.returncode == 0, f"{title}: {proc.stderr}"


@pytest.mark.parametrize("slinky", slinky_install.LAYOUTS, indirect=True)
def test_the_migration_page_moves_a_running_slinky_install(kube_lab: KubeLab, slinky: Installed, page: Page) -> None:
    with kube_lab.api_client() as api:
        crds = crd_uids(api)
        owner = "slurm-operator-crds" if slinky.layout == "crds-release" else "slurm-operator"
        assert re.search(rf"nodesets\.slinky\.slurm\.net\s+{owner}\s", page.run("Before you start"))
        for title in MIGRATION:
            output = page.run(title)
            if title.startswith("3."):
                assert "No resources found" in output
            elif title.startswith("4."):
                assert ("slurm-operator-crds", "default") not in releases(kube_lab)
            elif title.startswith("6."):
                assert re.search(r"nodesets\.slinky\.slurm\.net\s+slurm-operator\s+keep", output), output
                assert "slurm-operator-nodeset" in output
                metacontroller = Metacontroller(api)
                for cr in Cluster(api).crs("slurm"):
                    metacontroller.reconcile(cr)
            elif title.startswith("7."):
                assert slinky_install.RESERVATION_FINALIZER not in output
            elif title.startswith("8."):
                assert re.search(r"slurm-worker-slinky\s+1\s+.*name:slurm-worker-slinky-1", output), output
            elif title == "Check":
                assert output.lstrip().startswith("KIND"), f"comm printed what went missing:\n{output}"
        assert_kept(api, slinky, crds)
        assert_finalizers(api)
        assert_helm(kube_lab, api)
        assert_slinky_gone(api)
        assert_reconciled(api)
        assert_bridge(api)
        # A CR deleted now goes: no finalizer of a stopped operator holds it.
        Cluster(api).custom.delete_namespaced_custom_object(GROUP, VERSION, "slurm", "loginsets", "slurm-login-slinky")
        wait_for(lambda: slinky_install.gone(lambda: Cluster(api).cr("LoginSet", "slurm", "slurm-login-slinky")),
                 bool, what="the LoginSet deleted")  # fmt: skip


@pytest.mark.parametrize(
    ("slinky", "when"),
    [("crds-release", "after step 6"), ("subchart", "after step 6"), ("crds-release", "before step 6")],
    indirect=["slinky"],
)
def test_rolling_back_brings_slinky_back(kube_lab: KubeLab, slinky: Installed, page: Page, when: str) -> None:
    last = "7. Finalizers" if when == "after step 6" else "5. Hand Slinky's objects to Metacontroller"
    with kube_lab.api_client() as api:
        crds = crd_uids(api)
        for title in MIGRATION[: MIGRATION.index(last) + 1]:
            page.run(title)
            if title.startswith("6."):
                for cr in Cluster(api).crs("slurm"):
                    Metacontroller(api).reconcile(cr)
        page.run(ROLL_BACK, 0 if when == "before step 6" else 1)
        assert_kept(api, slinky, crds)
        apps = client.AppsV1Api(api)
        deployments = {d.metadata.name: d.spec.replicas for d in apps.list_namespaced_deployment("slinky").items}
        assert deployments == {"slurm-operator": 1, "slurm-operator-webhook": 1}
        admission = client.AdmissionregistrationV1Api(api)
        assert exists(lambda: admission.read_validating_webhook_configuration("slurm-operator-webhook"))
        custom = client.CustomObjectsApi(api)
        assert not custom.list_cluster_custom_object(METACONTROLLER, "v1alpha1", "compositecontrollers")["items"]
        finalizers = {
            n["metadata"]["name"]: n["metadata"].get("finalizers") for n in Cluster(api).listed("NodeSet", "slurm")
        }
        if when == "after step 6":  # Metacontroller's taken off; Slinky's operator adds its own again
            assert finalizers == {"slurm-worker-slinky": None, "slurm-worker-maint": None}
        else:  # nothing touched them
            assert finalizers == {
                "slurm-worker-slinky": None,
                "slurm-worker-maint": [slinky_install.RESERVATION_FINALIZER],
            }
        history = run(kube_lab, "helm", "history", "slurm-operator", "-n", "slinky", "-o", "json")
        assert json.loads(history.stdout)[-1]["description"] == "Rollback to 1"


def test_the_obvious_way_deletes_every_custom_resource(kube_lab: KubeLab, slinky: Installed) -> None:
    """What docs/migration.md warns about, done: the install fails on ownership; a live `keep` annotation and
    kubectl taking the CRDs' fields do not stop `helm uninstall slurm-operator-crds` from deleting the CRDs, every
    CR with them and, by garbage collection, every pod they owned."""
    image = ["--set", "image.repository=registry.example/slinky-metacontroller", "--set", "image.tag=1.0.0"]
    taken = run(kube_lab, "helm", "install", "slurm-operator", "charts/slurm-operator", "-n", "slinky", *image)
    assert taken.returncode != 0 and re.search("cannot re-?use a name that is still in use", taken.stderr), taken.stderr
    owned = run(kube_lab, "helm", "install", "slurm-operator-mc", "charts/slurm-operator", "-n", "slinky", *image)
    assert owned.returncode != 0, owned.stdout
    assert "invalid ownership metadata" in owned.stderr and "slurm-operator-crds" in owned.stderr, owned.stderr
    crd_names = list(slinky_install.CRD_NAMES)
    kubectl = slinky_install.kubectl
    assert kubectl(kube_lab, "annotate", "crd", *crd_names, "helm.sh/resource-policy=keep").returncode == 0
    applied = kubectl(kube_lab, "apply", "--server-side", "--force-conflicts", "-f", "crds/")
    assert applied.returncode == 0, applied.stderr
    with kube_lab.api_client() as api:
        ext = client.ApiextensionsV1Api(api)
        crd = ext.read_custom_resource_definition(f"nodesets.{GROUP}")
        assert crd.metadata.annotations["meta.helm.sh/release-name"] == "slurm-operator-crds"  # the trap is armed
        uninstall = run(kube_lab, "helm", "uninstall", "slurm-operator-crds", "-n", "default")
        assert uninstall.returncode == 0, uninstall.stderr
        # Every CRD goes, and every CR with it, at once. The NodeSets CRD waits only for the NodeSet that Slinky's
        # reservation finalizer holds: it is being deleted too, and goes the moment its finalizer is removed.
        wait_for(
            lambda: set(crd_uids(api)), lambda left: left <= {f"nodesets.{GROUP}"}, timeout=60, what="CRDs deleted"
        )
        crd = ext.read_custom_resource_definition(f"nodesets.{GROUP}")
        assert crd.metadata.deletion_timestamp is not None
        cluster = Cluster(api)
        nodesets = wait_for(
            lambda: cluster.listed("NodeSet", "slurm"), lambda left: len(left) == 1, what="NodeSets gone"
        )
        assert nodesets[0]["metadata"]["name"] == "slurm-worker-maint" and nodesets[0]["metadata"]["deletionTimestamp"]
        core = client.CoreV1Api(api)
        wait_for(lambda: sorted(p.metadata.name for p in core.list_namespaced_pod("slurm").items),
                 lambda left: left == ["slurm-worker-maint-0"], timeout=60,
                 what="the other NodeSet's pods garbage-collected, busy or draining")  # fmt: skip
        for kind in ("Controller", "LoginSet", "RestApi", "Accounting", "Token"):
            assert slinky_install.gone(lambda kind=kind: cluster.listed(kind, "slurm")), kind


def test_this_operator_is_not_put_over_a_running_slinky_operator(kube_lab: KubeLab, slinky: Installed) -> None:
    """Step 6 before step 3: the chart refuses the upgrade while Slinky's operator runs (two operators would write
    the same objects), naming the step; once the webhook configuration is gone and the operator is scaled to 0,
    the same upgrade passes the check."""
    image = ["--set", "image.repository=registry.example/slinky-metacontroller", "--set", "image.tag=1.0.0"]
    upgrade = ["helm", "upgrade", "slurm-operator", "charts/slurm-operator", "-n", "slinky", "--reset-values"]
    upgrade += ["--set", "crds.enabled=true", "--take-ownership", *image, "--dry-run=server"]
    refused = run(kube_lab, *upgrade)
    assert refused.returncode != 0, refused.stdout
    assert "Slinky's operator still runs" in refused.stderr and "docs/migration.md, step 3" in refused.stderr
    kubectl = slinky_install.kubectl
    for deployment in ("slurm-operator", "slurm-operator-webhook"):  # `kubectl scale`: the lab has no scale subresource
        stopped = '{"spec":{"replicas":0}}'
        assert kubectl(kube_lab, "patch", "deployment", "-n", "slinky", deployment, "-p", stopped).returncode == 0
    webhook = run(kube_lab, *upgrade)
    assert webhook.returncode != 0 and "slurm-operator-webhook is still there" in webhook.stderr, webhook.stderr
    assert kubectl(kube_lab, "delete", "validatingwebhookconfigurations", "slurm-operator-webhook").returncode == 0
    passed = run(kube_lab, *upgrade)
    assert "Slinky's" not in passed.stderr, passed.stderr


@pytest.mark.parametrize("slinky", ["subchart"], indirect=True)
def test_uninstalling_slinkys_operator_release_deletes_the_crds_it_carries(
    kube_lab: KubeLab, slinky: Installed
) -> None:
    """With `crds.enabled=true` the CRDs are part of Slinky's operator release: uninstalling it first, to make
    room for this operator, deletes them and every CR (the page's fourth warning)."""
    uninstall = run(kube_lab, "helm", "uninstall", "slurm-operator", "-n", "slinky")
    assert uninstall.returncode == 0, uninstall.stderr
    with kube_lab.api_client() as api:
        wait_for(
            lambda: set(crd_uids(api)), lambda left: left <= {f"nodesets.{GROUP}"}, timeout=60, what="CRDs deleted"
        )
        assert [n["metadata"]["name"] for n in Cluster(api).listed("NodeSet", "slurm")] == ["slurm-worker-maint"]
