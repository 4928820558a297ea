"""DRA device classes end to end: the bridge loop between the real Slurm 26.05 lab (fake GPUs: n1 and n2
have 4 gpu.nvidia.com, n3 and n4 2 gpu.example.com) and the real Kubernetes API server lab.

The pods' placeholder jobs are the pod hook's own answers, applied as Metacontroller would. The
ResourceSlices are what the DRA drivers publish (tests/slurm_sync/drafixtures.py). Each test first
gives another job part of a node, so Slurm's choice of devices is not simply "the first ones", then
checks the claim names exactly the devices Slurm reports for the pod's job (`scontrol show job -d`).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hooks.bridge import pod as pod_hook
from hooks.contract import DecoratorRequest
from slinky_common import names
from slurm_sync.bridge import devices
from slurm_sync.bridge.claims import Claims
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.bridge.view import BridgePod
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.passes import utc_now
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.slurm_sync.drafixtures import CPU, EXAMPLE, NVIDIA, PREFIX, container, cpu_slice, example_slice, nvidia_slice
from tests.slurm_sync.inject import Injector, answer, slurm_meta
from tests.support.kube import validate_builtin

pytestmark = [pytest.mark.slurm, pytest.mark.kube]
JSON = dict[str, Any]
SLURM_NODES = ("n1", "n2", "n3", "n4")
RECORDED = ("patch_pod", "create_resource_claim", "patch_resource_claim_status", "patch_pod_claim_status", "bind",
            "delete_resource_claim")  # fmt: skip


@dataclass
class Rig:
    slurm: SlurmLab
    api: client.ApiClient
    ns: str
    calls: list[str] = field(default_factory=list)  # the BridgeKube writes, in order
    shift: list[datetime.timedelta] = field(default_factory=lambda: [datetime.timedelta(0)])
    jobs: list[int] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api)

    def node(self, slurm_name: str) -> str:
        return f"{self.ns}-{slurm_name}"

    def loop(self, transport: Injector | None = None) -> BridgeLoop:
        slurm = SlurmClient(self.slurm.rest_url, lambda: self.slurm.token, timeout=5, transport=transport)
        kube = BridgeKube(Kube(self.api))
        for name in RECORDED:
            setattr(kube, name, self._recorded(name, getattr(kube, name)))
        return BridgeLoop(slurm, kube, Metrics(), [self.ns], list_interval=3600, now=lambda: utc_now() + self.shift[0])

    def _recorded(self, name: str, method: Any) -> Any:
        @wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return call

    def pod(self, name: str, containers: list[JSON], node: str) -> JSON:
        """A managed pod for Slurm node ``node`` (not exclusive), with the pod hook's placeholder job."""
        annotations = {names.SLURMJOB_PREFIX + k: v for k, v in
                       {"partition": "debug", "constraints": node, "exclusive": "false", "timelimit": "10",
                        "mem-per-node": "100Mi"}.items()}  # fmt: skip
        body = {
            "metadata": {"name": name, "labels": {names.LABEL_BRIDGE_MANAGED: "true"}, "annotations": annotations},
            "spec": {"schedulerName": names.BRIDGE_SCHEDULER_NAME, "containers": containers},
        }
        self.core.create_namespaced_pod(self.ns, body)
        request = DecoratorRequest(controller={}, object=self.read_pod(name), attachments={}, related={},
                                   finalizing=False)  # fmt: skip
        published = pod_hook.publish(request)
        assert published.get(names.ANNOTATION_PLACEHOLDER_JOB), published
        self.core.patch_namespaced_pod(name, self.ns, {"metadata": {"annotations": published}})
        return self.read_pod(name)

    def read_pod(self, name: str) -> JSON:
        return client.ApiClient().sanitize_for_serialization(self.core.read_namespaced_pod(name, self.ns))

    def claim(self, pod: JSON) -> JSON:
        name = devices.claim_name(pod["metadata"]["name"], pod["metadata"]["uid"])
        return client.ApiClient().sanitize_for_serialization(
            self.resource.read_namespaced_resource_claim(name, self.ns)
        )

    def sbatch(self, *args: str) -> int:
        """Another user's job that holds part of a node."""
        out = self.slurm.run("sbatch", "--parsable", "-t", "10", *args, "--wrap", "sleep 600", check=True).stdout
        self.jobs.append(int(out.strip().split(";")[0]))
        self.running(self.jobs[-1])
        return self.jobs[-1]

    def job_id(self, pod: str) -> int:
        job_id = int(self.read_pod(pod)["metadata"]["labels"][names.LABEL_SLURM_JOB_ID])
        self.jobs.append(job_id)
        return job_id

    def running(self, job_id: int) -> str:
        """``scontrol show job -d`` once the job runs (its per-node CPU_IDs and GRES indexes)."""
        return wait_for(lambda: self.show(job_id), lambda s: "JobState=RUNNING" in s, what=f"job {job_id} running")

    def show(self, job_id: int) -> str:
        return self.slurm.run("scontrol", "-d", "show", "job", str(job_id), check=True).stdout


