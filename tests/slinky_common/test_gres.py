"""GPUs given to a NodeSet's slurmd become the Gres= its dynamic node registers (Slinky issues #106, #191)."""

from __future__ import annotations

import pytest

from hooks.nodeset.pods import conf_argument
from hooks.nodeset.spec import parse_nodeset
from slinky_common import names
from slinky_common.errors import InvalidSpec
from slinky_common.gres import gres_types
from tests.hooks.nodeset.builders import condition, nodeset, request, slurmd, sync
from tests.hooks.nodeset.fixtures import client, clock  # noqa: F401  (fixtures)
from tests.support.hooks import cr, related
from tests.support.hooks import request as controller_request


def conf(**spec) -> str:
    return conf_argument(parse_nodeset({"metadata": {"name": "gpu", "namespace": "slurm"},
                                        "spec": {"controllerRef": {"name": "slurm"}, **spec}}))  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "'Features=gpu'"),
        ({"slurmd": {"resources": {"limits": {"nvidia.com/gpu": 4}}}}, "'Features=gpu Gres=gpu:4'"),
        ({"slurmd": {"resources": {"requests": {"amd.com/gpu": "2"}}}}, "'Features=gpu Gres=gpu:2'"),
        ({"slurmd": {"resources": {"limits": {"nvidia.com/gpu": "0", "cpu": "4"}}}}, "'Features=gpu'"),
        ({"template": {"spec": {"containers": [{"name": "slurmd", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
         "'Features=gpu Gres=gpu:1'"),
        ({"template": {"spec": {"containers": [{"name": "sidecar", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
         "'Features=gpu'"),
        # The user's own Gres= (Slinky's place for it: extraConf) wins over what the limits say.
        ({"extraConf": "Gres=gpu:h100:8", "slurmd": {"resources": {"limits": {"nvidia.com/gpu": 8}}}},
         "'Features=gpu Gres=gpu:h100:8'"),
        ({"extraConf": "gres=shard:16 Weight=5"}, "'Features=gpu Gres=shard:16 Weight=5'"),
    ],
)  # fmt: skip
def test_slurmd_registers_the_gpus_of_its_container_or_the_users_gres(spec, expected):
    assert conf(**spec) == expected


def test_the_worker_pod_runs_slurmd_with_the_gres(client):  # noqa: F811 - the imported fixture
    resp = sync(client, request(nodeset(replicas=1, slurmd={"resources": {"limits": {"nvidia.com/gpu": 2}}})))
    pod = next(c for c in resp["children"] if c["kind"] == "Pod")
    args = slurmd(pod)["args"]
    assert "Gres=gpu:2" in args[args.index("--conf") + 1]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"slurmd": {"resources": {"limits": {"nvidia.com/gpu": "two"}}}}, "resources.limits['nvidia.com/gpu']"),
        ({"slurmd": {"resources": {"limits": {"amd.com/gpu": "1500m"}}}}, "whole number of devices"),
        ({"extraConf": "Gres=gpu=4"}, "name[:type][:count]"),
    ],
)
def test_unusable_gpu_counts_are_invalid_spec_on_the_nodeset_and_the_controller(client, spec, problem):  # noqa: F811 - the imported fixture
    resp = sync(client, request(nodeset(replicas=1, **spec)))
    invalid = condition(resp, names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and problem in invalid["message"], invalid
    controller = client.post("/controller/sync", json=controller_request(cr("Controller", "slurm", {}), rel=related(
        cr("NodeSet", "gpu", {"controllerRef": {"name": "slurm"}, **spec}))))  # fmt: skip
    assert controller.status_code == 200, controller.get_json()
    invalid = condition(controller.get_json(), names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and problem in invalid["message"], invalid


def test_gres_types_are_the_sorted_names():
    assert gres_types("shard:16,gpu:h100:8,gpu:a100:1", "x") == ("gpu", "shard")
    with pytest.raises(InvalidSpec, match="x must be"):
        gres_types("gpu:1,", "x")
