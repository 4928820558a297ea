"""Names valid for a CR but not for the children built from it give InvalidSpec, for every kind.

A CR name only has to be a DNS subdomain; `1slurm` (a digit first) and `slurm.prod` (a dot) are
valid CR names but not Service names, and a long name overflows `<name>-controller-internal` (63).
Each kind's sync then answers with an InvalidSpec condition naming metadata.name and keeps every
existing child, instead of sending a child the API server refuses on every resync.
"""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from hooks import kubenames
from hooks.app import create_app
from slinky_common import names
from tests.support.kube import validate_builtin

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"
KINDS = ["controller", "nodeset", "loginset", "restapi", "accounting", "token"]
LONG = "slurm-" + "x" * 38  # 44 characters: `<name>-controller-internal` is 64
NAMES = ["1slurm", "slurm.prod", LONG]


def renamed(kind: str, name: str, keep_children: bool) -> dict:
    body = orjson.loads((EXAMPLES / f"{kind}-sync.json").read_bytes())
    body["parent"]["metadata"]["name"] = name
    if not keep_children:
        body["children"] = {}
    return body


def sync(kind: str, body: dict) -> dict:
    resp = create_app().test_client().post(f"/{kind}/sync", data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def invalid_spec(resp: dict) -> dict | None:
    return next((c for c in resp["status"]["conditions"] if c["type"] == names.CONDITION_INVALID_SPEC), None)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_child_is_valid_or_the_name_is_reported(kind, name):
    resp = sync(kind, renamed(kind, name, keep_children=False))
    reported = invalid_spec(resp)
    if reported is not None:
        assert reported["status"] == "True" and "metadata.name" in reported["message"] and name in reported["message"]
        assert resp["children"] == [], "nothing existed, so nothing is created"
        return
    for child in resp["children"]:
        assert kubenames.child_problems(child) == [], child["metadata"]["name"]
        assert validate_builtin(child) == [], child["metadata"]["name"]


@pytest.mark.parametrize("name", ["1slurm", "slurm.prod", "slurm-" + "x" * 58])
@pytest.mark.parametrize("kind", ["controller", "loginset", "restapi", "accounting"])
def test_kinds_with_services_report_each_name(kind, name):
    """These kinds build Services (`<name>-<component>`), which must be DNS-1035 labels of at most 63 characters."""
    reported = invalid_spec(sync(kind, renamed(kind, name, keep_children=False)))
    assert reported is not None, "no InvalidSpec"
    assert any(w in reported["message"] for w in ("Service name", "StatefulSet name", "label")), reported


@pytest.mark.parametrize("kind", ["controller", "loginset", "restapi", "accounting"])
def test_observed_children_are_kept_while_the_name_is_invalid(kind):
    body = renamed(kind, "slurm.prod", keep_children=True)
    observed = [obj for group in body["children"].values() for obj in group.values()]
    resp = sync(kind, copy.deepcopy(body))
    assert invalid_spec(resp) is not None
    returned = sorted((c["kind"], c["metadata"]["name"]) for c in resp["children"])
    assert returned == sorted((o["kind"], o["metadata"]["name"]) for o in observed)


def test_the_longest_controller_name_is_41_characters():
    """`<name>-controller` is a StatefulSet whose pods carry `<name>-controller-<hash>`: 41 + 11 + 11 = 63."""
    longest = "s" * 41
    ok = sync("controller", renamed("controller", longest, keep_children=False))
    assert invalid_spec(ok) is None
    assert f"{longest}-controller-internal" in {c["metadata"]["name"] for c in ok["children"]}
    reported = invalid_spec(sync("controller", renamed("controller", longest + "s", keep_children=False)))
    assert reported is not None and "StatefulSet name" in reported["message"], reported
