"""Every child settles under Metacontroller's default apply: once stored, the next sync writes nothing.

Each kind's sample sync request (examples/requests) goes through the hook; each child is created the way
Metacontroller creates it and stored the way the API server stores it (tests/support/apiserver_defaults.py);
the hook then sees those stored children on its next sync, and the model of Metacontroller's dynamic apply
(tests/support/metacontroller_apply.py) decides whether anything must be written. A child that needs a write on
every sync is updated forever (issue 11, finding 6: the controller StatefulSet's volumeClaimTemplates).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hooks.app import create_app
from tests.support import apiserver_defaults as apiserver
from tests.support import metacontroller_apply as mc

REQUESTS = Path(__file__).resolve().parents[2] / "examples" / "requests"
KINDS = ("controller", "nodeset", "loginset", "restapi", "accounting", "token")
CURRENT = 34  # a Kubernetes minor that omits null creationTimestamps
OLDER = 33  # the last minor that serialises them as null
JSON = dict[str, Any]


def example(kind: str) -> JSON:
    return json.loads((REQUESTS / f"{kind}-sync.json").read_text())


def hook_children(kind: str, body: JSON) -> list[JSON]:
    resp = create_app().test_client().post(f"/{kind}/sync", json=body)
    assert resp.status_code == 200, resp.get_json()
    children = resp.get_json()["children"]
    assert children, f"{kind}: the sample request yields no children, so nothing would be checked"
    generate_selector = bool(body["controller"]["spec"].get("generateSelector"))
    return [mc.prepare_child(c, body["parent"], generate_selector) for c in children]


def type_key(obj: JSON) -> str:
    return f"{obj['kind']}.{obj['apiVersion']}"


def object_key(obj: JSON) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def update_method(body: JSON, child: JSON) -> str:
    group = child["apiVersion"].rpartition("/")[0]
    for rule in body["controller"]["spec"]["childResources"]:
        if rule["resource"] == child["kind"].lower() + "s" and rule["apiVersion"].rpartition("/")[0] == group:
            return (rule.get("updateStrategy") or {}).get("method") or "OnDelete"
    raise AssertionError(f"no child rule for {type_key(child)}")


def with_children(body: JSON, observed: dict[tuple[str, str], JSON]) -> JSON:
    """`body` whose observed children are exactly `observed`, grouped as Metacontroller sends them."""
    out = copy.deepcopy(body)
    out["children"] = {key: {} for key in body["children"]}
    for (kind, name), obj in observed.items():
        out["children"].setdefault(kind, {})[name] = obj
    return out


def created(body: JSON, minor: int) -> dict[tuple[str, str], JSON]:
    """The hook's children as the API server stores them after Metacontroller created them."""
    return {
        (type_key(c), object_key(c)): apiserver.stored(mc.create_body(c, body["parent"]), minor)
        for c in hook_children(body["parent"]["kind"].lower(), body)
    }


def sync_writes(body: JSON, observed: dict[tuple[str, str], JSON]) -> dict[tuple[str, str], JSON]:
    """One sync over `observed`: the objects Metacontroller writes."""
    writes = {}
    request = with_children(body, observed)
    for child in hook_children(body["parent"]["kind"].lower(), request):
        key = (type_key(child), object_key(child))
        assert key in observed, f"{key} is created again although it exists"
        if mc.write_for(observed[key], child, update_method(body, child)) is not None:
            writes[key] = mc.apply_update(observed[key], child)
    return writes


def after(observed: dict[tuple[str, str], JSON], writes: dict[tuple[str, str], JSON], minor: int) -> dict:
    """The stored children once the API server has taken `writes`."""
    return {**observed, **{key: apiserver.updated(observed[key], obj, minor) for key, obj in writes.items()}}


def unsettled(body: JSON, observed: dict[tuple[str, str], JSON]) -> dict[str, list[str]]:
    """Children the next sync would change at all (any update method), with what differs."""
    request = with_children(body, observed)
    out = {}
    for child in hook_children(body["parent"]["kind"].lower(), request):
        key = (type_key(child), object_key(child))
        if diff := mc.differences(observed[key], mc.apply_update(observed[key], child)):
            out[f"{key[0]} {key[1]}"] = diff
    return out


def fresh(kind: str) -> JSON:
    """The sample request of a parent whose children do not exist yet."""
    return with_children(example(kind), {})


# --- the fixed point -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_created_children_need_no_update_on_the_next_sync(kind):
    body = fresh(kind)
    assert unsettled(body, created(body, CURRENT)) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_on_kubernetes_1_33_children_settle_after_one_annotation_only_write(kind):
    """Up to 1.33 a claim template is served with `creationTimestamp: null`, which no create form can match for
    every version; echoing the stored templates costs one write of the last-applied annotation, then none."""
    body = fresh(kind)
    observed = created(body, OLDER)
    writes = sync_writes(body, observed)
    for key, written in writes.items():
        assert mc.differences(observed[key], written) == [f".metadata.annotations.{mc.LAST_APPLIED}: "
            f"{observed[key]['metadata']['annotations'][mc.LAST_APPLIED]!r} != "
            f"{written['metadata']['annotations'][mc.LAST_APPLIED]!r}"], key  # fmt: skip
    assert unsettled(body, after(observed, writes, OLDER)) == {}


@pytest.mark.parametrize("kind", KINDS)
def test_children_of_a_running_cluster_settle_after_one_write(kind):
    """The sample's observed children stand for objects an older release created: at most one write each.

    OnDelete children (Pods, the login host keys) are never written, so they may keep differing from what an
    older release made; the second sync must write nothing."""
    body = example(kind)
    observed = {(t, name): apiserver.stored(obj, CURRENT, uid=obj["metadata"].get("uid") or apiserver.DEFAULT_UID)
                for t, objs in body["children"].items() for name, obj in objs.items()}  # fmt: skip
    observed = after(observed, sync_writes(body, observed), CURRENT)
    assert sync_writes(body, observed) == {}


