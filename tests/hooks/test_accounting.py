"""Accounting → slurmdbd.conf Secret, StatefulSet and Service (hooks/accounting.py)."""

from __future__ import annotations

import base64
import json

import pytest

from hooks import accounting
from hooks.app import create_app
from hooks.contract import parse_composite
from hooks.objects import content_hash
from slinky_common import names
from tests.hooks.kinds.accounting import PASSWORD, SPEC, accounting_cr, post, secrets, sync
from tests.support.hooks import as_observed, assert_invalid_spec, by_kind, condition_of, cr, request
from tests.support.kube import validate_builtin


@pytest.fixture()
def client():
    return create_app().test_client()


def conf_of(response: dict) -> str:
    return base64.b64decode(by_kind(response)["Secret/slurm-accounting"]["data"]["slurmdbd.conf"]).decode()


# The full text of slurmdbd.conf is pinned by tests/hooks/golden/slurmdbd.conf.* (test_golden.py).


def test_password_with_comment_and_space_is_quoted_and_escaped(client):
    conf = conf_of(sync(client, accounting_cr(), rel=secrets(b"a b#c")))
    assert 'StoragePass="a b\\#c"\n' in conf


def test_children_validate_strictly(client):
    parent = accounting_cr(
        jwksKeyRef={"name": "jwks", "key": "jwks.json"},
        slurmdbd={"resources": {"limits": {"memory": "1Gi"}}, "args": ["-vv"]},
        template={"metadata": {"labels": {"team": "hpc"}}, "spec": {"priorityClassName": "high"}},
        service={"nodePort": 32500, "spec": {"type": "NodePort", "externalIPs": ["1.2.3.4"]}},
    )
    resp = sync(client, parent)
    assert sorted(by_kind(resp)) == [
        "Secret/slurm-accounting",
        "Service/slurm-accounting",
        "StatefulSet/slurm-accounting",
    ]
    for child in resp["children"]:
        assert validate_builtin(child) == []
    svc = by_kind(resp)["Service/slurm-accounting"]["spec"]
    assert svc["ports"] == [
        {"name": "slurmdbd", "port": 6819, "targetPort": "slurmdbd", "protocol": "TCP", "nodePort": 32500}
    ]
    assert "externalIPs" not in svc


