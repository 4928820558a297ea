"""DRA device classes on bridge pods as pure functions (slurm_sync/bridge/devices.py): what a pod asks
for, how Slurm's per-node allocation becomes the drivers' devices, every case that must refuse, and
the claim and pod status bodies against the Kubernetes 1.34+ schemas."""

from __future__ import annotations

import copy
import re

import pytest

from slinky_common import names
from slurm_sync.bridge import devices
from slurm_sync.bridge.devices import ContainerRequest, DeviceProblem, DeviceRef, RequestMapping
from slurm_sync.slurm.types import parse_node_layout
from tests.slurm_sync.drafixtures import (
    CPU,
    EXAMPLE,
    NVIDIA,
    PREFIX,
    container,
    cpu_slice,
    example_slice,
    nvidia_slice,
    resource_slice,
)
from tests.support.kube import validate_builtin

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# 2 sockets x 2 cores x 2 threads, Linux numbering: the second thread of core c is cpu c + 4
HT_CPUS = [(0, 0, 0), (0, 0, 4), (0, 1, 1), (0, 1, 5), (1, 0, 2), (1, 0, 6), (1, 1, 3), (1, 1, 7)]


def layout(node: str = "n1", *, bitmap: str = "0x1", sockets: int = 4, cores: int = 1, gres: list | None = None):
    """A node of ``GET resources/<job>`` as slurmrestd 26.05 writes it."""
    return parse_node_layout({"node": node, "sockets_per_node": sockets, "cores_per_socket": cores, "mem_alloc": 512,
                              "core_bitmap": bitmap, "channel": {"set": False, "infinite": False, "number": 0},
                              "gres": gres or []})  # fmt: skip


def gpus(kind: str, index: str, count: int) -> list[dict]:
    return [{"name": "gpu", "type": kind, "count": count, "index": index}]


def asked(*containers: dict) -> tuple[ContainerRequest, ...]:
    return devices.container_requests({"containers": list(containers)})


def plan(asking, node_layout, slices, node: str = "kn1"):
    return devices.plan_claim("train-0", "uid-1", asking, 42, node_layout, node, slices)


def refs(plan_: devices.ClaimPlan) -> dict[str, list[str]]:
    return {r.name: [d.device for d in r.devices] for r in plan_.requests}


# --- what a pod asks for ---------------------------------------------------------------------------------


