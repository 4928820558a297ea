"""The one Controller model every hook uses (hooks/controller/model.py), and the hooks agreeing through it."""

from __future__ import annotations

import pytest

from hooks import loginset
from hooks.app import create_app
from hooks.contract import parse_composite
from hooks.controller.model import (
    Controller,
    Endpoint,
    check_host,
    check_port,
    find_controller,
    read_controller,
)
from slinky_common import names
from slinky_common.errors import BadHookRequest
from tests.support.hooks import CONTROLLER_KEY, NS, by_kind, condition_of, cr, related, request, secret

KEYS = {"slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"}, "jwtKeyRef": {"name": "jwt-key", "key": "jwt.key"}}
EXTERNAL = {"external": True, "externalConfig": {"host": "ctld.example.com", "port": 7817}}
HA = {"ha": {"enabled": True, "backups": 2}, "persistence": {"enabled": True, "existingClaim": "statesave"}}
VARIANTS = {"internal": {}, "ha": HA, "external": EXTERNAL}
KINDS = {"nodeset": "NodeSet", "loginset": "LoginSet", "restapi": "RestApi"}
# The spec of each hook whose pods reach slurmctld.
CLIENTS = {
    "nodeset": {"controllerRef": {"name": "slurm"}, "replicas": 1},
    "loginset": {"controllerRef": {"name": "slurm"}, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}},
    "restapi": {"controllerRef": {"name": "slurm"}},
}


@pytest.fixture()
def client(monkeypatch):
    monkeypatch.setattr(loginset, "generate_host_keys", lambda: dict.fromkeys(loginset.HOST_KEY_FILES, b"key"))
    return create_app().test_client()


def controller(spec: dict) -> dict:
    return cr("Controller", "slurm", {**KEYS, **spec})


def inputs(ctrl: dict) -> dict:
    keys = {"slurm-key": {"slurm.key": b"s" * 32}, "jwt-key": {"jwt.key": b"j" * 32}, "sssd": {"sssd.conf": b"x"}}
    return related(ctrl, *(secret(name, data) for name, data in keys.items()))


def post(client, segment: str, parent: dict, rel: dict) -> dict:
    resp = client.post(f"/{segment}/sync", json=request(parent, rel=rel))
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def conf_servers(client, ctrl: dict) -> dict[str, str]:
    """`--conf-server` of each client pod that takes one, and the ConfigMap the RestApi projects."""
    answers = {
        name: by_kind(post(client, name, cr(KINDS[name], "c", spec), inputs(ctrl))) for name, spec in CLIENTS.items()
    }
    slurmd = answers["nodeset"]["Pod/c-0"]["spec"]["containers"][0]
    login = answers["loginset"]["Deployment/c"]["spec"]["template"]["spec"]["containers"][0]
    restapi = answers["restapi"]["Deployment/c-restapi"]["spec"]["template"]["spec"]
    return {
        "slurmd": slurmd["args"][slurmd["args"].index("--conf-server") + 1],
        "sackd": next(e["value"] for e in login["env"] if e["name"] == "SACKD_OPTIONS").removeprefix("--conf-server "),
        "slurmrestd config": restapi["volumes"][0]["projected"]["sources"][0]["configMap"]["name"],
    }


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_hook_that_points_at_slurmctld_names_where_the_controller_hook_makes_it_listen(client, variant):
    ctrl = controller(VARIANTS[variant])
    children = by_kind(post(client, "controller", ctrl, inputs(ctrl)))
    conf_map = next(name for name in children if name.startswith("ConfigMap/"))
    settings: dict[str, list[str]] = {}
    for line in children[conf_map]["data"]["slurm.conf"].splitlines():
        key, _, value = line.partition("=")
        settings.setdefault(key, []).append(value)
    # Clients reach SlurmctldAddr when it is set, else the one SlurmctldHost.
    (host,) = settings.get("SlurmctldAddr", settings["SlurmctldHost"])
    (port,) = settings["SlurmctldPort"]
    if variant == "external":
        assert (host, port) == ("ctld.example.com", "7817")
        assert not any(name.startswith("Service/slurm-controller") for name in children)
    else:
        service, namespace = host.split(".")
        ports = children[f"Service/{service}"]["spec"]["ports"]
        assert namespace == NS and [p["port"] for p in ports] == [int(port)]
        assert len(settings["SlurmctldHost"]) == (3 if variant == "ha" else 1)
    assert conf_servers(client, ctrl) == {
        "slurmd": f"{host}:{port}",
        "sackd": f"{host}:{port}",
        "slurmrestd config": conf_map.removeprefix("ConfigMap/"),
    }


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"controllerRef": None}, "spec.controllerRef.name is required"),
        ({"controllerRef": {"name": ""}}, "spec.controllerRef.name is required"),
        ({"controllerRef": "slurm"}, "spec.controllerRef must be an object"),
        ({"controllerRef": {"name": 5}}, "spec.controllerRef.name must be a string"),
    ],
)
@pytest.mark.parametrize("segment", sorted(CLIENTS))
def test_a_bad_controller_ref_reads_the_same_in_every_hook(client, segment, spec, needle):
    resp = post(client, segment, cr(KINDS[segment], "c", {**CLIENTS[segment], **spec}), inputs(controller({})))
    assert condition_of(resp, names.CONDITION_INVALID_SPEC)["message"].startswith(needle + ";")


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (
            {"external": True, "externalConfig": {"host": "a b", "port": 6817}},
            "related Controller 'slurm' spec.externalConfig.host must be a host name or IP address",
        ),
        ({"external": True}, "related Controller 'slurm' spec.externalConfig.host"),
        ({"ha": {"enabled": True, "backups": 0}}, "related Controller 'slurm' spec.ha.backups"),
        ({"slurmKeyRef": {"name": "k"}}, "related Controller 'slurm' spec.slurmKeyRef.key"),
    ],
)
@pytest.mark.parametrize("segment", sorted(CLIENTS))
def test_an_unusable_related_controller_reads_the_same_in_every_hook(client, segment, spec, needle):
    resp = post(client, segment, cr(KINDS[segment], "c", CLIENTS[segment]), inputs(controller(spec)))
    assert needle in condition_of(resp, names.CONDITION_INVALID_SPEC)["message"]


