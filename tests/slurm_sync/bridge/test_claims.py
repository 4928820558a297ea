"""The ResourceClaim of a bridge pod's DRA devices (slurm_sync/bridge/claims.py) against a recording stand-in
for BridgeKube and Slurm: the order of the writes, a retry that finds its own claim, a claim that no longer
fits made anew, a failure midway that leaves no incomplete claim, and no claim (so no binding) whenever
Slurm's allocation cannot be read."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from slinky_common import names
from slurm_sync.bridge import devices
from slurm_sync.bridge.claims import Claims
from slurm_sync.bridge.devices import DeviceProblem
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.plan import Bind
from slurm_sync.bridge.view import BridgePod, read_pod
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmMalformed, SlurmUnavailable, SlurmUnsupported
from slurm_sync.slurm.types import NodeLayout, parse_node_layout
from tests.slurm_sync.bridgekube import BNS, bridge_pod
from tests.slurm_sync.drafixtures import NVIDIA, PREFIX, container, nvidia_slice

JSON = dict[str, Any]
JOB = 42
NOT_FOUND = '{"kind":"Status","code":404,"reason":"NotFound"}'


def layout(node: str = "n1", index: str = "1-2") -> NodeLayout:
    """A node of ``GET resources/<job>``: two of its GPUs (indexes ``index``) for the job."""
    return parse_node_layout({"node": node, "sockets_per_node": 1, "cores_per_socket": 4, "core_bitmap": "0x1",
                              "gres": [{"name": "gpu", "type": NVIDIA, "count": 2, "index": index}]})  # fmt: skip


def error(status: int, body: str = "") -> ApiException:
    return ApiException(status=status, reason="x", body=body or None)


@dataclass
class Slurm:
    """``job_layout`` only: the layouts of job JOB, or the error to raise."""

    layouts: tuple[NodeLayout, ...] = (layout(),)
    fail: Exception | None = None
    asked: list[int] = field(default_factory=list)

    def job_layout(self, job_id: int) -> tuple[NodeLayout, ...]:
        self.asked.append(job_id)
        if self.fail:
            raise self.fail
        return self.layouts


@dataclass
class Kube:
    """The BridgeKube calls of claims.py, over claims kept by (namespace, name); ``fail`` maps a method name
    to the exception it raises."""

    claims: dict[tuple[str, str], JSON] = field(default_factory=dict)
    slices: list[JSON] = field(default_factory=lambda: [nvidia_slice("s", "kn1", range(4))])
    fail: dict[str, Exception] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.fail:
            raise self.fail[call[0]]

    def list_resource_slices(self, node: str) -> list[JSON]:
        self._call("list_resource_slices", node)
        return copy.deepcopy(self.slices)

    def create_resource_claim(self, namespace: str, body: JSON) -> JSON:
        self._call("create_resource_claim", namespace, body["metadata"]["name"])
        if (namespace, body["metadata"]["name"]) in self.claims:
            raise error(409)
        stored = copy.deepcopy(body)
        stored["metadata"] |= {"uid": "claim-uid-1", "resourceVersion": "100"}
        self.claims[(namespace, body["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    def read_resource_claim(self, namespace: str, name: str) -> JSON:
        self._call("read_resource_claim", namespace, name)
        return copy.deepcopy(self.claims[(namespace, name)])

    def patch_resource_claim_status(self, namespace: str, name: str, body: JSON) -> None:
        self._call("patch_resource_claim_status", namespace, name, body)

    def delete_resource_claim(self, namespace: str, name: str, uid: str | None = None) -> None:
        self._call("delete_resource_claim", namespace, name, uid)
        if self.claims.pop((namespace, name), None) is None:
            raise error(404, NOT_FOUND)

    def patch_pod_claim_status(self, pod: BridgePod, body: JSON) -> None:
        self._call("patch_pod_claim_status", pod.key, body)

    def writes(self) -> list[str]:
        return [c[0] for c in self.calls if not c[0].startswith(("list_", "read_"))]


def gpu_pod(status: JSON | None = None) -> BridgePod:
    """The pod asking for two NVIDIA GPUs, its job JOB; ``status`` adds to its status."""
    obj = bridge_pod("train-0", job_id=JOB, uid="uid-train")
    obj["spec"]["containers"] = [container("main", nvidia="2")]
    obj["status"] |= status or {}
    return read_pod(obj)


POD = gpu_pod()
NAME = devices.claim_name("train-0", "uid-train")


def bind(pod: BridgePod = POD) -> Bind:
    return Bind(pod, "kn1", "n1")


@dataclass
class Rig:
    slurm: Slurm = field(default_factory=Slurm)
    kube: Kube = field(default_factory=Kube)
    wrote: list[None] = field(default_factory=list)

    @property
    def claims(self) -> Claims:
        return Claims(cast(SlurmClient, self.slurm), cast(BridgeKube, self.kube))

    def prepare(self, bind_: Bind | None = None) -> bool:
        return self.claims.prepare(bind_ or bind(), lambda: self.wrote.append(None))

    def wanted(self) -> tuple[JSON, JSON]:
        """The claim body and status the pod's job should get (its devices: gpu-1 and gpu-2 on kn1)."""
        plan = devices.plan_claim("train-0", "uid-train", POD.devices, JOB, layout(), "kn1", self.kube.slices)
        return devices.claim_body(plan, BNS, "train-0", "uid-train"), devices.claim_status(plan, "train-0", "uid-train")

    def store(self, *, status: JSON | None = None, uid: str = "uid-train", **meta: Any) -> JSON:
        """A claim an earlier pass made (as the apiserver stores it), owned by pod ``uid``."""
        body, _ = self.wanted()
        body["metadata"]["ownerReferences"][0]["uid"] = uid
        body["metadata"] |= {"uid": "claim-uid-0", "resourceVersion": "7", **meta}
        if status is not None:
            body["status"] = status
        self.kube.claims[(BNS, NAME)] = body
        return body


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield Rig()


