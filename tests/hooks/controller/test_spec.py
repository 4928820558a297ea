"""Reading a Controller's spec (hooks/controller/spec.py): Slinky's defaults, HA's requirement of a shared
claim, where slurmctld reaches slurmdbd, and a field no child can be built from named."""

from __future__ import annotations

import pytest

from hooks.controller.model import Endpoint
from hooks.controller.spec import accounting_endpoint, parse_spec
from slinky_common.errors import InvalidSpec


def controller(**spec) -> dict:
    return {"metadata": {"name": "slurm", "namespace": "hpc"}, "spec": spec}


def test_defaults() -> None:
    spec = parse_spec(controller())
    assert (spec.cluster_name, spec.ha, spec.metrics, spec.inplace_reconfigure) == ("hpc_slurm", False, False, False)
    assert spec.persistence.enabled and spec.persistence.existing_claim == ""


def test_ha_needs_an_existing_shared_claim() -> None:
    with pytest.raises(InvalidSpec, match=r"spec\.persistence\.existingClaim is required .* spec\.ha\.enabled"):
        parse_spec(controller(ha={"enabled": True}))
    with pytest.raises(InvalidSpec, match="existingClaim is required"):
        parse_spec(controller(ha={"enabled": True}, persistence={"enabled": False, "existingClaim": "state"}))
    spec = parse_spec(controller(ha={"enabled": True, "backups": 2}, persistence={"existingClaim": "state"}))
    assert spec.ha and spec.backups == 2


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"clusterName": "a b"}, "spec.clusterName"),
        ({"extraConf": "A=1 \\"}, "spec.extraConf"),
        ({"metrics": {"enabled": True, "serviceMonitor": {"enabled": True, "endpoints": [{}]}}}, "endpoints"),
        ({"ha": {"enabled": True, "backups": 0}, "persistence": {"existingClaim": "s"}}, "spec.ha.backups"),
        ({"inplaceReconfigure": "yes"}, "spec.inplaceReconfigure"),
    ],
)
def test_an_unusable_value_is_named(spec: dict, needle: str) -> None:
    with pytest.raises(InvalidSpec, match=needle.replace(".", r"\.")):
        parse_spec(controller(**spec))


def test_slurmdbd_is_the_accountings_service_or_its_external_host() -> None:
    acct = {"metadata": {"name": "acct", "namespace": "hpc"}, "spec": {}}
    assert accounting_endpoint(acct, "Accounting acct") == Endpoint("acct-accounting.hpc", 6819)
    acct["spec"] = {"service": {"port": 7000}}
    assert accounting_endpoint(acct, "Accounting acct") == Endpoint("acct-accounting.hpc", 7000)
    external = {
        "metadata": {"name": "acct", "namespace": "hpc"},
        "spec": {"external": True, "externalConfig": {"host": "db.example.org", "port": 6819}},
    }
    assert accounting_endpoint(external, "Accounting acct") == Endpoint("db.example.org", 6819)
