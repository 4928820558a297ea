"""The operator as a user installs it (docs/getting-started.md, step 4), on the cluster lab: hack/cluster/up.sh
runs `helm install slurm-operator charts/slurm-operator`, and the chart's Deployments run the hook server and
slurm_sync from the project's image (built by `make test`, unpacked for the node agent) under the chart's
ServiceAccounts, authorized by the lab's API server from the RBAC the chart installed. Every other test of the
cluster lab runs on top of this install. With CLUSTER_LAB_OPERATOR=worktree (the developer's switch: both
processes on the host from the work tree) there is nothing of this to check, and these tests skip.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess

import pytest

from tests.cluster.plugin import KUBECTL, NAMESPACE, REPO, ClusterLab, ready

pytestmark = pytest.mark.cluster
OPERATOR_NS = "slinky"
RELEASE = "meta.helm.sh/release-name"  # helm's annotation on what a release installed
CLUSTER_RESOURCES = {  # hack/cluster/slurm-values.yaml's
    "Controller/slurm", "Accounting/slurm", "RestApi/slurm", "LoginSet/slurm-login-slinky",
    "NodeSet/slurm-worker-debug", "NodeSet/slurm-worker-elastic", "Token/slurm-token-slurm",
}  # fmt: skip
HOOKS = "app.kubernetes.io/name=slurm-operator-hooks,app.kubernetes.io/instance=slurm-operator"
SYNC = "app.kubernetes.io/name=slurm-operator-slurm-sync,app.kubernetes.io/instance=slurm-operator"
SYNC_ACCOUNT = f"system:serviceaccount:{OPERATOR_NS}:slurm-operator-slurm-sync"


@pytest.fixture(scope="module")
def lab(cluster_lab: ClusterLab) -> ClusterLab:
    if cluster_lab.sync_pods is None:
        pytest.skip("CLUSTER_LAB_OPERATOR=worktree: the operator runs from the work tree, not from the chart")
    return cluster_lab


def operator_pods(lab: ClusterLab, selector: str) -> list[dict]:
    pods = json.loads(lab.kubectl("get", "pods", "-n", OPERATOR_NS, "-l", selector, "-o", "json"))["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def releases(lab: ClusterLab) -> dict[tuple[str, str], dict]:
    """`helm list -A`: release by (name, namespace)."""
    helm = REPO / ".cache" / "bin" / "helm"
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig)}
    done = subprocess.run([str(helm), "list", "-A", "-o", "json"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return {(r["name"], r["namespace"]): r for r in json.loads(done.stdout)}


def test_helm_lists_the_operator_release_deployed(lab: ClusterLab) -> None:
    assert releases(lab)[("slurm-operator", OPERATOR_NS)]["status"] == "deployed"


def test_the_slurm_cluster_is_the_charts_release_and_every_resource_is_ready(cluster_lab: ClusterLab) -> None:
    """docs/getting-started.md, step 5, as hack/cluster/up.sh runs it (hack/cluster/slurm-values.yaml): the
    release is deployed, and every custom resource the other tests use is its own, Ready."""
    if cluster_lab.cluster != "chart":
        pytest.skip("CLUSTER_LAB_CLUSTER=examples: the cluster was applied from examples/crs/")
    assert releases(cluster_lab)[("slurm", NAMESPACE)]["status"] == "deployed"
    items = cluster_lab.get("controllers,accountings,restapis,loginsets,nodesets,tokens")["items"]
    by_name = {f"{i['kind']}/{i['metadata']['name']}": i for i in items}
    made = {k for k, i in by_name.items() if (i["metadata"].get("annotations") or {}).get(RELEASE) == "slurm"}
    assert made == CLUSTER_RESOURCES
    assert [k for k in made if not ready(by_name[k])] == []


@pytest.mark.parametrize(("selector", "container", "account"), [
    (HOOKS, "hooks", "slurm-operator-hooks"), (SYNC, "slurm-sync", "slurm-operator-slurm-sync"),
])  # fmt: skip
def test_the_charts_deployments_run_the_image_under_their_service_accounts(
    lab: ClusterLab, selector: str, container: str, account: str
) -> None:
    pods = operator_pods(lab, selector)
    assert len(pods) == 2 and all(ready(p) for p in pods), [p["status"].get("conditions") for p in pods]
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == account
        (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
        assert spec["image"] == lab.image
        # the image's own filesystem, not the lab's Debian sid tree: the base is bookworm, the code in /app,
        # run as the chart's non-root user
        probe = (
            "import os, sys; print(open('/etc/debian_version').read().strip(), sys.prefix, os.getcwd(), os.getuid())"
        )
        out = lab.exec(pod["metadata"]["name"], ["python", "-c", probe], container=container, namespace=OPERATOR_NS)
        version, prefix, cwd, uid = out.stdout.split()
        assert version.startswith("12.") and prefix == "/opt/venv" and cwd == "/app" and uid == "65532", out.stdout


def test_slurm_sync_calls_the_api_server_as_its_own_service_account(lab: ClusterLab) -> None:
    """The token in slurm_sync's pod is its ServiceAccount's, bound to that pod; the hook server's pod, which
    never calls the API server, has none (the chart turns automounting off)."""
    for pod in operator_pods(lab, SYNC):
        name = pod["metadata"]["name"]
        token = lab.exec(name, ["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"], container="slurm-sync",
                         namespace=OPERATOR_NS).stdout.strip()  # fmt: skip
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))
        assert claims["sub"] == SYNC_ACCOUNT and claims["kubernetes.io"]["pod"]["name"] == name
        who = json.loads(lab.kubectl("auth", "whoami", "-o", "json", f"--token={token}"))
        assert who["status"]["userInfo"]["username"] == SYNC_ACCOUNT
    for pod in operator_pods(lab, HOOKS):
        mounts = lab.exec(pod["metadata"]["name"], ["cat", "/proc/self/mounts"], container="hooks",
                          namespace=OPERATOR_NS).stdout  # fmt: skip
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts


@pytest.mark.parametrize(("args", "allowed"), [
    (("delete", "nodes"), False),
    (("patch", "pods", "-n", "slurm"), True),
    (("patch", "pods/status", "-n", "slurm"), True),
    (("update", "pods/status", "-n", "slurm"), False),
    (("get", "secrets", "-n", "slurm"), True),
    (("create", "pods", "-n", "slurm"), False),
    (("delete", "nodesets.slinky.slurm.net", "-n", "slurm"), False),
])  # fmt: skip
def test_can_i_answers_what_the_installed_chart_grants_slurm_sync(
    lab: ClusterLab, args: tuple[str, ...], allowed: bool
) -> None:
    """`kubectl auth can-i --as=<slurm_sync's ServiceAccount>`, answered by the lab's RBAC authorizer from the
    roles `helm install` made (tests/kube/test_rbac.py edits a Role and sees a request turn 403)."""
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(lab.kubeconfig), "auth", "can-i", *args,
                           f"--as={SYNC_ACCOUNT}"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout.strip() == ("yes" if allowed else "no"), (args, done.stdout, done.stderr)
