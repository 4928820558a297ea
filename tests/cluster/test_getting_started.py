"""docs/getting-started.md, steps 5 and 6, on the cluster lab: the page's own commands, with the real helm and
kubectl, from `helm install slurm charts/slurm` to `srun -N2 hostname` printing both workers.

Steps 1 to 4 install what the lab already runs (Metacontroller's stand-in and its CRDs; the operator chart,
which hack/cluster/up.sh installs with step 4's `helm install` from the image `make test` builds, checked by
test_install.py; tests/test_getting_started.py runs those steps' commands against the real API server). The
lab's example cluster lives in namespace `slurm`, so the page's `-n slurm` becomes `-n getting-started`;
`kubectl exec` is the lab's (hack/cluster/exec.sh), into the StatefulSet's one pod. The lab's hosts give pods
no cgroup v2 hierarchy, so `helm install` also gets the values step 5 gives for such nodes (without them slurmd
exits: "/sys/fs/cgroup is not a valid cgroup2 mountpoint"). The release is uninstalled at the end.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
import yaml

from tests.charts import helm
from tests.cluster.plugin import EXEC, KUBECTL, REPO, ClusterLab, eventually
from tests.support.operationsdoc import PUBLISHED_CHARTS, Command, local_charts, sections

pytestmark = pytest.mark.cluster
PAGE = REPO / "docs" / "getting-started.md"
NAMESPACE = "getting-started"


def step(number: str) -> list[Command]:
    (commands,) = [c for title, c in sections(PAGE).items() if title.startswith(f"{number}.")]
    return commands


def no_cgroup_v2_values() -> dict:
    """Step 5's values for nodes that give pods no cgroup v2 hierarchy (the page's one YAML block)."""
    body = PAGE.read_text().split("## 5.")[1].split("## 6.")[0]
    (block,) = re.findall(r"^```yaml\n(.*?)^```", body, flags=re.S | re.M)
    return yaml.safe_load(block)


def in_our_namespace(words: list[str]) -> list[str]:
    return [NAMESPACE if i and words[i - 1] == "-n" and w == "slurm" else w for i, w in enumerate(words)]


def run(lab: ClusterLab, words: list[str], timeout: float = 700) -> str:
    """A page command as a user types it in the repository's root (helm with no user configuration)."""
    binary = {"kubectl": KUBECTL, "helm": helm.helm()}[words[0]]
    with tempfile.TemporaryDirectory() as home:
        env = {**helm.isolated_env(home), "KUBECONFIG": str(lab.kubeconfig)}
        done = subprocess.run([str(binary), *words[1:]], capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, f"{' '.join(words)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def lab_exec(words: list[str]) -> str:
    """`kubectl exec -n NS statefulset/NAME -c C -- CMD...` in the lab: the StatefulSet's pod NAME-0."""
    command = Command(" ".join(words), words)
    (target,) = [w for w in words[: words.index("--")] if w.startswith("statefulset/")]
    container = command.option("-c")
    assert container, words
    argv = [str(EXEC), command.option("-n") or "", f"{target.split('/')[1]}-0", "--container", container,
            "--", *words[words.index("--") + 1 :]]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(words)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def pods_left(lab: ClusterLab) -> list[str]:
    return lab.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name").split()


@pytest.fixture
def release(cluster_lab: ClusterLab) -> Iterator[None]:
    yield
    run(cluster_lab, ["helm", "uninstall", "slurm", "-n", NAMESPACE, "--ignore-not-found", "--wait"])
    eventually("the release's pods gone", lambda: not pods_left(cluster_lab), timeout=300, interval=2)


def test_steps_five_and_six_end_with_srun_on_both_workers(cluster_lab: ClusterLab, release: None) -> None:
    install, listing, wait = step("5")
    assert install.words[:4] == ["helm", "install", "slurm", f"{PUBLISHED_CHARTS}slurm"], install.line
    assert wait.words[:2] == ["kubectl", "wait"], wait.line
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(no_cgroup_v2_values(), values)
        run(cluster_lab, [*in_our_namespace(local_charts(install.words)), "-f", values.name])
    assert "slurm-worker-cpu" in run(cluster_lab, in_our_namespace(listing.words))
    run(cluster_lab, in_our_namespace(wait.words))

    sinfo, srun = (in_our_namespace(c.words) for c in step("6"))
    assert srun[srun.index("--") + 1 :] == ["srun", "-N2", "hostname"], srun
    nodes = lab_exec(sinfo)
    assert "cpu-[0-1]" in nodes and "idle" in nodes and "all*" in nodes, nodes
    hosts = sorted(lab_exec(srun).split())
    assert hosts == ["cpu-0", "cpu-1"], hosts
