"""Elastic NodeSets on the cluster lab: from a job's submission to its node's pod (docs/architecture.md §4.9).

Every part is real but the stand-ins of the cluster lab (docs/cluster-lab.md): slurmctld decides, slurm_sync reads
it through slurmrestd and writes the power report, the Metacontroller stand-in calls the NodeSet hook, which
answers with the pod. Each trial submits a one-node job to one powered-down node of
examples/crs/nodeset-elastic.yaml (`-w`, the four nodes in turn, each waited for until it is powered down again
and has no pod) and takes three times:

* the submission and Slurm's allocation, from slurmctld's own log (milliseconds, the host's clock);
* Slurm's power-up request: the node's state is sampled (`scontrol show node`, back to back) and the request
  taken at the last sample before the first one no longer powered down, an early bound, so our part is never
  measured shorter than it is (slurmctld 26.05 logs no line for it);
* the pod's creation, when a watch of the API server from this process first sees it.

Slurm's part (submission to power-up request: its batch scheduler, then its power-saving thread; a floor this
project does not set) is reported beside ours (power-up request to pod: slurm_sync, the NodeSet hook,
Metacontroller). The budget is on ours. The lab is the checkout's: started for the suite when it is not up, and
then stopped after.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes import watch as kwatch

from bench.measure import Budget, Report, percentile

TITLE = "elastic NodeSet on the cluster lab: a job's submission and Slurm's power-up request to its pod"
REPO = Path(__file__).resolve().parent.parent
LAB = REPO / ".cluster-lab"
NAMESPACE = "slurm"
NODESET = "slurm-worker-elastic"
PARTITION = "elastic"
NODES = tuple(f"elastic-{i}" for i in range(4))
BUDGET_P95 = 3.0  # seconds from Slurm's power-up request to the pod (issue 26)
TRIAL_TIMEOUT = 60.0
READY_TIMEOUT = 240.0  # a node idle for the lab's suspendTime (30 s), powered down (SuspendTimeout, 30 s)
KUBECONFIG = LAB / "kube" / "kubeconfig"
T = TypeVar("T")
SLURMCTLD_LOG = LAB / "logs" / "pods" / f"{NAMESPACE}_slurm-controller-0" / "slurmctld.log"


@dataclass(frozen=True)
class Trial:
    submitted: float  # epoch seconds, slurmctld's log
    allocated: float | None  # None: the backfill scheduler started it, which logs no line at this level
    woken: float  # Slurm's power-up request
    pod: float  # this process's clock when the watch saw the pod

    @property
    def scheduling(self) -> float | None:
        return None if self.allocated is None else self.allocated - self.submitted

    @property
    def power_up(self) -> float | None:
        return None if self.allocated is None else self.woken - self.allocated

    @property
    def requested(self) -> float:
        return self.woken - self.submitted

    @property
    def reaction(self) -> float:
        return self.pod - self.woken

    @property
    def total(self) -> float:
        return self.pod - self.submitted


class PodWatch:
    """When each of the NodeSet's pods was first seen after each (re)creation, by its uid."""

    def __init__(self, kubeconfig: str) -> None:
        self.api = kclient.CoreV1Api(kconfig.new_client_from_config(config_file=kubeconfig))
        self.seen: dict[str, tuple[str, float]] = {}  # uid -> (pod name, time first seen)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            stream = kwatch.Watch().stream(
                self.api.list_namespaced_pod,
                NAMESPACE,
                label_selector=f"app.kubernetes.io/instance={NODESET}",
                timeout_seconds=30,
            )
            try:
                for event in stream:
                    meta = event["object"].metadata
                    with self.lock:
                        self.seen.setdefault(meta.uid, (meta.name, time.time()))
            except Exception:  # a dropped watch: start another
                time.sleep(0.2)

    def first_after(self, name: str, since: float) -> float | None:
        with self.lock:
            times = [t for pod, t in self.seen.values() if pod == name and t >= since]
        return min(times, default=None)


def run(quick: bool = False) -> Report:
    trials = 6 if quick else 20
    started_here = not (LAB / "env").exists()
    if started_here:
        subprocess.run([str(REPO / "hack" / "cluster" / "up.sh")], check=True, capture_output=True, timeout=900)
    try:
        watch = PodWatch(str(KUBECONFIG))
        try:
            return _report([_trial(watch, NODES[i % len(NODES)]) for i in range(trials)])
        finally:
            watch.stop.set()
    finally:
        if started_here:
            subprocess.run([str(REPO / "hack" / "cluster" / "down.sh")], capture_output=True, check=False)