def test_requests_of_init_and_regular_containers_only_for_supported_classes() -> None:
    side = {"name": "side", "resources": {"limits": {PREFIX + EXAMPLE: "1", "nvidia.com/gpu": "1", "cpu": "1"}}}
    spec = {"initContainers": [container("init", cpu="1")], "containers": [container("main", nvidia="2"), side]}
    assert devices.container_requests(spec) == (
        ContainerRequest("init", PREFIX + CPU, "1"),
        ContainerRequest("main", PREFIX + NVIDIA, "2"),
        ContainerRequest("side", PREFIX + EXAMPLE, "1"),  # only limits: the apiserver makes them the requests
    )
    assert devices.container_requests({"containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]}) == ()
    assert devices.container_requests({"containers": [container("c", nvidia="0")]}) == ()  # asks for none


def test_claim_name_is_one_per_pod_incarnation_and_always_a_valid_name() -> None:
    name = devices.claim_name("train-0", "uid-1")
    assert name.startswith("train-0-extended-resources-") and name == devices.claim_name("train-0", "uid-1")
    assert devices.claim_name("train-0", "uid-2") != name  # a pod created again never meets the old claim
    long = devices.claim_name("a." * 126 + "b", "uid-1")
    assert len(long) <= 253 and DNS_SUBDOMAIN.fullmatch(long), long


# --- Slurm's allocation as the drivers' devices ----------------------------------------------------------


def test_nvidia_gpus_are_the_devices_named_after_slurms_indexes() -> None:
    slices = [nvidia_slice("s", "kn1", range(4)), cpu_slice("c", "kn1", [(s, 0, s) for s in range(4)])]
    got = plan(asked(container("main", nvidia="2")), layout(gres=gpus(NVIDIA, "1-2", 2)), slices)
    assert refs(got) == {"gpu-nvidia-com": ["gpu-1", "gpu-2"]}
    assert got.requests[0].devices[0] == DeviceRef(NVIDIA, "kn1", "gpu-1")
    assert got.mappings == (RequestMapping("main", PREFIX + NVIDIA, "gpu-nvidia-com"),)


def test_example_gpus_are_found_by_their_index_attribute_and_a_pod_asking_fewer_gets_the_first() -> None:
    # device names say nothing here: the driver's `index` attribute is Slurm's index
    slice_ = example_slice("s", "kn3", [1, 0])
    slice_["spec"]["devices"] = [{**d, "name": f"dev-{d['name']}-x"} for d in slice_["spec"]["devices"]]
    got = plan(asked(container("main", example="1")), layout("n3", gres=gpus(EXAMPLE, "0-1", 2)), [slice_], "kn3")
    assert refs(got) == {"gpu-example-com": ["dev-gpu-0-x"]}


def test_cpus_are_every_thread_of_each_core_slurm_allocated_efficiency_cores_left_out() -> None:
    slices = [cpu_slice("c", "kn1", [*HT_CPUS, (1, 2, 8)], e_cores=[8])]
    got = plan(asked(container("main", cpu="4")), layout(bitmap="0x6", sockets=2, cores=2), slices)
    # abstract cores 1 and 2 = (socket 0, core 1) and (socket 1, core 0)
    assert refs(got) == {"cpu": ["cpudev1", "cpudev5", "cpudev2", "cpudev6"]}
    assert devices.claim_body(got, "ns", "train-0", "uid-1")["spec"]["devices"]["requests"] == [
        {"name": "cpu", "exactly": {"deviceClassName": CPU, "allocationMode": "ExactCount", "count": 4}}
    ]


def test_every_container_asking_for_dra_cpu_shares_the_one_cpu_request() -> None:
    both = asked(container("a", cpu="1"), container("b", cpu="1", nvidia="1"))
    slices = [cpu_slice("c", "kn1", [(s, 0, s) for s in range(4)]), nvidia_slice("g", "kn1", range(4))]
    got = plan(both, layout(bitmap="0x3", gres=gpus(NVIDIA, "3", 1)), slices)
    assert refs(got) == {"cpu": ["cpudev0", "cpudev1"], "gpu-nvidia-com": ["gpu-3"]}
    assert [(m.container, m.request) for m in got.mappings] == [("a", "cpu"), ("b", "cpu"), ("b", "gpu-nvidia-com")]


def test_only_the_newest_complete_generation_of_a_pool_counts() -> None:
    old = resource_slice("old", "kn1", NVIDIA, [{"name": f"gpu-{i}"} for i in range(4)], generation=1)
    new = resource_slice("new", "kn1", NVIDIA, [{"name": "gpu-0"}, {"name": "gpu-1"}], generation=2)
    other_node = nvidia_slice("other", "kn2", range(4))
    one = plan(asked(container("m", nvidia="1")), layout(gres=gpus(NVIDIA, "1", 1)), [old, new, other_node])
    assert one.requests[0].devices == (DeviceRef(NVIDIA, "kn1", "gpu-1"),)
    with pytest.raises(DeviceProblem, match=re.escape("index 3 but driver gpu.nvidia.com publishes no such device")):
        plan(asked(container("m", nvidia="1")), layout(gres=gpus(NVIDIA, "3", 1)), [old, new, other_node])


CPUS4 = cpu_slice("c", "kn1", [(s, 0, s) for s in range(4)])


@pytest.mark.parametrize(
    ("asking", "node_layout", "slices", "problem"),
    [
        pytest.param(
            [container("m", nvidia="1")], layout(gres=gpus(NVIDIA, "0", 1)),
            [resource_slice("s", "kn1", NVIDIA, [{"name": "gpu-0"}], count=2)],
            "driver gpu.nvidia.com is still publishing pool kn1 on node kn1 (1 of 2 ResourceSlices)", id="pool-partial",
        ),
        pytest.param(
            [container("m", nvidia="1")], layout(gres=gpus(NVIDIA, "2", 1)), [],
            "index 2 but driver gpu.nvidia.com publishes no such device", id="no-driver-on-node",
        ),
        pytest.param(
            [container("m", example="1")], layout(gres=gpus(EXAMPLE, "1", 1)),
            [resource_slice("s", "kn1", EXAMPLE, [{"name": "a", "attributes": {"index": {"int": 1}}},
                                                  {"name": "b", "attributes": {"index": {"int": 1}}}])],
            "driver gpu.example.com publishes two devices with index 1: a and b", id="ambiguous-index",
        ),
        pytest.param(
            [container("a", nvidia="1"), container("b", nvidia="1")], layout(gres=gpus(NVIDIA, "0-1", 2)),
            [nvidia_slice("s", "kn1", range(4))],
            "containers 'a' and 'b' both request deviceclass.resource.kubernetes.io/gpu.nvidia.com", id="two-holders",
        ),
        pytest.param(
            [container("m", nvidia="3")], layout(gres=gpus(NVIDIA, "0-1", 2)), [nvidia_slice("s", "kn1", range(4))],
            "Slurm allocated 2 gres/gpu:gpu.nvidia.com on node n1 (index 0,1), the pod asks for 3", id="too-few",
        ),
        pytest.param(
            [container("m", nvidia="1")], layout(gres=gpus(EXAMPLE, "0", 1)), [nvidia_slice("s", "kn1", range(4))],
            "Slurm allocated 0 gres/gpu:gpu.nvidia.com on node n1 (index none)", id="other-type-allocated",
        ),
        pytest.param(
            [container("m", nvidia="1500m")], layout(gres=gpus(NVIDIA, "0", 1)), [nvidia_slice("s", "kn1", range(4))],
            "must be a whole number of devices", id="fraction",
        ),
        pytest.param(
            [container("m", nvidia="lots")], layout(gres=gpus(NVIDIA, "0", 1)), [],
            "'lots' is not a Kubernetes quantity", id="not-a-quantity",
        ),
        pytest.param(
            [container("m", nvidia="1")], layout(gres=gpus(NVIDIA, "0-x", 1)), [nvidia_slice("s", "kn1", range(4))],
            "unreadable GRES index '0-x' from Slurm", id="bad-index",
        ),
        pytest.param(
            [container("m", cpu="1")], layout(),
            [resource_slice("c", "kn1", CPU, [{"name": "cpudevs", "attributes": {"dra.cpu/numCPUs": {"int": 4}}}])],
            "has no socketID, coreID and cpuID attributes (run the driver with --cpu-device-mode=individual)",
            id="cpu-grouped-mode",
        ),
        pytest.param(
            [container("m", cpu="1")], layout(sockets=2, cores=4), [CPUS4],
            "Slurm counts 8 cores on node n1, driver dra.cpu publishes 4", id="cpu-topology-differs",
        ),
        pytest.param(
            [container("m", cpu="1")], layout(bitmap="0x0"), [CPUS4], "Slurm reports no cores of the job on node n1",
            id="no-cores",
        ),
        pytest.param(
            [container("m", cpu="1")], layout(bitmap="0xg"), [CPUS4], "unreadable core bitmap '0xg'", id="bad-bitmap",
        ),
    ],
)  # fmt: skip
def test_what_cannot_be_named_exactly_is_refused(asking, node_layout, slices, problem: str) -> None:
    with pytest.raises(DeviceProblem, match=re.escape(problem)):
        plan(asked(*asking), node_layout, slices)


# --- the objects ----------------------------------------------------------------------------------------


def gpu_plan() -> devices.ClaimPlan:
    return plan(
        asked(container("main", nvidia="2")), layout(gres=gpus(NVIDIA, "1-2", 2)), [nvidia_slice("s", "kn1", range(4))]
    )


def test_the_claim_is_owned_by_the_pod_allocated_on_the_node_and_reserved_for_the_pod() -> None:
    got = gpu_plan()
    claim = devices.claim_body(got, "team-a", "train-0", "uid-1")
    assert claim["metadata"] == {
        "name": got.name,
        "namespace": "team-a",
        "labels": {names.LABEL_SLURM_JOB_ID: "42"},
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "train-0", "uid": "uid-1", "controller": True}],
    }
    assert devices.claim_status(got, "train-0", "uid-1") == {
        "allocation": {
            "devices": {"results": [
                {"request": "gpu-nvidia-com", "driver": NVIDIA, "pool": "kn1", "device": "gpu-1"},
                {"request": "gpu-nvidia-com", "driver": NVIDIA, "pool": "kn1", "device": "gpu-2"},
            ]},
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["kn1"]}]}
            ]},
        },
        "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "uid-1"}],
    }  # fmt: skip
    assert devices.pod_status_body(devices.pod_claim_status(got)) == {
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": got.name,
                "requestMappings": [
                    {"containerName": "main", "resourceName": PREFIX + NVIDIA, "requestName": "gpu-nvidia-com"}
                ],
            }
        }
    }


