"""A documentation page's commands run on the cluster lab as a user types them (docs/getting-started.md,
docs/bridge.md): helm and kubectl with no user configuration, in the repository's root; `kubectl exec` into a
StatefulSet's pod through the lab's hack/cluster/exec.sh."""

from __future__ import annotations

import subprocess
import tempfile

from tests.charts import helm
from tests.cluster.plugin import EXEC, KUBECTL, REPO, ClusterLab
from tests.support.operationsdoc import Command


def page_command(lab: ClusterLab, words: list[str], timeout: float = 700) -> str:
    """A helm or kubectl command of a page; its output (an exit other than 0 fails, naming the command)."""
    binary = {"kubectl": KUBECTL, "helm": helm.helm()}[words[0]]
    with tempfile.TemporaryDirectory() as home:
        env = {**helm.isolated_env(home), "KUBECONFIG": str(lab.kubeconfig)}
        done = subprocess.run([str(binary), *words[1:]], capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, f"{' '.join(words)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def page_exec(words: list[str]) -> str:
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