# --- what Slurm allocated -------------------------------------------------------------------------------


def test_the_plan_names_the_devices_slurm_allocated_on_the_bound_node_from_its_slices(rig: Rig) -> None:
    rig.slurm.layouts = (layout("n2", "0"), layout("n1", "1-2"))
    plan = rig.claims.plan(bind())
    assert (plan.name, plan.node, plan.job_id) == (NAME, "kn1", JOB)
    assert [(r.name, [d.device for d in r.devices]) for r in plan.requests] == [("gpu-nvidia-com", ["gpu-1", "gpu-2"])]
    assert (rig.slurm.asked, rig.kube.calls) == ([JOB], [("list_resource_slices", "kn1")])


def test_a_pod_without_a_job_id_is_refused_before_slurm_is_asked(rig: Rig) -> None:
    unlabelled = read_pod(bridge_pod("train-0", uid="uid-train"))
    with pytest.raises(DeviceProblem, match=f"pod {BNS}/train-0 carries no Slurm job id"):
        rig.prepare(bind(unlabelled))
    assert (rig.slurm.asked, rig.kube.calls, rig.wrote) == ([], [], [])


def test_a_slurm_without_per_node_resources_is_a_device_problem_and_nothing_is_written(rig: Rig) -> None:
    rig.slurm.fail = SlurmUnsupported("REST v0.0.41 does not report a job's resources per node")
    with pytest.raises(DeviceProblem, match="per node: needed for DRA device classes"):
        rig.prepare()
    assert (rig.kube.calls, rig.wrote) == ([], [])


def test_an_unreadable_allocation_propagates_and_nothing_is_written(rig: Rig) -> None:
    rig.slurm.fail = SlurmUnavailable("timed out")
    with pytest.raises(SlurmUnavailable):
        rig.prepare()
    assert rig.kube.calls == []


def test_an_allocation_that_does_not_name_the_bound_node_is_malformed_and_no_claim_is_made(rig: Rig) -> None:
    rig.slurm.layouts = (layout("n2"),)
    with pytest.raises(SlurmMalformed, match=f"GET resources/{JOB}: no resources on node n1, where it runs"):
        rig.prepare()
    assert rig.kube.calls == []
    rig.slurm.layouts = ()  # an empty answer is no proof of anything either
    with pytest.raises(SlurmMalformed):
        rig.prepare()


def test_devices_no_driver_publishes_make_no_claim(rig: Rig) -> None:
    rig.kube.slices = [nvidia_slice("s", "kn1", [0, 1])]  # gpu-2 is not published
    with pytest.raises(DeviceProblem, match="index 2"):
        rig.prepare()
    assert (rig.kube.writes(), rig.wrote) == ([], [])


# --- making the claim -----------------------------------------------------------------------------------


def test_a_new_claim_is_created_then_allocated_then_named_in_the_pod_status(rig: Rig) -> None:
    body, status = rig.wanted()
    assert rig.prepare() is True
    assert rig.kube.calls == [
        ("list_resource_slices", "kn1"),
        ("create_resource_claim", BNS, NAME),
        ("patch_resource_claim_status", BNS, NAME, {"metadata": {"resourceVersion": "100"}, "status": status}),
        ("patch_pod_claim_status", POD.key, {"status": {"extendedResourceClaimStatus": {
            "resourceClaimName": NAME,
            "requestMappings": [{"containerName": "main", "resourceName": PREFIX + NVIDIA,
                                 "requestName": "gpu-nvidia-com"}]}}}),
    ]  # fmt: skip
    assert rig.kube.claims[(BNS, NAME)]["spec"] == body["spec"] and len(rig.wrote) == 3


def test_a_retry_finds_its_complete_claim_and_writes_nothing(rig: Rig) -> None:
    _, status = rig.wanted()
    rig.store(status=status)
    done = gpu_pod(devices.pod_status_body(devices.pod_claim_status(rig.claims.plan(bind())))["status"])
    assert done.claim_status is not None
    rig.kube.calls.clear()
    assert rig.prepare(bind(done)) is True
    assert rig.kube.writes() == ["create_resource_claim"] and rig.wrote == []  # the create was refused (409)