def _trial(watch: PodWatch, node: str) -> Trial:
    pod = f"{NODESET}-{node.rsplit('-', 1)[1]}"
    _until(lambda: _state(node) == "idle~" and _no_pod(pod), f"{node} powered down, without a pod", READY_TIMEOUT)
    since = time.time()
    out = _exec("sbatch", "--parsable", "-p", PARTITION, "-w", node, "-N1", "-t", "5", "--chdir=/tmp",
                "-o", "/dev/null", "--wrap", "sleep 1")  # fmt: skip
    job = out.strip()
    woken = _power_up_request(node, since)
    seen = _until(lambda: watch.first_after(pod, since), f"the pod of {node} for job {job}", TRIAL_TIMEOUT)
    submitted, allocated = _log_times(job)
    _exec("scancel", job)  # measured: the node registers, idles for suspendTime and is powered down for the next
    return Trial(submitted, allocated, woken, seen)


def _power_up_request(node: str, since: float) -> float:
    """The last sample of the node's state before the first one no longer powered down (POWERING_UP, or already
    registered when the sampling missed that short state): an early bound."""
    before = since
    deadline = time.monotonic() + TRIAL_TIMEOUT
    while time.monotonic() < deadline:
        sampled = time.time()
        fields = dict(re.findall(r"(\w+)=(\S*)", _exec("scontrol", "show", "node", node, "--oneliner")))
        if "POWERED_DOWN" not in fields.get("State", "POWERED_DOWN"):
            return before
        before = sampled
    raise RuntimeError(f"timed out after {TRIAL_TIMEOUT:.0f} s waiting for Slurm to power {node} up")


def _no_pod(pod: str) -> bool:
    done = subprocess.run(
        [str(REPO / ".cache" / "bin" / "kubectl"), "--kubeconfig", str(KUBECONFIG), "get", "pod",
         "-n", NAMESPACE, pod, "--ignore-not-found", "-o", "name"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode == 0 and not done.stdout.strip()


def _state(node: str) -> str:
    return _exec("sinfo", "-n", node, "-h", "-o", "%t").strip()


def _exec(*command: str) -> str:
    done = subprocess.run(
        [str(REPO / "hack" / "cluster" / "exec.sh"), NAMESPACE, "slurm-controller-0", "--", *command],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout


def _log_times(job: str) -> tuple[float, float | None]:
    """The job's submission and allocation by the main scheduler (None when the backfill scheduler started it),
    from slurmctld's log: waited for the submission, read once the pod is there (the allocation came before)."""

    def find() -> str | None:
        text = SLURMCTLD_LOG.read_text(errors="replace")
        return text if re.search(rf"_slurm_rpc_submit_batch_job: JobId={job} ", text) else None

    text = _until(find, f"job {job} in slurmctld's log", 30)
    submitted = re.search(rf"\[([0-9T:.-]+)\] _slurm_rpc_submit_batch_job: JobId={job} ", text)
    allocated = re.search(rf"\[([0-9T:.-]+)\] sched: Allocate JobId={job} ", text)
    assert submitted is not None
    return _epoch(submitted.group(1)), _epoch(allocated.group(1)) if allocated else None


def _epoch(stamp: str) -> float:
    """slurmctld's local time (the lab's containers run in UTC, as the host)."""
    return datetime.fromisoformat(stamp).astimezone().timestamp()


def _until(probe: Callable[[], T | None], what: str, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def _report(trials: list[Trial]) -> Report:
    rows = []
    for label, measured in (
        ("submission -> Slurm's allocation (its scheduler)", [t.scheduling for t in trials]),
        ("allocation -> Slurm's power-up request (its power saving)", [t.power_up for t in trials]),
        ("submission -> Slurm's power-up request (Slurm's whole part)", [t.requested for t in trials]),
        ("power-up request -> pod created (slurm_sync, hook, Metacontroller)", [t.reaction for t in trials]),
        ("submission -> pod created", [t.total for t in trials]),
    ):
        values = [v for v in measured if v is not None]
        rows.append(
            [
                label,
                str(len(values)),
                *(f"{v:.2f} s" for v in (percentile(values, 50), percentile(values, 95), max(values))),
            ]
        )
    reaction_p95 = percentile([t.reaction for t in trials], 95)
    return Report(
        title=TITLE,
        columns=["interval", "trials", "p50", "p95", "max"],
        rows=rows,
        notes=[
            f"{len(trials)} trials, each a one-node job on a powered-down node of {NODESET} (the four in turn);",
            "Slurm's part is the floor; ours starts at its power-up request (a pod made before it would never",
            "register the node). A job the backfill scheduler starts has no allocation line in slurmctld's log.",
        ],
        budgets=[Budget("elastic: power-up request -> pod created, p95", reaction_p95, BUDGET_P95, unit=" s")],
    )
