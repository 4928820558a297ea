"""The two sides under chaos, each a real slurm_sync talking to the lab through the fault proxy and
to a fake apiserver, around a job that really runs in the lab.

* Operator: the job runs on ``n3``; its NodeSet pod ``gpu-n3`` is condemned (``drainingPods``), so
  ``n3`` is draining and the pod protected. When the fault starts ``gpu-n4`` (idle ``n4``) is
  condemned too: a tempting drained mark, and the proof of recovery once the fault clears.
* Bridge: the job of pod ``steady`` runs on ``n1`` or ``n2`` and the pod is bound. When the fault
  starts a new pod arrives (its job held): a tempting submission, and the proof of recovery.

The jobs live for the whole module (scenes); each test builds a fresh slurm_sync and fake
apiserver around them and judges every write as it happens (tests.chaos.rules).
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from slinky_common import names
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop, BridgeResult
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from tests.chaos import rules
from tests.chaos.faults import CLIENT_TIMEOUT, CONFIRM_SECONDS
from tests.chaos.proxy import FaultProxy
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.slurm_sync.bridgekube import BNS, BridgeFake, bridge_pod, job_body
from tests.slurm_sync.bridgekube import kube_node as bridge_node
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_pod, kube_node, nodeset, pod

INTENT = "scale-in to 1 replicas"
OUR_REASON = f"slurm-operator: {INTENT}"
BUSY_NODE = "n3"
SPARE_NODE = "n4"
POD_NODES = {"gpu-n3": BUSY_NODE, "gpu-n4": SPARE_NODE}
LAB_NODES = ("n1", "n2", "n3", "n4")
ON_N1_N2 = {"constraints": "n1|n2"}
SCENE_MINUTES = 60  # the scene jobs' time limit: longer than the module runs
Install = Callable[[FakeKube], None]  # serves a fake apiserver on the test's httpserver


def job_state(lab: SlurmLab, job_id: int) -> str:
    """The job's state as slurmctld has it (scontrol, never the proxy)."""
    shown = lab.run("scontrol", "show", "job", str(job_id)).stdout
    found = re.search(r"\bJobState=(\S+)", shown)
    return found.group(1) if found else "GONE"


def job_node(lab: SlurmLab, job_id: int) -> str:
    found = re.search(r"\n\s+NodeList=(\S+)", lab.run("scontrol", "show", "job", str(job_id), check=True).stdout)
    assert found, f"job {job_id} has no NodeList"
    return found.group(1)


def wait_running(lab: SlurmLab, job_id: int) -> None:
    wait_for(lambda: job_state(lab, job_id), lambda s: s == "RUNNING", what=f"job {job_id} running")


@dataclass
class Judge:
    """Collects wrong writes and other failures of one trial. Operator writes are judged against
    the real Slurm read right after their pass, or, while it cannot be read, after the next pass
    that can (nothing reaches Slurm meanwhile, so the truth is the same)."""

    lab: SlurmLab
    wrongs: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    pending: list[rules.KubeWrite] = field(default_factory=list)
    blind: bool = False  # the lab is down: do not even try to read the truth

    def operator_writes(self, writes: list[rules.KubeWrite]) -> None:
        self.pending += writes
        truth = None if self.blind else rules.real_nodes(self.lab)
        if truth is not None:
            self.wrongs += rules.operator_kube_wrongs(self.pending, truth, POD_NODES)
            self.pending.clear()

    def check(self, ok: bool, failure: str) -> None:
        if not ok:
            self.failures.append(failure)


# --- operator ---------------------------------------------------------------------------------


@dataclass
class OperatorScene:
    """The module's running job on n3 (resubmitted if a trial ended it)."""

    lab: SlurmLab
    job: int = 0

    def ensure(self) -> None:
        if self.job and job_state(self.lab, self.job) == "RUNNING":
            return
        argv = ("sbatch", "-w", BUSY_NODE, "-t", str(SCENE_MINUTES), "-o", "/dev/null", "--wrap", "sleep 3600")
        done = self.lab.run(*argv, check=True)
        self.job = int(re.search(r"Submitted batch job (\d+)", done.stdout).group(1))  # type: ignore[union-attr]
        wait_running(self.lab, self.job)

    def close(self) -> None:
        if self.job:
            self.lab.run("scancel", str(self.job))
        for node in (BUSY_NODE, SPARE_NODE):
            self.lab.run("scontrol", "update", f"nodename={node}", "state=resume")
            self.lab.run("scontrol", "update", f"nodename={node}", "comment=")


