"""A seeded random run of the bridge on the cluster lab (issue 42), beside the native cluster: pods created
(some exit at once, some run long) and deleted, their jobs cancelled with `scancel`, the bridge's node cordoned
and uncordoned, the bridge's slurm_sync leader killed as a crash would, native batch jobs submitted to the
NodeSet's partition. Checked while it runs: a pod the agent runs has a job Slurm runs on that node (a pod
that outlives its job is ended within GRACE). At the end, everything let go: every pod gone (none stuck
Terminating), no placeholder job left in Slurm, the node not drained, every native job COMPLETED (none lost).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slinky_common import names
from tests.cluster.lab import CONTROLLER_POD
from tests.cluster.plugin import ClusterLab, container_dir, container_pid, eventually

GRACE = 30.0  # seconds a pod may run on after its job ended (a pass, plus a leader's take-over)
MAX_LIVE = 6  # pods alive at once: each takes the node whole, so more only lengthen the queue
POD_SECONDS = (0, 1, 3, 8, 30)
NATIVE_PARTITION = "debug"


@dataclass
class BridgeRun:
    """One seed's run: ``step`` draws and carries out one operation, ``check`` looks at the invariant, ``finish``
    lets everything go and returns what went wrong (empty: nothing)."""

    lab: ClusterLab
    node: str  # the Node given to the bridge
    seed: int
    namespace: str  # the managed namespace
    partition: str  # the bridge's
    release_namespace: str  # where the bridge's slurm_sync runs
    rng: random.Random = field(init=False)
    live: list[str] = field(default_factory=list)  # pods created and not deleted by the run
    created: list[str] = field(default_factory=list)
    native: dict[str, str] = field(default_factory=dict)  # job id -> what it was
    cordoned: bool = False
    kills: int = 0
    last_kill: int = -100
    log: list[str] = field(default_factory=list)
    outliving: dict[str, float] = field(default_factory=dict)  # pod -> first seen running without its job

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # --- reads ------------------------------------------------------------------------------

    def slurm(self, *command: str) -> str:
        return self.lab.exec(CONTROLLER_POD, list(command), timeout=90).stdout

    def pods(self) -> list[dict]:
        return json.loads(self.lab.kubectl("get", "pods", "-n", self.namespace, "-o", "json"))["items"]

    def running_jobs(self) -> dict[str, str]:
        """Job id -> node list of every RUNNING job of the bridge's partition."""
        out = self.slurm("squeue", "-h", "-p", self.partition, "-t", "RUNNING", "-o", "%i %N")
        return dict(line.split(maxsplit=1) for line in out.splitlines() if len(line.split()) == 2)

    # --- operations -------------------------------------------------------------------------

    def step(self, index: int) -> str:
        operations: list[tuple[Callable[[int], str | None], int]] = [
            (self.create, 5), (self.delete, 2), (self.scancel, 2), (self.cordon, 1), (self.kill_leader, 1),
            (self.submit_native, 2), (self.pause, 2),
        ]  # fmt: skip
        while True:
            operation = self.rng.choices([o for o, _ in operations], [w for _, w in operations])[0]
            done = operation(index)
            if done is not None:
                self.log.append(f"{index:3d} {done}")
                return done

    def create(self, index: int) -> str | None:
        if len(self.live) >= MAX_LIVE:
            return None
        seconds = self.rng.choice(POD_SECONDS)
        name = f"run-{self.seed}-{index:03d}"
        container = {"name": "c", "image": "busybox", "command": ["sleep", str(seconds)]}
        spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 3, "containers": [container]}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}
        self.lab.kubectl("create", "-f", "-", input_text=json.dumps(pod))
        self.live.append(name)
        self.created.append(name)
        return f"create pod {name} (sleep {seconds})"

    def delete(self, index: int) -> str | None:
        if not self.live:
            return None
        name = self.live.pop(self.rng.randrange(len(self.live)))
        self.lab.kubectl("delete", "pod", name, "-n", self.namespace, "--wait=false", "--ignore-not-found")
        return f"delete pod {name}"

    def scancel(self, index: int) -> str | None:
        running = self.running_jobs()
        if not running:
            return None
        job = self.rng.choice(sorted(running))
        self.slurm("scancel", job)
        return f"scancel {job} (a pod's job)"

    def cordon(self, index: int) -> str:
        self.cordoned = not self.cordoned
        self.lab.kubectl("cordon" if self.cordoned else "uncordon", self.node)
        return f"{'cordon' if self.cordoned else 'uncordon'} {self.node}"

    def kill_leader(self, index: int) -> str | None:
        if index - self.last_kill < 10:  # a take-over takes a lease's time: not one after another
            return None
        lease = json.loads(self.lab.kubectl("get", "lease", "-n", self.release_namespace, "-o", "json"))["items"]
        holders = [(item["spec"].get("holderIdentity") or "").rsplit("_", 1)[0] for item in lease]
        holder = next((h for h in holders if h), None)
        if holder is None:
            return None
        pid = container_pid(container_dir(self.release_namespace, holder, "slurm-sync"))
        if not pid:
            return None
        os.kill(pid, signal.SIGKILL)
        self.kills += 1
        self.last_kill = index
        return f"kill the bridge's slurm_sync leader {holder} (pid {pid})"

    def submit_native(self, index: int) -> str:
        seconds = self.rng.randint(1, 8)
        job = self.slurm("sbatch", "--parsable", "-p", NATIVE_PARTITION, "-N1", "-t", "5", "--chdir=/tmp", "-o",
                         "/dev/null", "--wrap", f"sleep {seconds}").strip()  # fmt: skip
        self.native[job] = f"sleep {seconds}"
        return f"native job {job} (sleep {seconds})"

    def pause(self, index: int) -> str:
        seconds = self.rng.choice((1, 2, 5))
        time.sleep(seconds)
        return f"pause {seconds} s"

    # --- checks -----------------------------------------------------------------------------

    def check(self) -> str | None:
        """A pod the node's agent runs (Running, not being deleted) whose job Slurm no longer runs there, for
        longer than GRACE: what it says, else None."""
        pods, running, now = self.pods(), self.running_jobs(), time.monotonic()
        alive = set()
        for pod in pods:
            name, job = pod["metadata"]["name"], pod["metadata"].get("labels", {}).get(names.LABEL_SLURM_JOB_ID)
            if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            if job in running and running[job] == pod["spec"].get("nodeName"):
                continue
            alive.add(name)
            first = self.outliving.setdefault(name, now)
            if now - first > GRACE:
                return f"pod {name} runs on {pod['spec'].get('nodeName')} without its job {job} for {now - first:.0f} s"
        self.outliving = {n: t for n, t in self.outliving.items() if n in alive}
        return None

    def finish(self) -> list[str]:
        """Let everything go; what is wrong after (empty when nothing)."""
        if self.cordoned:
            self.cordon(-1)
        self.lab.kubectl("delete", "pods", "-n", self.namespace, "--all", "--wait=false")
        problems = []
        stuck = self._settle(lambda: [p["metadata"]["name"] for p in self.pods()])
        if stuck:
            problems.append(f"pods stuck: {stuck}")
        orphans = self._settle(lambda: self.slurm("squeue", "-h", "-p", self.partition, "-o", "%i %T").split())
        if orphans:
            problems.append(f"placeholder jobs left: {orphans}")
        if self._settle(lambda: "DRAIN" in self.slurm("sinfo", "-h", "-n", self.node, "-o", "%T")):
            state = self.slurm("scontrol", "-o", "show", "node", self.node)
            problems.append(f"{self.node} left drained: {state.strip()[:300]}")
        lost = self.lost_native()
        if lost:
            problems.append(f"native jobs lost: {lost}")
        return problems

    def lost_native(self) -> dict[str, str]:
        """Native jobs that did not end COMPLETED (waiting for those still queued or running)."""
        if not self.native:
            return {}

        def ended() -> dict[str, str] | None:
            out = self.slurm("sacct", "-X", "-D", "-n", "-P", "-o", "JobID,State", "-j", ",".join(self.native))
            states = {j: s.split()[0] for j, _, s in (line.partition("|") for line in out.splitlines()) if s}
            if any(states.get(j, "PENDING") in ("PENDING", "RUNNING", "CONFIGURING") for j in self.native):
                return None
            return states

        states = eventually("every native job ended", ended, timeout=120, interval=2)
        return {j: f"{states.get(j)} ({what})" for j, what in self.native.items() if states.get(j) != "COMPLETED"}

    @staticmethod
    def _settle(left: Callable[[], object]) -> object:
        """``left()`` until it is empty (120 s): empty, or what was left."""
        deadline = time.monotonic() + 120
        while (remaining := left()) and time.monotonic() < deadline:
            time.sleep(1)
        return remaining
