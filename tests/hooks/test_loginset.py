"""LoginSet → host keys, sshd config, Service and login Deployment (hooks/loginset.py)."""

from __future__ import annotations

import base64
import os

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from hooks import loginset
from hooks.app import create_app
from hooks.contract import parse_composite
from hooks.objects import content_hash
from slinky_common import names
from tests.hooks.kinds.loginset import controller, inputs, loginset_cr, pod_of, sync
from tests.support.hooks import (
    NS,
    as_observed,
    assert_invalid_spec,
    by_kind,
    condition_of,
    cr,
    related,
    request,
    secret,
)
from tests.support.kube import validate_builtin

KEYS_NAME = "Secret/login-ssh-host-keys"


@pytest.fixture()
def client():
    return create_app().test_client()


@pytest.mark.host_keys
def test_host_keys_are_valid_openssh_keys_of_three_types(client):
    keys = by_kind(sync(client, loginset_cr()))[KEYS_NAME]
    data = {k: base64.b64decode(v) for k, v in keys["data"].items()}
    assert sorted(data) == sorted(loginset.HOST_KEY_FILES)
    assert keys["immutable"] is True
    types = {"rsa": rsa.RSAPrivateKey, "ed25519": ed25519.Ed25519PrivateKey, "ecdsa": ec.EllipticCurvePrivateKey}
    for kind, cls in types.items():
        private = load_ssh_private_key(data[f"ssh_host_{kind}_key"], password=None)
        assert isinstance(private, cls)
        assert load_ssh_public_key(data[f"ssh_host_{kind}_key.pub"]) == private.public_key()
    assert load_ssh_private_key(data["ssh_host_rsa_key"], password=None).key_size == 4096


@pytest.mark.host_keys
def test_host_keys_are_generated_once_and_then_kept(client):
    first = sync(client, loginset_cr())
    other_first = sync(client, loginset_cr())
    assert by_kind(first)[KEYS_NAME]["data"] != by_kind(other_first)[KEYS_NAME]["data"]  # random by nature
    observed = as_observed(first["children"])
    for _ in range(3):
        again = sync(client, loginset_cr(replicas=2), observed)
        assert by_kind(again)[KEYS_NAME] == by_kind(first)[KEYS_NAME]


def test_children_validate_strictly_and_feedback_is_a_fixed_point(client):
    parent = loginset_cr(
        replicas=2,
        login={
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "resources": {"limits": {"cpu": "2"}},
        },
        initconf={"image": "alpine:3"},
        template={"metadata": {"annotations": {"x": "y"}}, "spec": {"tolerations": [{"operator": "Exists"}]}},
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        service={"nodePort": 32222, "spec": {"type": "LoadBalancer", "externalIPs": ["1.2.3.4"]}},
        rootSshAuthorizedKeys="ssh-ed25519 AAAA user@host",
        extraSshdConfig="LoginGraceTime 30",
    )
    first = sync(client, parent)
    assert sorted(by_kind(first)) == ["ConfigMap/login-ssh-config", "Deployment/login", KEYS_NAME, "Service/login"]
    for child in first["children"]:
        assert validate_builtin(child) == []
    observed = as_observed(first["children"], {"replicas": 2, "readyReplicas": 2})
    body = request(parent, observed, inputs())
    a, b = client.post("/loginset/sync", json=body), client.post("/loginset/sync", json=body)
    assert a.data == b.data  # byte-stable once the keys exist
    assert a.get_json()["children"] == first["children"]
    assert a.get_json()["status"]["replicas"] == 2