@pytest.fixture
def rig(slurm_lab: SlurmLab, kube_api: client.ApiClient, kube_namespace: str) -> Iterator[Rig]:
    rig = Rig(slurm_lab, kube_api, kube_namespace)
    slices = []
    for n in SLURM_NODES:
        labels = {names.LABEL_BRIDGE_WORKER: "worker", names.LABEL_SLURM_NODE_NAME: n}
        rig.core.create_node({"metadata": {"name": rig.node(n), "labels": labels}})
        gpus = nvidia_slice(f"{rig.node(n)}-gpu", rig.node(n), range(4)) if n in ("n1", "n2") else (
            example_slice(f"{rig.node(n)}-gpu", rig.node(n), range(2)))  # fmt: skip
        slices += [gpus, cpu_slice(f"{rig.node(n)}-cpu", rig.node(n), [(s, 0, s) for s in range(4)])]
    for item in slices:
        rig.resource.create_resource_slice(item)
    try:
        yield rig
    finally:
        for job_id in rig.jobs:
            slurm_lab.run("scancel", str(job_id))
        for item in slices:  # (the lab answers a Status, which the client's model would not parse)
            rig.resource.delete_resource_slice(item["metadata"]["name"], _preload_content=False)
        for n in SLURM_NODES:
            rig.core.delete_node(rig.node(n))


def gres_indexes(shown: str, node: str) -> list[int]:
    """``Nodes=n1 CPU_IDs=1-2 Mem=... GRES=gpu:gpu.nvidia.com:2(IDX:1-2)`` -> [1, 2]."""
    match = re.search(rf"Nodes={node} .*GRES=\S+\(IDX:([0-9,-]+)\)", shown)
    assert match, shown
    return [int(i) for i in expand_hostlist(f"[{match.group(1)}]")]


def cpu_ids(shown: str, node: str) -> list[int]:
    match = re.search(rf"Nodes={node} CPU_IDs=([0-9,-]+)", shown)
    assert match, shown
    return [int(i) for i in expand_hostlist(f"[{match.group(1)}]")]