# --- the model, on what Metacontroller is known to do -----------------------------------------------------


def test_model_keeps_server_defaults_in_list_items_with_a_merge_key():
    observed = {"spec": {"containers": [{"name": "a", "image": "x", "terminationMessagePath": "/dev/termination-log"}]}}
    desired = {"spec": {"containers": [{"name": "a", "image": "x"}]}}
    observed["metadata"] = {"annotations": {mc.LAST_APPLIED: mc.go_json(desired)}}
    assert mc.write_for(observed, desired, "InPlace") is None


def test_model_replaces_a_list_without_a_merge_key_and_loses_server_defaults():
    claim = {"metadata": {"name": "statesave"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    desired = {"spec": {"volumeClaimTemplates": [claim]}}
    observed = {"metadata": {"annotations": {mc.LAST_APPLIED: mc.go_json(desired)}},
                "spec": {"volumeClaimTemplates": [{**claim, "status": {"phase": "Pending"}}]}}  # fmt: skip
    assert mc.apply_update(observed, desired)["spec"]["volumeClaimTemplates"] == [claim]
    assert mc.write_for(observed, desired, "InPlace") == "update"
    assert mc.write_for(observed, desired, "OnDelete") is None


def test_model_removes_what_was_applied_before_and_keeps_what_others_set():
    last = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    labels = {"a": "1", "b": "2", "other": "x"}
    observed = {"metadata": {"labels": labels, "annotations": {mc.LAST_APPLIED: mc.go_json(last)}}}
    merged = mc.apply_update(observed, {"metadata": {"labels": {"a": "1"}}})
    assert merged["metadata"]["labels"] == {"a": "1", "other": "x"}


def test_model_detects_merge_keys_by_convention_and_precedence():
    assert mc.detect_merge_key([{"name": "n", "mountPath": "/m"}], [{"name": "o", "mountPath": "/o"}]) == "mountPath"
    assert mc.detect_merge_key([{"name": "n"}, {"port": 1}]) == ""
    assert mc.detect_merge_key([{"name": "n"}, "scalar"]) == ""
    assert mc.detect_merge_key([{"metadata": {"name": "n"}}]) == ""


def test_model_reverts_status_and_system_metadata_and_tells_int_from_float():
    observed = {"metadata": {"uid": "u", "resourceVersion": "7"}, "spec": {"replicas": 1}, "status": {"ready": 1}}
    desired = {"metadata": {"uid": "other"}, "spec": {"replicas": 1}, "status": {"ready": 2}}
    merged = mc.apply_update(observed, desired)
    assert merged["metadata"]["uid"] == "u" and merged["status"] == {"ready": 1}
    assert not mc.go_equal(1, 1.0) and not mc.go_equal(True, 1) and mc.go_equal({"a": [1]}, {"a": [1]})


def test_model_ignores_a_desired_scalar_where_an_object_is_observed():
    observed = {"spec": {"x": {"keep": 1}}, "metadata": {"annotations": {mc.LAST_APPLIED: mc.go_json({"spec": {}})}}}
    assert mc.apply_update(observed, {"spec": {"x": "scalar"}})["spec"]["x"] == {"keep": 1}


def test_model_annotation_is_go_json():
    assert mc.go_json({"b": "<&>", "a": [1, None]}) == '{"a":[1,null],"b":"\\u003c\\u0026\\u003e"}'


# --- a user's projected volumes (issue 11, finding 6: lists without a merge key) ------------------------------

USER_VOLUMES = [
    {"name": "token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "vault"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    ]}},
    {"name": "podinfo", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
]  # fmt: skip
WORKLOAD_KINDS = ("controller", "restapi", "loginset", "accounting")


def with_user_volumes(body: JSON) -> JSON:
    """`body` whose parent's pod template mounts a token and pod fields the way users write them (no defaults)."""
    out = copy.deepcopy(body)
    out["parent"]["spec"]["template"] = {"spec": {"volumes": copy.deepcopy(USER_VOLUMES)}}
    return out


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_a_users_projected_token_and_downward_api_volumes_settle(kind):
    """The server fills `expirationSeconds: 3600` and `fieldRef.apiVersion: v1`; a projected volume's `sources`
    has no merge key, so unless the hook emits them as stored the workload is updated on every sync."""
    body = with_user_volumes(fresh(kind))
    assert unsettled(body, created(body, CURRENT)) == {}


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_a_users_own_token_expiry_and_field_api_version_are_kept(kind):
    body = with_user_volumes(fresh(kind))
    volumes = body["parent"]["spec"]["template"]["spec"]["volumes"]
    volumes[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] = 7200
    volumes[0]["projected"]["sources"][1]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] = "v1"
    observed = created(body, CURRENT)
    assert unsettled(body, observed) == {}
    stored_volumes = [v for obj in observed.values() for v in pod_volumes(obj) if v["name"] == "token"]
    assert stored_volumes and all(
        v["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 7200 for v in stored_volumes
    )


def test_the_defaults_model_fills_token_expiry_and_field_api_version():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"volumes": copy.deepcopy(USER_VOLUMES)},
    }
    volumes = apiserver.stored(pod, CURRENT)["spec"]["volumes"]
    sources = volumes[0]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["expirationSeconds"] == 3600
    assert sources[1]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] == "v1"
    assert volumes[1]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] == "v1"


def pod_volumes(obj: JSON) -> list[JSON]:
    return (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
