"""Names and numbers both halves derive the same way (Slinky keeps these in its API package,
api/v1beta1/well_known.go): daemon ports, the labels Services select on, a Node's Slurm name, the
slurmrestd Service of a RestApi and a Controller's Slurm cluster name."""

from __future__ import annotations

import re

from slinky_common import names
from slinky_common.fields import namespace_of, opt_str, spec_of
from slinky_common.jsontypes import JSON, dict_field
from slinky_common.nodesetconf import check_word

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
SLURMRESTD_PORT = 6820


def selector_labels(app_name: str, instance: str) -> dict[str, str]:
    """The labels Services and PDBs select on (name + instance, as Slinky)."""
    return {names.LABEL_NAME: app_name, names.LABEL_INSTANCE: instance}


def component_labels(app_name: str, instance: str, component: str) -> dict[str, str]:
    return {**selector_labels(app_name, instance), names.LABEL_COMPONENT: component}


def restapi_service(restapi: str) -> str:
    """The Service in front of a RestApi's slurmrestd pods."""
    return f"{restapi}-restapi"


def cluster_name(controller: JSON) -> str:
    """The Slurm ClusterName of a Controller: spec.clusterName, else `<namespace>_<name>`."""
    name = opt_str(spec_of(controller), "clusterName") or f"{namespace_of(controller)}_{controller['metadata']['name']}"
    return check_word(name, "spec.clusterName")


def node_hostname(node: JSON, override_annotation: str) -> str:
    """The Slurm node name for a Node: the override annotation, else the first DNS label."""
    meta = dict_field(node, "metadata")
    override = (meta.get("annotations") or {}).get(override_annotation)
    if isinstance(override, str) and _is_dns_label(override):
        return override
    return str(meta.get("name") or "").split(".", 1)[0]


def _is_dns_label(value: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value))
