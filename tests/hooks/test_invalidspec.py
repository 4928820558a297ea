"""How a hook answers a spec it cannot build from (hooks/invalidspec.py): every child kept, a condition
naming the field."""

from __future__ import annotations

import orjson

from hooks import applied, invalidspec
from hooks.contract import parse_composite
from slinky_common import names
from slinky_common.errors import BadHookRequest, InvalidSpec
from tests.support.hooks import as_observed, cr, request


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