def allocated(claim: JSON) -> dict[str, list[str]]:
    by_request: dict[str, list[str]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        by_request.setdefault(result["request"], []).append(result["device"])
    return by_request


def assert_valid(*objects: JSON) -> None:
    for obj in objects:
        for k8s in ("1.34", "1.36"):
            assert validate_builtin(obj, k8s) == [], (k8s, obj)


def test_a_gpu_pod_gets_a_claim_naming_the_gpus_slurm_allocated_before_its_binding(rig: Rig) -> None:
    """Done when: gpu.nvidia.com: 2 gives a job with gres/gpu:2 and a claim naming the two device indexes
    Slurm allocated on the bound node; deleting the pod deletes the claim and cancels the job."""
    blocker = rig.sbatch("-w", "n1", "-c", "1", "--gres=gpu:gpu.nvidia.com:1")
    taken = gres_indexes(rig.show(blocker), "n1")
    pod = rig.pod("train", [container("main", nvidia="2")], "n1")
    loop = rig.loop()
    assert loop.run_pass().ok
    job_id = rig.job_id("train")
    shown = rig.running(job_id)
    assert "TresPerNode=gres/gpu:gpu.nvidia.com=2" in shown and "JOB_GRES=gpu:gpu.nvidia.com:2" in shown, shown
    indexes = gres_indexes(shown, "n1")
    assert len(indexes) == 2 and not set(indexes) & set(taken)  # the blocker's GPU is not the pod's

    rig.calls.clear()
    assert loop.run_pass().ok
    assert rig.calls == ["patch_pod", "create_resource_claim", "patch_resource_claim_status",
                         "patch_pod_claim_status", "bind"]  # fmt: skip  # the claim is complete before the binding
    claim, bound = rig.claim(pod), rig.read_pod("train")
    assert allocated(claim) == {"gpu-nvidia-com": [f"gpu-{i}" for i in indexes]}
    assert {r["driver"] for r in claim["status"]["allocation"]["devices"]["results"]} == {NVIDIA}
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu-nvidia-com", "exactly": {"deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": 2}}
    ]
    term = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert term == {"key": "metadata.name", "operator": "In", "values": [rig.node("n1")]}
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "train", "uid": pod["metadata"]["uid"]}]
    assert [(o["kind"], o["uid"]) for o in claim["metadata"]["ownerReferences"]] == [("Pod", pod["metadata"]["uid"])]
    assert claim["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] == str(job_id)
    assert bound["spec"]["nodeName"] == rig.node("n1")
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": claim["metadata"]["name"],
        "requestMappings": [
            {"containerName": "main", "resourceName": PREFIX + NVIDIA, "requestName": "gpu-nvidia-com"}
        ],
    }
    assert_valid(claim, bound)
    rig.calls.clear()
    assert loop.run_pass().ok and rig.calls == []  # bound: nothing more to write

    rig.core.delete_namespaced_pod("train", rig.ns, grace_period_seconds=0)
    rig.shift[0] = datetime.timedelta(minutes=2)  # past the pod's grace period and the bridge's slack
    assert loop.run_pass().ok
    assert "delete_resource_claim" in rig.calls
    with pytest.raises(ApiException) as gone:
        rig.claim(pod)
    assert gone.value.status == 404
    wait_for(lambda: _stored_pod(rig, "train"), lambda stored: stored is None, what="the pod to go")
    assert "JobState=CANCELLED" in rig.show(job_id)


