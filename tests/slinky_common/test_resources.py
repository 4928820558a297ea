"""What a group's pods ask of Slurm (slinky_common/resources.py): a pod's total as the kubelet computes it, the
largest pod's cpus and memory against the workload's base, GPUs as gres, and a bad or too large total named."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slinky_common import quantity, resources
from slinky_common.jsontypes import JSON
from slinky_common.resources import DEVICE_CLASS_PREFIX, DRA_CPU, GroupResources, device_classes, of_group, pod_total
from tests.hooks.bridge.builders import NS, container, pod

NVIDIA_DRA = DEVICE_CLASS_PREFIX + "gpu.nvidia.com"
EXAMPLE_DRA = DEVICE_CLASS_PREFIX + "gpu.example.com"


def init(name: str, cpu: str, sidecar: bool = False) -> JSON:
    out = container(name, requests={"cpu": cpu})
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def test_the_resources_that_reach_slurm() -> None:
    assert resources.GPU_CLASSES == (NVIDIA_DRA, EXAMPLE_DRA)
    assert set(resources.SLURM_FIELDS) == {
        "cpu",
        DRA_CPU,
        "memory",
        "nvidia.com/gpu",
        "amd.com/gpu",
        *resources.GPU_CLASSES,
    }
    assert DRA_CPU == "deviceclass.resource.kubernetes.io/dra.cpu"


# --- pod_total ----------------------------------------------------------------------------------------------------


def test_regular_containers_and_sidecars_sum_init_containers_count_at_their_peak_and_overhead_adds() -> None:
    target = pod(
        containers=[container("a", requests={"cpu": "2"}), container("b", requests={"cpu": "1"})],
        spec={
            # an init container runs beside the sidecars started before it: 1 + 3 = 4, then 1 + 2 + 1 = 4
            "initContainers": [init("s1", "1", True), init("i1", "3"), init("s2", "2", True), init("i2", "1")],
            "overhead": {"cpu": "250m"},
        },
    )
    assert pod_total(target, "requests", "cpu") == Fraction(25, 4)  # max(2 + 1 + 1 + 2, 4) + 0.25


def test_an_init_container_larger_than_the_rest_sets_the_total() -> None:
    target = pod(
        containers=[container(requests={"cpu": "2"})],
        spec={"initContainers": [init("s", "1", True), init("big", "10"), init("small", "1")]},
    )
    assert pod_total(target, "requests", "cpu") == 11  # the sidecar runs beside it


def test_pod_level_resources_win_over_containers_per_kind_and_resource() -> None:
    target = pod(
        containers=[container(requests={"cpu": "8", "memory": "1Gi"}, limits={"cpu": "8"})],
        spec={"resources": {"requests": {"cpu": "3"}}},
    )
    assert pod_total(target, "requests", "cpu") == 3
    assert pod_total(target, "requests", "memory") == 2**30
    assert pod_total(target, "limits", "cpu") == 8


@pytest.mark.parametrize(
    "target",
    [
        pytest.param({}, id="no-spec"),
        pytest.param({"spec": None}, id="null-spec"),
        pytest.param(pod(containers=[]), id="no-containers"),
        pytest.param(pod(containers=[{"name": "c", "resources": None}]), id="null-resources"),
        pytest.param(pod(containers=[container(limits={"cpu": "1"})]), id="other-kind"),
    ],
)
def test_nothing_asked_totals_zero(target: JSON) -> None:
    assert pod_total(target, "requests", "cpu") == 0


def test_pod_total_raises_bad_quantity_for_a_malformed_amount() -> None:
    with pytest.raises(quantity.BadQuantity, match=r"^'two' is not a Kubernetes quantity$"):
        pod_total(pod(containers=[container(requests={"cpu": "two"})]), "requests", "cpu")


# --- of_group: cpus and memory ------------------------------------------------------------------------------------


def test_the_largest_pod_request_or_limit_wins() -> None:
    a = pod("a", containers=[container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "2500m"})])
    b = pod("b", containers=[container(requests={"cpu": "2"}, limits={"memory": "1500Mi"})])
    assert of_group([a, b]) == GroupResources(cpus_per_task=3, memory_mib=1500, gres=None)


def test_dra_cpus_count_like_native_cpus() -> None:
    target = pod(containers=[container(requests={"cpu": "2", DRA_CPU: "4"})])
    assert of_group([target]).cpus_per_task == 4


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        pytest.param([], GroupResources(5, 100, None), id="nothing-asked-keeps-the-base"),
        pytest.param([container(requests={"cpu": "0"})], GroupResources(5, 100, None), id="zero-keeps-the-base"),
        pytest.param([container(requests={"cpu": "1"})], GroupResources(1, 100, None), id="a-smaller-ask-wins"),
        pytest.param([container(limits={"memory": "4Gi"})], GroupResources(5, 4096, None), id="memory-alone"),
        pytest.param([container(limits={"memory": "1Ki"})], GroupResources(5, 0, None), id="below-a-mib-is-0"),
    ],
)
def test_the_base_stands_unless_a_pod_asks_for_more_than_zero(containers: list[JSON], expected: GroupResources) -> None:
    assert of_group([pod(containers=containers)], base_cpus=5, base_memory_mib=100) == expected


def test_no_pods_give_the_base() -> None:
    assert of_group([]) == GroupResources(None, None, None)
    assert of_group(iter([]), 2, 64) == GroupResources(2, 64, None)


# --- of_group: gres -----------------------------------------------------------------------------------------------


def test_gpus_become_gres_per_class_from_the_largest_pod_each() -> None:
    plugin = pod("a", containers=[container(limits={"nvidia.com/gpu": "2", "amd.com/gpu": "1"})])
    dra = pod("b", containers=[container(limits={NVIDIA_DRA: "2", EXAMPLE_DRA: "1"})])
    more = pod("c", containers=[container(limits={"nvidia.com/gpu": "4", NVIDIA_DRA: "1"})])
    assert of_group([plugin, dra, more]).gres == ("gres/gpu=4,gres/gpu:gpu.example.com=1,gres/gpu:gpu.nvidia.com=2")


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(pod(containers=[container(requests={"nvidia.com/gpu": "1"})]), id="requests-only"),
        pytest.param(pod(containers=[container(limits={DRA_CPU: "2"})]), id="dra-cpu-is-no-gpu"),
        pytest.param(pod(containers=[container(limits={"example.com/fpga": "1"})]), id="other-devices"),
        pytest.param(pod(containers=[container(limits={"nvidia.com/gpu": "0"})]), id="zero"),
    ],
)
def test_no_gpu_limit_means_no_gres(target: JSON) -> None:
    assert of_group([target]).gres is None


# --- of_group: bad input named -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "message"),
    [
        pytest.param(
            [container(limits={"cpu": "70000"})],
            f"pod {NS}/p: limits.cpu totals 70000 CPUs is more than Slurm can hold (at most 65533)",
            id="cpu",
        ),
        pytest.param(
            [container("a", requests={"cpu": "40000"}), container("b", requests={"cpu": "40000"})],
            f"pod {NS}/p: requests.cpu totals 80000 CPUs is more than Slurm can hold (at most 65533)",
            id="cpu-summed",
        ),
        pytest.param(
            [container(limits={"memory": "1e25"})],
            f"pod {NS}/p: limits.memory totals 9536743164062500000 MiB is more than Slurm can hold "
            f"(at most {2**63 - 1})",
            id="memory",
        ),
        pytest.param(
            [container(limits={"nvidia.com/gpu": "5e18", "amd.com/gpu": "5e18"})],
            f"pod {NS}/p: limits.nvidia.com/gpu + amd.com/gpu totals 10000000000000000000 devices is more than "
            f"Slurm can hold (at most {2**63 - 1})",
            id="device-plugin-gpus-summed",
        ),
        pytest.param(
            [container(limits={NVIDIA_DRA: "1e19"})],
            f"pod {NS}/p: limits.{NVIDIA_DRA} totals 10000000000000000000 devices is more than Slurm can hold "
            f"(at most {2**63 - 1})",
            id="dra-gpus",
        ),
    ],
)
def test_a_total_slurm_cannot_hold_names_pod_kind_and_resource(containers: list[JSON], message: str) -> None:
    with pytest.raises(quantity.OutOfRange) as caught:
        of_group([pod(containers=containers)])
    assert str(caught.value) == message


def test_a_malformed_amount_names_the_pod_by_generate_name_when_it_has_no_name() -> None:
    target = pod(containers=[container(requests={"memory": "1 Gi"})])
    del target["metadata"]["name"]
    target["metadata"]["generateName"] = "job-"
    with pytest.raises(quantity.BadQuantity) as caught:
        of_group([target])
    assert str(caught.value) == f"pod {NS}/job-: requests.memory: '1 Gi' is not a Kubernetes quantity"
    assert not isinstance(caught.value, quantity.OutOfRange)


def test_a_malformed_gpu_limit_is_named_too() -> None:
    target = pod(containers=[container(limits={"amd.com/gpu": "one"})])
    with pytest.raises(quantity.BadQuantity, match=rf"^pod {NS}/p: limits\.amd\.com/gpu: 'one' is not a Kubernetes"):
        of_group([target])


# --- device_classes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "classes"),
    [
        pytest.param({"name": "c"}, set(), id="no-resources"),
        pytest.param(container(requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"}), set(), id="no-device-class"),
        pytest.param(
            container(requests={DRA_CPU: "1", "cpu": "1"}, limits={NVIDIA_DRA: "1"}),
            {"dra.cpu", "gpu.nvidia.com"},
            id="requests-and-limits",
        ),
        pytest.param(
            container(requests={EXAMPLE_DRA: "1"}, limits={EXAMPLE_DRA: "1"}), {"gpu.example.com"}, id="once-each"
        ),
    ],
)
def test_device_classes_of_a_container(target: JSON, classes: set[str]) -> None:
    assert device_classes(target) == classes
