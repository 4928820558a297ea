"""Builders for hook requests and custom resources as Metacontroller and the API server send them, and the
check every kind's InvalidSpec answer must pass; shared by the hook tests."""

from __future__ import annotations

import base64
import json
from typing import Any

from hooks import contract
from slinky_common import names

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
