"""Names and numbers both halves derive the same way (slinky_common/wellknown.py)."""

from __future__ import annotations

import pytest

from slinky_common import names, wellknown
from slinky_common.errors import InvalidSpec


def controller(name: str = "slurm", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "hpc"}, "spec": spec}


def test_the_cluster_name_is_spec_cluster_name_else_namespace_and_name():
    assert wellknown.cluster_name(controller()) == "hpc_slurm"
    assert wellknown.cluster_name(controller(clusterName="prod")) == "prod"
    assert wellknown.cluster_name(controller(clusterName="")) == "hpc_slurm"


@pytest.mark.parametrize("bad", ["two words", "a\nClusterName=b", "x=y", 7])
def test_a_cluster_name_slurm_conf_would_split_is_refused_naming_the_field(bad):
    with pytest.raises(InvalidSpec, match=r"spec\.clusterName"):
        wellknown.cluster_name(controller(clusterName=bad))


def test_a_nodes_slurm_name_is_the_valid_override_else_its_first_dns_label():
    key = names.ANNOTATION_HOSTNAME_OVERRIDE
    node = {"metadata": {"name": "gpu-7.rack3.example.com", "annotations": {}}}
    assert wellknown.node_hostname(node, key) == "gpu-7"
    node["metadata"]["annotations"][key] = "n7"
    assert wellknown.node_hostname(node, key) == "n7"
    node["metadata"]["annotations"][key] = "Not_A_Label"
    assert wellknown.node_hostname(node, key) == "gpu-7"
    assert wellknown.node_hostname({"metadata": None}, key) == ""


def test_services_select_on_name_and_instance_and_the_restapi_service_is_derived():
    assert wellknown.selector_labels("slurmd", "gpu") == {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: "gpu"}
    assert wellknown.component_labels("slurmd", "gpu", "worker")[names.LABEL_COMPONENT] == "worker"
    assert wellknown.restapi_service("slurm") == "slurm-restapi"
    ports = (wellknown.SLURMCTLD_PORT, wellknown.SLURMD_PORT, wellknown.SLURMDBD_PORT, wellknown.SLURMRESTD_PORT)
    assert ports == (6817, 6818, 6819, 6820)  # Slurm's own defaults, which Slinky's images use