@dataclass
class OperatorRig:
    side: ClassVar[str] = "operator"
    scene: OperatorScene
    proxy: FaultProxy
    kube: FakeKube
    service: Service
    judge: Judge

    @classmethod
    def build(cls, scene: OperatorScene, proxy: FaultProxy, kube_url: str, install: Install) -> OperatorRig:
        lab = scene.lab
        ping = httpx.get(lab.rest_url + lab.path("ping"), headers=lab.headers, timeout=10).json()
        kube = FakeKube()
        kube.add("controllers", {"metadata": {"name": "slurm", "namespace": NS},
                                 "spec": {"clusterName": ping["meta"]["slurm"]["cluster"],
                                          "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"}}})  # fmt: skip
        restapi = {"name": "slurm", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"}
        kube.add("restapis", {"metadata": restapi, "spec": {"controllerRef": {"name": "slurm"}}})
        key = base64.b64encode(lab.jwt_key_file.read_bytes()).decode()
        kube.add("secrets", {"metadata": {"name": "slurm-jwt", "namespace": NS, "resourceVersion": "1"},
                             "data": {"jwt.key": key}})  # fmt: skip
        kube.add("nodesets", nodeset({"gpu-n3": INTENT}))
        kube.add("nodes", kube_node())
        for name, node in POD_NODES.items():
            kube.add("pods", pod(name, node))
        kube.add("pods", controller_pod(ping["pings"][0]["hostname"]))
        install(kube)
        metrics = Metrics()
        config = Config(
            namespaces=(NS,),
            slurm_url=proxy.url,
            token_user="slurm",
            slurm_timeout=CLIENT_TIMEOUT,
            absence_confirm_seconds=CONFIRM_SECONDS,
        )
        service = Service(config, Kube(api_client(kube_url), metrics.count_kube_write), metrics)
        return cls(scene, proxy, kube, service, Judge(lab))

    def metadata(self, name: str) -> dict[str, Any]:
        return self.kube.get("pods", NS, name)["metadata"]

    def conditions(self, name: str) -> set[str]:
        conditions = self.kube.get("pods", NS, name)["status"]["conditions"]
        return {c["type"] for c in conditions if c["type"].startswith("SlurmNodeState")}

    def step(self) -> bool:
        """One pass, its Kubernetes writes judged against the real Slurm right after it."""
        before = len(self.kube.writes)
        self.proxy.begin_pass()
        ok = self.service.run_pass()
        self.judge.operator_writes(self.kube.writes[before:])
        return ok and self.ready()[0]

    def ready(self) -> tuple[bool, str]:
        """What ``/readyz`` would answer (and why not ready)."""
        return self.service.health.ready()

    def holds_the_job(self) -> bool:
        """gpu-n3 as a draining, busy pod: protected, Drain condition, no drained or absent mark."""
        meta = self.metadata("gpu-n3")
        annotations = meta.get("annotations") or {}
        marked = names.ANNOTATION_DRAINED in annotations or names.ANNOTATION_SLURM_NODE_ABSENT in annotations
        protected = meta["labels"].get(names.LABEL_POD_PROTECT) == "true"
        return protected and "SlurmNodeStateDrain" in self.conditions("gpu-n3") and not marked

    def settle(self) -> None:
        """Passes until the scene stands: n3 drained by us (job running), gpu-n3 holding it."""
        wait_for(lambda: self.step() and self.holds_the_job(), bool, timeout=30, what="the operator scene to settle")

    def tempt(self) -> None:
        """Condemn gpu-n4 as well: during the fault its drained mark must not appear unproven."""
        self.kube.get("nodesets", NS, "gpu")["status"] = nodeset({"gpu-n3": INTENT, "gpu-n4": INTENT})["status"]

    def lost(self) -> str | None:
        """Why the job can no longer be held (it ended), or None."""
        state = job_state(self.scene.lab, self.scene.job)
        return None if state == "RUNNING" else f"job {self.scene.job} is {state}"

    def recovered(self) -> bool:
        spare = (self.metadata("gpu-n4").get("annotations") or {}).get(names.ANNOTATION_DRAINED)
        return self.step() and self.holds_the_job() and spare == "true"

    def survived(self) -> None:
        lab = self.scene.lab
        unjudged = len(self.judge.pending)
        self.judge.check(not unjudged, f"{unjudged} write(s) not judged: Slurm stayed unreadable")
        self.judge.check(self.lost() is None, str(self.lost()))
        shown = lab.run("scontrol", "show", "node", BUSY_NODE, check=True).stdout
        drained = "DRAIN" in shown and f"Reason={OUR_REASON}" in shown
        self.judge.check(drained, f"{BUSY_NODE} lost our drain: {shown[:300]}")
        self.judge.check(self.holds_the_job(), f"gpu-n3 no longer holds the job: {self.metadata('gpu-n3')}")

    def slurm_wrongs(self, fault: str, foreign: bool) -> list[str]:
        return _slurm_wrongs(self.proxy, fault, foreign, POD_NODES.values(), {self.scene.job})

    def close(self) -> None:
        self.service.close()
        self.scene.lab.run("scontrol", "update", f"nodename={SPARE_NODE}", "state=resume")


# --- bridge -----------------------------------------------------------------------------------


def _bridge_kube(pods: list[dict[str, Any]], install: Install) -> BridgeFake:
    kube = BridgeFake()
    for n, name in enumerate(LAB_NODES, start=1):
        kube.add("nodes", bridge_node(f"kn{n}", slurm_name=name))
    for item in pods:
        kube.add("pods", item)
    install(kube)
    return kube


def _bridge_loop(url: str, token: Callable[[], str], kube_url: str) -> BridgeLoop:
    """``list_interval=0``: every pass lists Slurm's jobs, so the job-list faults strike every pass.
    No ``cluster``: the client pins the cluster of its first answer, as ``--cluster-name`` unset does."""
    client = SlurmClient(url, token, timeout=CLIENT_TIMEOUT)
    return BridgeLoop(
        client,
        BridgeKube(Kube(api_client(kube_url))),
        Metrics(),
        [BNS],
        list_interval=0,
        absence_confirm_seconds=CONFIRM_SECONDS,
    )


@dataclass
class BridgeScene:
    """The module's bound pod ``steady`` and its running job (rebuilt if a trial ended it)."""

    lab: SlurmLab
    job: int = 0
    template: dict[str, Any] = field(default_factory=dict)  # the bound pod as the apiserver has it

    def ensure(self, kube_url: str, install: Install) -> None:
        if self.job and job_state(self.lab, self.job) == "RUNNING":
            return
        body = job_body([f"{BNS}/steady"], **ON_N1_N2)
        body["time_limit"] = {"infinite": False, "number": SCENE_MINUTES, "set": True}
        kube = _bridge_kube([bridge_pod("steady", None, body)], install)
        loop = _bridge_loop(self.lab.rest_url, lambda: self.lab.token, kube_url)
        try:
            assert loop.run_pass().ok
            self.job = int(kube.pod("steady")["metadata"]["labels"][names.LABEL_SLURM_JOB_ID])
            wait_running(self.lab, self.job)
            assert loop.run_pass().ok and kube.pod("steady")["spec"].get("nodeName")
        finally:
            loop.slurm.close()
        self.template = copy.deepcopy(kube.pod("steady"))

    def close(self) -> None:
        if self.job:
            self.lab.run("scancel", str(self.job))


@dataclass
class BridgeRig:
    side: ClassVar[str] = "bridge"
    scene: BridgeScene
    proxy: FaultProxy
    kube: BridgeFake
    loop: BridgeLoop
    judge: Judge
    newcomer: str
    last: BridgeResult | None = None

    @classmethod
    def build(cls, scene: BridgeScene, proxy: FaultProxy, kube_url: str, install: Install,
              newcomer: str) -> BridgeRig:  # fmt: skip
        kube = _bridge_kube([copy.deepcopy(scene.template)], install)
        loop = _bridge_loop(proxy.url, lambda: scene.lab.token, kube_url)
        return cls(scene, proxy, kube, loop, Judge(scene.lab), newcomer)

    def step(self) -> bool:
        before = len(self.kube.writes)
        self.proxy.begin_pass()
        self.last = self.loop.run_pass()
        self.judge.wrongs += rules.bridge_kube_wrongs(self.kube.writes[before:])
        return self.last.ok

    def ready(self) -> tuple[bool, str]:
        """The last pass's readiness (what the service's ``/readyz`` would follow) and why not."""
        if self.last is None:
            return False, "no pass yet"
        return self.last.ready, "; ".join(self.last.unready) or "; ".join(map(str, self.last.errors))

    def holds_the_job(self) -> bool:
        steady = self.kube.objects.get(("pods", BNS, "steady"))
        if steady is None or "deletionTimestamp" in steady["metadata"]:
            return False
        labelled = steady["metadata"]["labels"].get(names.LABEL_SLURM_JOB_ID) == str(self.scene.job)
        return labelled and bool(steady["spec"].get("nodeName"))

    def settle(self) -> None:
        wait_for(lambda: self.step() and self.holds_the_job(), bool, timeout=30, what="the bridge scene to settle")

    def tempt(self) -> None:
        """A new pod (its job held, so it never runs): submitting it is the work that must wait."""
        body = job_body([f"{BNS}/{self.newcomer}"], **ON_N1_N2, hold=True)
        self.kube.add("pods", bridge_pod(self.newcomer, None, body))

    def newcomer_job(self) -> int | None:
        label = self.kube.pod(self.newcomer)["metadata"]["labels"].get(names.LABEL_SLURM_JOB_ID)
        return int(label) if label else None

    def lost(self) -> str | None:
        """Why the job can no longer be held (it ended, or its pod is gone), or None."""
        state = job_state(self.scene.lab, self.scene.job)
        if state != "RUNNING":
            return f"job {self.scene.job} is {state}"
        return None if ("pods", BNS, "steady") in self.kube.objects else "pod steady is gone"

    def recovered(self) -> bool:
        return self.step() and self.holds_the_job() and self.newcomer_job() is not None

    def survived(self) -> None:
        self.judge.check(self.lost() is None, str(self.lost()))
        steady = self.kube.objects.get(("pods", BNS, "steady"))
        self.judge.check(self.holds_the_job(), f"pod steady no longer holds its job: {steady}")

    def slurm_wrongs(self, fault: str, foreign: bool) -> list[str]:
        jobs = {self.scene.job} | ({j} if (j := self.newcomer_job()) else set())
        return _slurm_wrongs(self.proxy, fault, foreign, LAB_NODES, jobs)

    def close(self) -> None:
        """Cancel whatever Slurm holds for the newcomer (it may have been submitted without a label)."""
        self.loop.slurm.close()
        lab = self.scene.lab
        for job_id in lab.run("squeue", "-h", "-o", "%i", check=True).stdout.split():
            if f'"{BNS}/{self.newcomer}"' in lab.run("scontrol", "show", "job", job_id).stdout:
                lab.run("scancel", job_id)


def _slurm_wrongs(proxy: FaultProxy, fault: str, foreign: bool, nodes: Iterable[str], jobs: set[int]) -> list[str]:
    """The writes that reached Slurm during ``fault`` (any write, if the answers were another
    cluster's) and after it, judged by rules.slurm_wrongs."""
    during = [e.request for e in proxy.exchanges if e.forwarded and e.request.is_write and e.fault == fault]
    after = [e.request for e in proxy.exchanges if e.forwarded and e.request.is_write and e.fault != fault]
    return rules.slurm_wrongs(during, foreign=foreign, guarded_nodes=nodes, guarded_jobs=jobs) + rules.slurm_wrongs(
        after, foreign=False, guarded_nodes=nodes, guarded_jobs=jobs
    )