@pytest.mark.parametrize("k8s", ["1.34", "1.35", "1.36", "1.37"])
def test_claim_and_pod_status_validate_against_the_kubernetes_schemas(k8s: str) -> None:
    for got in (gpu_plan(), plan(asked(container("m", cpu="2")), layout(bitmap="0x6", sockets=2, cores=2),
                                 [cpu_slice("c", "kn1", HT_CPUS)])):  # fmt: skip
        claim = devices.claim_body(got, "team-a", "train-0", "uid-1") | {
            "status": devices.claim_status(got, "train-0", "uid-1")
        }
        assert validate_builtin(claim, k8s) == []
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "team-a"},
            "spec": {"containers": [container("main", nvidia="2")]},
            "status": {"phase": "Pending", **devices.pod_status_body(devices.pod_claim_status(got))["status"]},
        }
        assert validate_builtin(pod, k8s) == []


def test_a_stored_claim_agrees_by_the_fields_we_set_and_a_different_allocation_is_other() -> None:
    got = gpu_plan()
    wanted = devices.claim_body(got, "ns", "train-0", "uid-1")
    status = devices.claim_status(got, "train-0", "uid-1")
    stored = copy.deepcopy(wanted)
    stored["metadata"] |= {"uid": "c1", "resourceVersion": "7"}
    stored["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = []  # a default the server may add
    assert devices.claim_agrees(stored, wanted) and devices.allocation_state(stored, status) == "missing"
    stored["status"] = copy.deepcopy(status)
    assert devices.allocation_state(stored, status) == "ours" and devices.reserved_as_wanted(stored, status)
    stored["status"]["allocation"]["devices"]["results"][1]["device"] = "gpu-3"
    assert devices.allocation_state(stored, status) == "other"
    stored["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = "41"  # an earlier job's claim
    assert not devices.claim_agrees(stored, wanted)