def test_a_retry_completes_a_claim_an_earlier_pass_left_unallocated(rig: Rig) -> None:
    _, status = rig.wanted()
    rig.store()
    assert rig.prepare() is True
    status_patch = next(c for c in rig.kube.calls if c[0] == "patch_resource_claim_status")
    assert status_patch[3] == {"metadata": {"resourceVersion": "7"}, "status": status}  # the stored claim's version
    assert rig.kube.writes() == ["create_resource_claim", "patch_resource_claim_status", "patch_pod_claim_status"]
    assert len(rig.wrote) == 2


def test_an_allocated_claim_no_longer_reserved_for_the_pod_gets_its_status_written_again(rig: Rig) -> None:
    _, status = rig.wanted()
    rig.store(status=status | {"reservedFor": []})
    assert rig.prepare() is True
    assert "patch_resource_claim_status" in rig.kube.writes()


def test_a_claim_of_another_pod_under_our_name_is_refused_and_left_alone(rig: Rig) -> None:
    rig.store(uid="uid-someone-else")
    with pytest.raises(DeviceProblem, match=f"ResourceClaim {NAME} exists and does not belong to pod {BNS}/train-0"):
        rig.prepare()
    assert rig.kube.writes() == ["create_resource_claim"] and (BNS, NAME) in rig.kube.claims and rig.wrote == []


def test_a_claim_being_deleted_is_waited_for(rig: Rig) -> None:
    rig.store(deletionTimestamp="2026-01-02T03:04:05Z")
    assert rig.prepare() is False
    assert rig.kube.writes() == ["create_resource_claim"] and rig.wrote == []


def test_a_claim_allocated_to_other_devices_is_deleted_by_its_uid_and_made_anew_next_pass(rig: Rig) -> None:
    _, status = rig.wanted()
    other = copy.deepcopy(status)
    other["allocation"]["devices"]["results"][1]["device"] = "gpu-3"
    rig.store(status=other)
    assert rig.prepare() is False
    assert [c for c in rig.kube.calls if c[0] == "delete_resource_claim"] == [
        ("delete_resource_claim", BNS, NAME, "claim-uid-0")
    ]
    assert len(rig.wrote) == 1 and (BNS, NAME) not in rig.kube.claims
    assert rig.prepare() is True and rig.kube.claims[(BNS, NAME)]["metadata"]["uid"] == "claim-uid-1"


def test_a_claim_of_an_earlier_job_is_deleted(rig: Rig) -> None:
    stored = rig.store()
    stored["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = str(JOB - 1)
    assert rig.prepare() is False
    assert rig.kube.writes() == ["create_resource_claim", "delete_resource_claim"]


def test_a_refused_create_other_than_a_conflict_propagates_without_a_delete(rig: Rig) -> None:
    rig.kube.fail["create_resource_claim"] = error(500)
    with pytest.raises(ApiException) as raised:
        rig.prepare()
    assert raised.value.status == 500 and rig.kube.writes() == ["create_resource_claim"] and rig.wrote == []


@pytest.mark.parametrize("failing", ["patch_resource_claim_status", "patch_pod_claim_status"])
def test_a_failure_midway_deletes_the_incomplete_claim_and_raises_the_first_error(rig: Rig, failing: str) -> None:
    rig.kube.fail[failing] = error(409)
    with pytest.raises(ApiException) as raised:
        rig.prepare()
    assert raised.value.status == 409
    assert rig.kube.calls[-1] == ("delete_resource_claim", BNS, NAME, "claim-uid-1")
    assert (BNS, NAME) not in rig.kube.claims
    assert len(rig.wrote) == (3 if failing == "patch_pod_claim_status" else 2)  # create, [status,] delete


def test_a_failed_delete_of_an_incomplete_claim_leaves_it_for_the_next_pass_and_the_first_error_wins(rig: Rig) -> None:
    rig.kube.fail["patch_pod_claim_status"] = error(500)
    rig.kube.fail["delete_resource_claim"] = error(503)
    with pytest.raises(ApiException) as raised:
        rig.prepare()
    assert raised.value.status == 500 and (BNS, NAME) in rig.kube.claims
    del rig.kube.fail["patch_pod_claim_status"], rig.kube.fail["delete_resource_claim"]
    assert rig.prepare() is True  # the next pass finds its own claim and finishes it


# --- release ---------------------------------------------------------------------------------------------


def test_release_deletes_the_pods_claim_and_one_already_gone_is_fine(rig: Rig) -> None:
    rig.store()
    rig.claims.release(POD)
    assert rig.kube.calls == [("delete_resource_claim", BNS, NAME, None)] and rig.kube.claims == {}
    rig.claims.release(POD)  # the apiserver's NotFound: nothing to do


@pytest.mark.parametrize("refusal", [error(404), error(404, '{"kind":"Status","reason":"Forbidden"}'), error(500)])
def test_release_raises_anything_but_the_apiservers_not_found(rig: Rig, refusal: ApiException) -> None:
    rig.kube.fail["delete_resource_claim"] = refusal
    with pytest.raises(ApiException):
        rig.claims.release(POD)
