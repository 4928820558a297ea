"""References between CRs, derived names, kept children and merged config lines (hooks/cluster.py).

The helpers at the top are shared by the RestApi, Accounting, Token and LoginSet hook tests.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from hooks import applied, cluster, conffile, contract, invalidspec, references
from hooks.contract import parse_composite
from slinky_common import fields, names
from slinky_common.errors import BadHookRequest, InvalidSpec

NS = "slurm"
CONTROLLER_KEY = contract.TYPE_CONTROLLER


def cr(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1, **meta},
        "spec": spec,
    }


def secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "7"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def related(*objects: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Objects keyed the v2 way: {"Kind.apiVersion": {"ns/name": object}}."""
    groups: dict[str, dict[str, Any]] = {}
    for obj in objects:
        api = obj["apiVersion"]
        type_key = f"{obj['kind']}.{api}"
        groups.setdefault(type_key, {})[f"{NS}/{obj['metadata']['name']}"] = obj
    return groups


def as_observed(children: list[dict[str, Any]], status: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Desired children as Metacontroller would report them back: server fields plus last-applied."""
    observed = []
    for child in children:
        live = json.loads(json.dumps(child))
        meta = live["metadata"]
        meta.update(
            namespace=NS, uid=f"uid-{meta['name']}", resourceVersion="42", creationTimestamp="2024-01-01T00:00:00Z"
        )
        meta.setdefault("labels", {})["controller-uid"] = "uid-parent"
        meta.setdefault("annotations", {})[names.ANNOTATION_LAST_APPLIED] = json.dumps(child)
        if status is not None and child["kind"] in ("Deployment", "StatefulSet"):
            live["status"] = status
        observed.append(live)
    return related(*observed)


def request(parent: dict[str, Any], children: dict | None = None, rel: dict | None = None) -> dict[str, Any]:
    return {"controller": {}, "parent": parent, "children": children or {}, "related": rel or {}, "finalizing": False}


def by_kind(response: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in response["children"]}


def condition_of(response: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in response["status"]["conditions"] if c["type"] == type_)


def assert_invalid_spec(
    client: Any,
    segment: str,
    good: dict[str, Any],
    bad: dict[str, Any],
    rel: dict,
    needle: str,
    good_rel: dict | None = None,
) -> str:
    """`bad` (a spec value the CRD let through but the hook cannot use) changes nothing and says why.

    First sync: no children, an InvalidSpec condition naming the field, a resync. After `good` was
    applied (with `good_rel`, default `rel`): every child comes back exactly as last applied and the observed status
    fields stay.
    Ready is False with reason InvalidSpec both times. Customize still answers. Returns the condition message.
    """
    from tests.support.kube import validate_cr

    fresh = client.post(f"/{segment}/sync", json=request(bad, rel=rel))
    assert fresh.status_code == 200, fresh.get_json()
    body = fresh.get_json()
    assert body["children"] == [] and body["resyncAfterSeconds"] > 0
    invalid = condition_of(body, names.CONDITION_INVALID_SPEC)
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidValue") and needle in invalid["message"]
    assert validate_cr({**good, "status": body["status"]}) == []  # the status schema (bad may break the spec schema)

    applied = client.post(f"/{segment}/sync", json=request(good, rel=rel if good_rel is None else good_rel)).get_json()
    with_status = {**bad, "status": applied["status"]}
    later = client.post(f"/{segment}/sync", json=request(with_status, as_observed(applied["children"]), rel)).get_json()
    assert sorted(later["children"], key=_identity) == sorted(applied["children"], key=_identity)
    assert {k: v for k, v in later["status"].items() if k != "conditions"} == {
        k: v for k, v in applied["status"].items() if k != "conditions"
    }
    replaced = (names.CONDITION_INVALID_SPEC, names.CONDITION_READY)
    kept = [c for c in applied["status"]["conditions"] if c["type"] != names.CONDITION_READY]
    assert [c for c in later["status"]["conditions"] if c["type"] not in replaced] == kept
    for response in (body, later):  # `kubectl wait --for=condition=Ready` must not pass while the spec is unusable
        ready = condition_of(response, names.CONDITION_READY)
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and needle in ready["message"]
    assert client.post(f"/{segment}/customize", json={"parent": bad}).status_code == 200
    return invalid["message"]


def _identity(child: dict[str, Any]) -> tuple[str, str]:
    return child["kind"], child["metadata"]["name"]


# --- tests of hooks/cluster.py ------------------------------------------------------------------------


def test_derived_names():
    assert cluster.accounting_host("acct") == "acct-accounting"


def test_secret_value_explains_what_is_missing_without_values():
    req = parse_composite(request(cr("Token", "t", {}), rel=related(secret("s", {"a": b"hunter2"}))), "Token")
    assert references.secret_value(req, NS, fields.KeyRef("s", "a")) == b"hunter2"
    absent = references.secret_value(req, NS, fields.KeyRef("nope", "a"))
    no_key = references.secret_value(req, NS, fields.KeyRef("s", "b"))
    assert isinstance(absent, references.Missing) and absent.reason == "SecretNotFound"
    assert isinstance(no_key, references.Missing) and no_key.reason == "SecretKeyNotFound"
    assert "hunter2" not in absent.message + no_key.message


def test_merged_config_unions_list_options_and_ours_win_on_key_collisions():
    ours = {"AuthAltParameters": ["jwt_key=/etc/slurm/jwt.key"], "AuthInfo": ["use_client_ids"]}
    assert conffile.merged_config(ours, "") == []
    assert conffile.merged_config(ours, "AuthInfo=Cred_Expire=70 # comment\nauthinfo=ttl=5,cred_expire=60") == [
        "AuthInfo=cred_expire=60,ttl=5,use_client_ids"
    ]
    assert conffile.merged_config(ours, "AuthAltParameters=jwt_key=/x,\\\n  disable_token_creation") == [
        "AuthAltParameters=disable_token_creation,jwt_key=/etc/slurm/jwt.key"
    ]
    # option names are case-insensitive to Slurm, values (paths) are not
    ours = {"AuthAltParameters": ["jwt_key=/etc/slurm/jwt.key"]}
    assert conffile.merged_config(ours, "AuthAltParameters=JWKS=/etc/slurm/JWKS.json") == [
        "AuthAltParameters=jwks=/etc/slurm/JWKS.json,jwt_key=/etc/slurm/jwt.key"
    ]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("db.example", "db.example"),
        ("pa#ss", "pa\\#ss"),
        ("back\\slash", "back\\\\slash"),
        ("two words", '"two words"'),
        ('no"space', 'no"space'),
        ('"leading', None),
        ('say "hi" there', None),
        ("line\nPluginDir=/tmp", None),
        ("nul\0", None),
    ],
)
def test_conf_value_escapes_or_refuses(value, written):
    assert conffile.conf_value(value) == written


def test_invalid_spec_keeps_children_status_and_other_conditions():
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    parent = cr("RestApi", "r", {})
    parent["status"] = {
        "replicas": 2,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "Ready",
                "message": "m",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            },
            {
                "type": names.CONDITION_INVALID_SPEC,
                "status": "True",
                "reason": "InvalidValue",
                "message": "old",
                "lastTransitionTime": "2024-02-02T00:00:00Z",
            },
        ],
    }
    req = parse_composite(request(parent, as_observed([desired])), "RestApi")
    resp = invalidspec.invalid_spec_response(req, InvalidSpec("spec.replicas must be an integer >= 0"))
    resp = orjson.loads(applied.serialise(resp))  # kept children are JSON text
    assert resp["children"] == [desired]
    assert resp["status"]["replicas"] == 2
    ready, available, invalid = resp["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == (names.CONDITION_READY, "False", "InvalidSpec")
    assert available == parent["status"]["conditions"][0]
    assert invalid["message"].startswith("spec.replicas must be an integer >= 0; ")
    assert invalid["lastTransitionTime"] == "2024-02-02T00:00:00Z"  # still invalid: the transition time holds


def test_an_invalid_spec_is_still_a_400_for_hooks_that_do_not_report_it():
    assert issubclass(InvalidSpec, BadHookRequest)


def test_derivable_leaves_out_only_the_parts_an_invalid_value_prevents():
    def bad() -> list[str]:
        raise InvalidSpec("spec.x")

    assert invalidspec.derivable(lambda: ["a"], bad, lambda: ["b"]) == ["a", "b"]


def test_conf_field_names_the_field():
    with pytest.raises(BadHookRequest, match=r"spec\.storageConfig\.host cannot be written"):
        conffile.conf_field("db\nPluginDir=/tmp", "spec.storageConfig.host")


# --- status of every kind against its CRD -------------------------------------------------------------


def _statuses() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(parent, status the hook returned) for each kind, with a missing reference so conditions say False."""
    from hooks.app import create_app

    client = create_app().test_client()
    ref = {"controllerRef": {"name": "slurm"}}
    parents = {
        "restapi": cr("RestApi", "r", ref),
        "loginset": cr("LoginSet", "l", {**ref, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}),
        "token": cr("Token", "t", {"jwtKeyRef": {"name": "jwt", "key": "k"}, "username": "u"}),
        "accounting": cr(
            "Accounting",
            "a",
            {
                "slurmKeyRef": {"name": "s", "key": "k"},
                "jwtKeyRef": {"name": "j", "key": "k"},
                "storageConfig": {"host": "db", "passwordKeyRef": {"name": "p", "key": "k"}},
            },
        ),
    }
    rel = {"token": related(secret("jwt", {"k": b"k" * 32}))}
    result = []
    for segment, parent in parents.items():
        resp = client.post(f"/{segment}/sync", json=request(parent, rel=rel.get(segment)))
        assert resp.status_code == 200, resp.get_json()
        result.append((parent, resp.get_json()["status"]))
    return result


def test_every_status_is_accepted_by_its_crd():
    from tests.support.kube import validate_cr

    for parent, status in _statuses():
        assert validate_cr({**parent, "status": status}) == [], parent["kind"]