def test_login_container_pod_and_hash_annotations(client):
    resp = sync(client, loginset_cr(login={"env": [{"name": "A", "value": "1"}]}))
    pod = pod_of(resp)
    login = pod["spec"]["containers"][0]
    assert login["name"] == "login"
    assert login["env"] == [
        {"name": "SACKD_OPTIONS", "value": "--conf-server slurm-controller.slurm:6817"},
        {"name": "A", "value": "1"},
    ]
    assert login["ports"] == [{"name": "login", "containerPort": 22, "protocol": "TCP"}]
    assert pod["spec"]["dnsConfig"] == {"searches": ["slurm-workers-slurm.slurm.svc.cluster.local"]}
    assert pod["spec"]["initContainers"][0]["name"] == "initconf"
    mounts = {m["mountPath"] for m in login["volumeMounts"]}
    assert {"/etc/ssh/sshd_config", "/root/.ssh/authorized_keys", "/etc/sssd/sssd.conf", "/etc/slurm"} <= mounts
    assert {f"/etc/ssh/{f}" for f in loginset.HOST_KEY_FILES} <= mounts
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["slurm-config"]["projected"]["sources"] == [
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}}
    ]
    assert volumes["sssd-conf"]["secret"]["items"] == [{"key": "sssd.conf", "path": "sssd.conf"}]
    annotations = pod["metadata"]["annotations"]
    keys = {k: base64.b64decode(v) for k, v in by_kind(resp)[KEYS_NAME]["data"].items()}
    assert annotations[names.ANNOTATION_SSH_HOST_KEYS_HASH] == content_hash(keys)
    assert annotations[names.ANNOTATION_SSHD_CONF_HASH] == content_hash(
        by_kind(resp)["ConfigMap/login-ssh-config"]["data"]
    )
    assert annotations[names.ANNOTATION_SSSD_CONF_HASH] == content_hash({"sssd.conf": b"[sssd]\n"})


def test_user_login_port_replaces_22(client):
    login = pod_of(sync(client, loginset_cr(login={"ports": [{"name": "login", "containerPort": 33}]})))["spec"][
        "containers"
    ][0]
    assert login["ports"] == [{"name": "login", "containerPort": 33, "protocol": "TCP"}]


def test_ssh_config_and_service(client):
    resp = sync(
        client,
        loginset_cr(
            rootSshAuthorizedKeys="ssh-ed25519 AAAA me",
            extraSshdConfig="PermitRootLogin yes",
            service={"nodePort": 32222},
        ),
    )
    data = by_kind(resp)["ConfigMap/login-ssh-config"]["data"]
    assert data["authorized_keys"].endswith("\nssh-ed25519 AAAA me\n")
    assert data["sshd_config"].startswith("#\n### GENERAL ###\nInclude /etc/ssh/sshd_config.d/*.conf\nUsePAM yes\n")
    assert data["sshd_config"].endswith("### EXTRA CONFIG ###\nPermitRootLogin yes\n")
    assert by_kind(resp)["Service/login"]["spec"] == {
        "selector": {names.LABEL_NAME: "login", names.LABEL_INSTANCE: "login"},
        "ports": [{"name": "login", "port": 22, "targetPort": "login", "protocol": "TCP", "nodePort": 32222}],
    }


@pytest.mark.parametrize(
    ("rel", "reason"), [({"with_controller": False}, "ControllerNotFound"), ({"with_sssd": False}, "SecretNotFound")]
)
def test_missing_reference_keeps_the_deployment_and_explains(client, rel, reason):
    first = sync(client, loginset_cr())
    resp = sync(client, loginset_cr(), as_observed(first["children"]), inputs(**rel))
    assert resp["children"] == first["children"]
    refs = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert (refs["status"], refs["reason"]) == ("False", reason)
    assert resp["resyncAfterSeconds"] > 0
    fresh = sync(client, loginset_cr(), rel=inputs(**rel))
    assert "Deployment/login" not in by_kind(fresh)


def test_status_replicas_and_selector_come_from_the_observed_deployment(client):
    first = sync(client, loginset_cr(replicas=3))
    assert first["status"]["replicas"] == 0
    assert first["status"]["selector"] == "app.kubernetes.io/instance=login,app.kubernetes.io/name=login"
    resp = sync(client, loginset_cr(replicas=3), as_observed(first["children"], {"replicas": 2, "readyReplicas": 1}))
    assert resp["status"]["replicas"] == 2
    assert condition_of(resp, names.CONDITION_AVAILABLE)["message"] == "1/3 pods ready"