def _stored_pod(rig: Rig, name: str) -> JSON | None:
    try:
        return rig.read_pod(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_dra_cpu_and_an_example_gpu_are_the_cpu_ids_and_gpu_slurm_allocated(rig: Rig) -> None:
    """Done when: a dra.cpu: 2 pod gets a claim with Slurm's CPU ids; the pod disappearing takes its claim
    with it (owner reference, the API server's garbage collector)."""
    blocker = rig.sbatch("-w", "n3", "-c", "1", "--gres=gpu:gpu.example.com:1")
    pod = rig.pod("pin", [container("main", cpu="2", example="1")], "n3")
    loop = rig.loop()
    assert loop.run_pass().ok
    shown = rig.running(rig.job_id("pin"))
    cpus, gpus = cpu_ids(shown, "n3"), gres_indexes(shown, "n3")
    assert len(cpus) == 2 and not set(cpus) & set(cpu_ids(rig.show(blocker), "n3"))
    assert len(gpus) == 1 and not set(gpus) & set(gres_indexes(rig.show(blocker), "n3"))
    assert loop.run_pass().ok
    claim = rig.claim(pod)
    assert allocated(claim) == {"cpu": [f"cpudev{c}" for c in cpus], "gpu-example-com": [f"gpu-{i}" for i in gpus]}
    assert {r["name"]: r["exactly"]["deviceClassName"] for r in claim["spec"]["devices"]["requests"]} == {
        "cpu": CPU,
        "gpu-example-com": EXAMPLE,
    }
    bound = rig.read_pod("pin")
    assert [m["requestName"] for m in bound["status"]["extendedResourceClaimStatus"]["requestMappings"]] == [
        "cpu",
        "gpu-example-com",
    ]
    assert_valid(claim, bound)

    rig.core.patch_namespaced_pod("pin", rig.ns, {"metadata": {"finalizers": None}})
    rig.core.delete_namespaced_pod("pin", rig.ns)
    wait_for(lambda: _claim_exists(rig, pod), lambda exists: not exists, what="the garbage collector to take the claim")


def _claim_exists(rig: Rig, pod: JSON) -> bool:
    try:
        rig.claim(pod)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_no_allocation_read_no_claim_and_no_binding(rig: Rig) -> None:
    """Fail closed: while Slurm's answer about the job's resources is unusable nothing is claimed or bound."""
    injector = Injector()
    loop = rig.loop(injector)
    pod = rig.pod("wait", [container("main", nvidia="1")], "n2")
    assert loop.run_pass().ok
    job_id = rig.job_id("wait")
    rig.running(job_id)
    injector.rules.append(
        answer("GET", f"/resources/{job_id}", 500, {"meta": slurm_meta("lab"), "errors": [{"error": "boom"}]})
    )
    rig.calls.clear()
    result = loop.run_pass()
    assert not result.ready and any(f"read the resources of job {job_id}" in e for e in result.unready)
    assert rig.calls == ["patch_pod"]  # the node annotation only: no claim, no binding
    assert not _claim_exists(rig, pod) and not rig.read_pod("wait")["spec"].get("nodeName")
    injector.rules.clear()
    assert loop.run_pass().ready and rig.read_pod("wait")["spec"]["nodeName"] == rig.node("n2")


def test_a_failure_midway_leaves_no_claim_and_the_next_pass_converges(rig: Rig) -> None:
    loop = rig.loop()
    pod = rig.pod("flaky", [container("main", nvidia="1")], "n2")
    assert loop.run_pass().ok
    rig.running(rig.job_id("flaky"))
    real = loop.kube.patch_pod_claim_status

    def refuse(*args: Any) -> None:
        raise ApiException(status=500, reason="injected")

    loop.kube.patch_pod_claim_status = refuse  # type: ignore[method-assign]
    rig.calls.clear()
    assert not loop.run_pass().ok
    assert rig.calls == ["patch_pod", "create_resource_claim", "patch_resource_claim_status", "delete_resource_claim"]
    assert not _claim_exists(rig, pod) and not rig.read_pod("flaky")["spec"].get("nodeName")
    loop.kube.patch_pod_claim_status = real  # type: ignore[method-assign]
    assert loop.run_pass().ok
    assert rig.read_pod("flaky")["spec"]["nodeName"] == rig.node("n2") and _claim_exists(rig, pod)


def test_devices_no_driver_publishes_are_refused_with_a_warning_and_the_pod_stays_unbound(rig: Rig) -> None:
    rig.resource.delete_resource_slice(f"{rig.node('n2')}-gpu", _preload_content=False)
    rig.resource.create_resource_slice(nvidia_slice(f"{rig.node('n2')}-gpu", rig.node("n2"), []))  # restored empty
    loop = rig.loop()
    pod = rig.pod("orphan", [container("main", nvidia="1")], "n2")
    assert loop.run_pass().ok
    job_id = rig.job_id("orphan")
    rig.running(job_id)
    result = loop.run_pass()
    assert result.ready and result.user_errors == 1  # a configuration problem, not a failed read
    assert "publishes no such device" in result.errors[0]
    assert not _claim_exists(rig, pod) and not rig.read_pod("orphan")["spec"].get("nodeName")
    events = client.EventsV1Api(rig.api).list_namespaced_event(rig.ns).items
    (warning,) = [e for e in events if e.reason == "DeviceClaimFailed"]
    assert warning.type == "Warning" and f"Slurm started job {job_id} on node n2" in warning.note


class RefusingRelease(Claims):
    def release(self, pod: BridgePod) -> None:
        raise ApiException(status=500, reason="injected")


def test_a_pod_lets_go_of_its_job_only_after_its_claim_is_deleted(rig: Rig) -> None:
    loop = rig.loop()
    pod = rig.pod("held", [container("main", nvidia="1")], "n2")
    assert loop.run_pass().ok
    job_id = rig.job_id("held")
    rig.running(job_id)
    assert loop.run_pass().ok and _claim_exists(rig, pod)
    rig.core.delete_namespaced_pod("held", rig.ns, grace_period_seconds=0)
    rig.shift[0] = datetime.timedelta(minutes=2)
    real = loop.claims
    loop.claims = RefusingRelease(real.slurm, real.kube)
    assert not loop.run_pass().ok
    assert "JobState=CANCELLED" in rig.show(job_id)  # the job ends first ...
    held = _stored_pod(rig, "held")
    assert held and names.FINALIZER_SCHEDULER in held["metadata"]["finalizers"] and _claim_exists(rig, pod)
    loop.claims = real  # ... the pod goes only once its claim has
    assert loop.run_pass().ok
    assert not _claim_exists(rig, pod)
    wait_for(lambda: _stored_pod(rig, "held"), lambda stored: stored is None, what="the pod to go")