def test_statefulset_pod_mounts_config_and_keys_and_carries_hashes():
    resp = accounting.sync(parse_composite(request(accounting_cr(), rel=secrets()), "Accounting"))
    sts = by_kind(resp)["StatefulSet/slurm-accounting"]
    pod = sts["spec"]["template"]
    assert (sts["spec"]["replicas"], sts["spec"]["serviceName"], sts["spec"]["podManagementPolicy"]) == (
        1,
        "slurm-accounting",
        "Parallel",
    )
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401, "fsGroup": 401}
    main = pod["spec"]["containers"][0]
    assert main["name"] == "slurmdbd" and main["ports"][0]["containerPort"] == 6819
    sources = pod["spec"]["volumes"][0]["projected"]["sources"]
    assert [s["secret"]["items"][0]["path"] for s in sources] == ["slurmdbd.conf", "slurm.key", "jwt.key"]
    annotations = pod["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_SLURMDBD_CONF_HASH] == content_hash({"slurmdbd.conf": conf_of(resp)})
    assert annotations[names.ANNOTATION_SLURM_KEY_HASH] == content_hash({"slurm.key": b"K" * 32})
    assert annotations[names.ANNOTATION_JWT_KEY_HASH] == content_hash({"jwt.key": b"J" * 32})


def test_password_changes_roll_the_pod_through_the_conf_hash(client):
    before = by_kind(sync(client, accounting_cr()))["StatefulSet/slurm-accounting"]
    after = by_kind(sync(client, accounting_cr(), rel=secrets(b"rotated")))["StatefulSet/slurm-accounting"]
    key = names.ANNOTATION_SLURMDBD_CONF_HASH
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != after["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_password_is_in_slurmdbd_conf_and_nowhere_else(client):
    resp = sync(client, accounting_cr())
    secret_child = by_kind(resp)["Secret/slurm-accounting"]
    others = [c for c in resp["children"] if c is not secret_child]
    assert PASSWORD.decode() in conf_of(resp)
    assert PASSWORD.decode() not in json.dumps(others) + json.dumps(resp["status"])
    assert PASSWORD.decode() not in json.dumps({k: v for k, v in secret_child.items() if k != "data"})


@pytest.mark.parametrize("bad", [b"zq1\nzq2", b'zq3 " zq4', b"zq5\xff\xfe"])
def test_unusable_password_keeps_children_and_never_leaks(client, bad):
    desired = sync(client, accounting_cr())["children"]
    resp = post(client, accounting_cr(), as_observed(desired), secrets(bad))
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["children"] == desired
    refs = condition_of(body, names.CONDITION_REFERENCES_RESOLVED)
    assert (refs["status"], refs["reason"]) == ("False", "PasswordInvalid")
    assert b"zq" not in resp.data


def test_missing_password_secret_keeps_existing_children_unchanged(client):
    desired = sync(client, accounting_cr())["children"]
    resp = sync(client, accounting_cr(), as_observed(desired), secrets(password=None))
    assert resp["children"] == desired
    refs = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert (refs["status"], refs["reason"]) == ("False", "SecretNotFound")
    assert "'mariadb'" in refs["message"]
    assert resp["resyncAfterSeconds"] > 0


def test_missing_password_secret_before_anything_exists_creates_only_the_service(client):
    resp = sync(client, accounting_cr(), rel=secrets(password=None))
    assert sorted(by_kind(resp)) == ["Service/slurm-accounting"]


def test_same_request_same_bytes_and_feedback_is_a_fixed_point(client):
    first, second = post(client, accounting_cr()), post(client, accounting_cr())
    assert first.status_code == 200 and first.data == second.data
    desired = first.get_json()["children"]
    again = sync(client, accounting_cr(), as_observed(desired, {"replicas": 1, "readyReplicas": 1}))
    assert again["children"] == desired
    assert condition_of(again, names.CONDITION_AVAILABLE)["status"] == "True"


def test_external_mode_runs_nothing_and_says_so(client):
    parent = cr("Accounting", "slurm", {"external": True, "externalConfig": {"host": "dbd.example", "port": 6819}})
    resp = sync(client, parent, rel={})
    assert resp["children"] == []
    ext = condition_of(resp, names.CONDITION_EXTERNAL)
    assert ext["status"] == "True" and "dbd.example:6819" in ext["message"]
    assert client.post("/accounting/customize", json={"parent": parent}).get_json() == {"relatedResources": []}


def test_customize_asks_for_the_password_and_key_secrets(client):
    resp = client.post("/accounting/customize", json={"parent": accounting_cr()})
    assert resp.get_json() == {
        "relatedResources": [
            {
                "apiVersion": "v1",
                "resource": "secrets",
                "namespace": "slurm",
                "names": ["mariadb", "slurm-auth", "slurm-jwt"],
            }
        ]
    }


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"storageConfig": None}, "spec.storageConfig.host is required"),
        ({"storageConfig": {"host": "db"}}, "spec.storageConfig.passwordKeyRef is required"),
        ({"storageConfig": {**SPEC["storageConfig"], "host": "db\nPluginDir=/evil"}}, "spec.storageConfig.host"),
        ({"storageConfig": {**SPEC["storageConfig"], "port": "3306"}}, "spec.storageConfig.port"),
        ({"slurmKeyRef": None}, "spec.slurmKeyRef is required"),
        ({"jwtKeyRef": None}, "spec.jwtKeyRef"),
        ({"external": "yes"}, "spec.external"),
        ({"extraConf": ["a"]}, "spec.extraConf"),
        ({"extraConf": "CommitDelay=1 \\"}, "spec.extraConf must not end with a '\\' line continuation"),
        ({"extraConf": "CommitDelay=1\r\nX=1"}, "spec.extraConf must not contain carriage returns"),
    ],
)
def test_invalid_spec_is_a_condition_naming_the_field_and_changes_nothing(client, spec, needle):
    message = assert_invalid_spec(client, "accounting", accounting_cr(), accounting_cr(**spec), secrets(), needle)
    assert PASSWORD.decode() not in message