def test_customize_asks_for_the_controller_and_the_sssd_secret(client):
    resp = client.post("/loginset/customize", json={"parent": loginset_cr()})
    assert resp.get_json() == {
        "relatedResources": [
            {"apiVersion": names.API_VERSION, "resource": "controllers", "namespace": "slurm", "names": ["slurm"]},
            {"apiVersion": "v1", "resource": "secrets", "namespace": "slurm", "names": ["sssd"]},
        ]
    }


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"sssdConfRef": None}, "spec.sssdConfRef is required"),
        ({"controllerRef": None}, "spec.controllerRef.name is required"),
        ({"replicas": 1.5}, "spec.replicas"),
        ({"rootSshAuthorizedKeys": 1}, "spec.rootSshAuthorizedKeys"),
        ({"strategy": "Recreate"}, "spec.strategy"),
    ],
)
def test_invalid_spec_is_a_condition_naming_the_field_and_changes_nothing(client, spec, needle):
    assert_invalid_spec(client, "loginset", loginset_cr(), loginset_cr(**spec), inputs(), needle)


def test_pure_sync_once_keys_exist_matches_http(client):
    first = sync(client, loginset_cr())
    body = request(loginset_cr(), as_observed(first["children"]), inputs())
    assert loginset.sync(parse_composite(body, "LoginSet")) == client.post("/loginset/sync", json=body).get_json()


def test_host_keys_are_byte_identical_across_repeated_syncs_of_the_same_observed_state(client, monkeypatch):
    # Every generation differs (as real keys do), so a re-generation could not go unnoticed.
    monkeypatch.setattr(loginset, "generate_host_keys", lambda: {f: os.urandom(32) for f in loginset.HOST_KEY_FILES})
    first = sync(client, loginset_cr())
    body = request(loginset_cr(), as_observed(first["children"]), inputs())
    answers = [client.post("/loginset/sync", json=body) for _ in range(3)]
    assert answers[0].data == answers[1].data == answers[2].data
    assert by_kind(answers[0].get_json())[KEYS_NAME]["data"] == by_kind(first)[KEYS_NAME]["data"]


@pytest.mark.host_keys
@pytest.mark.parametrize("data", [pytest.param({}, id="empty"), pytest.param(None, id="absent")])
def test_an_existing_host_key_secret_is_never_replaced_by_fresh_keys(client, data):
    """The Secret is immutable and users pin its keys: an observed one without usable data is kept
    as it is (and the pod hash stays put), never answered with new random keys on every sync."""
    first = sync(client, loginset_cr())
    observed = as_observed(first["children"])
    broken = observed["Secret.v1"][f"{NS}/login-ssh-host-keys"]
    if data is None:
        del broken["data"]
    else:
        broken["data"] = data
    one, two = sync(client, loginset_cr(), observed), sync(client, loginset_cr(), observed)
    assert by_kind(one)[KEYS_NAME] == by_kind(two)[KEYS_NAME]
    assert by_kind(one)[KEYS_NAME]["data"] == {}
    assert pod_of(one) == pod_of(two)


def test_an_external_controller_gives_sackd_its_host_and_port(client):
    """Seam bug 3 of issue 23: sackd was sent to `slurm-controller.slurm`, a Service an external Controller lacks."""
    external = cr(
        "Controller",
        "slurm",
        {**controller()["spec"], "external": True, "externalConfig": {"host": "ctld.example.com", "port": 7817}},
    )
    pod = pod_of(sync(client, loginset_cr(), rel=related(external, secret("sssd", {"sssd.conf": b"[sssd]\n"}))))
    login = pod["spec"]["containers"][0]
    assert {"name": "SACKD_OPTIONS", "value": "--conf-server ctld.example.com:7817"} in login["env"]