def test_internal_names_and_addresses():
    ctrl = Controller("slurm", "hpc", backups=1)
    assert (ctrl.service_name, ctrl.internal_service_name, ctrl.config_map) == (
        "slurm-controller",
        "slurm-controller-internal",
        "slurm-config",
    )
    assert (ctrl.conf_server, ctrl.replicas, ctrl.ha) == ("slurm-controller.hpc:6817", 2, True)
    assert ctrl.slurmctld_hosts == (
        "slurm-controller-0(slurm-controller-0.slurm-controller-internal.hpc)",
        "slurm-controller-1(slurm-controller-1.slurm-controller-internal.hpc)",
    )
    assert (ctrl.worker_service, ctrl.worker_dns_search) == (
        "slurm-workers-slurm",
        "slurm-workers-slurm.hpc.svc.cluster.local",
    )


def test_an_external_controller_has_no_backups_and_is_reached_at_its_own_address():
    ctrl = read_controller(controller({**EXTERNAL, **HA}), NS, "spec")
    assert (ctrl.external, ctrl.backups, ctrl.conf_server) == (
        Endpoint("ctld.example.com", 7817),
        0,
        "ctld.example.com:7817",
    )
    assert ctrl.slurmctld_hosts == ("ctld.example.com",)


def test_find_controller_reads_the_related_controller_only_in_the_namespace():
    ctrl = controller({"accountingRef": {"name": "acct"}})
    ctrl["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    other_ns = {**controller({}), "metadata": {**ctrl["metadata"], "namespace": "elsewhere"}}
    restapi = cr("RestApi", "r", {})
    req = parse_composite(request(restapi, rel={CONTROLLER_KEY: {"elsewhere/slurm": other_ns}}), "RestApi")
    assert find_controller(req, NS, "slurm") is None
    req = parse_composite(request(restapi, rel=related(ctrl)), "RestApi")
    found = find_controller(req, NS, "slurm")
    assert found is not None
    assert (found.slurm_key, found.accounting, found.deleting, found.conf_server) == (
        read_controller(ctrl, NS, "spec").slurm_key,
        "acct",
        True,
        "slurm-controller.slurm:6817",
    )


@pytest.mark.parametrize("host", ["", "a b", "host\nX=1", "h,i", "h=i", "h(i)", None, 5])
def test_bad_hosts_are_rejected(host):
    with pytest.raises(BadHookRequest, match=r"spec\.externalConfig\.host"):
        check_host(host, "spec.externalConfig.host")


@pytest.mark.parametrize("host", ["db.example.com", "10.0.0.1", "[fd00::1]", "my_host-1"])
def test_good_hosts_pass(host):
    assert check_host(host, "h") == host


@pytest.mark.parametrize("port", [0, 65536, "6819", True, None])
def test_bad_ports_are_rejected(port):
    with pytest.raises(BadHookRequest, match="port"):
        check_port(port, "port")


def test_nodeset_finalize_with_an_unusable_related_controller_still_answers_and_says_why(client):
    """Deletion must never wait on a 400: the Controller counts as not found (busy pods kept, idle ones released)."""
    parent = cr("NodeSet", "c", CLIENTS["nodeset"], deletionTimestamp="2025-01-01T00:00:00Z")
    body = {**request(parent, rel=inputs(controller({"external": True}))), "finalizing": True}
    resp = client.post("/nodeset/finalize", json=body)
    assert resp.status_code == 200, resp.get_json()
    message = condition_of(resp.get_json(), names.CONDITION_INVALID_SPEC)["message"]
    assert "related Controller 'slurm' spec.externalConfig.host" in message and "idle ones released" in message
