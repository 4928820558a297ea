"""Kept children (hooks/applied.py): the last-applied annotation believed only when it names the object,
passed through as the bytes orjson writes for it, its verdict remembered by text within a bound."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from hooks import applied
from hooks.applied import Kept, kept
from hooks.contract import BadHookResponse, check_composite_response
from slinky_common import names
from tests.support.hooks import as_observed

LAST_APPLIED = names.ANNOTATION_LAST_APPLIED
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"a": "b"}}, "spec": {}}


def as_json(child: Kept) -> Any:
    return orjson.loads(applied.serialise(child))


def observed_service(annotation: str | None = None) -> dict[str, Any]:
    (observed,) = as_observed([json.loads(json.dumps(SERVICE))])["Service.v1"].values()
    observed["status"] = {"loadBalancer": {}}
    if annotation is not None:
        observed["metadata"]["annotations"][LAST_APPLIED] = annotation
    return observed


@pytest.fixture(autouse=True)
def fresh_verdicts():
    applied.VERDICTS.clear()
    yield
    applied.VERDICTS.clear()


def test_kept_returns_the_last_applied_object_or_strips_server_fields():
    observed = observed_service()
    assert as_json(kept(observed)) == SERVICE
    del observed["metadata"]["annotations"][LAST_APPLIED]
    assert as_json(kept(observed)) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "labels": {"a": "b", "controller-uid": "uid-parent"}},
        "spec": {},
    }


@pytest.mark.parametrize(
    "annotation",
    [
        '{"apiVersion":"v1","kind":"Service","metadata":{"name":"other"}}',  # another object's: not believed
        '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"s"}}',  # another kind's
        '{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"x":NaN}}',  # not strict JSON
        '{"kind":"Service","metadata":{"name":"s"}}',  # no apiVersion
        '{"apiVersion":"v1","kind":"Service","metadata":"s"}',  # metadata not an object
        "[]",
        "not json",
        '{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}],"x":[{}',  # would end the list early
    ],
)
def test_kept_falls_back_to_the_observed_object_when_the_annotation_cannot_be_believed(annotation):
    child = kept(observed_service(annotation))
    assert as_json(child)["metadata"]["name"] == "s" and as_json(child)["spec"] == {}
    assert LAST_APPLIED not in as_json(child)["metadata"].get("annotations", {})
    assert (child.api_version, child.kind, child.name, child.namespace) == ("v1", "Service", "s", "")


def test_the_text_is_what_orjson_writes_for_the_parsed_annotation():
    go_written = '{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"x":"a\\u003cb \\u0026 \\u2028"}}'
    pretty = json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "n": 1e3}, indent=2)
    for text in (go_written, pretty):
        child = kept(observed_service(text))
        assert applied.serialise([child]) == b"[" + orjson.dumps(orjson.loads(text)) + b"]"


def test_a_verdict_is_remembered_by_text_and_checked_against_each_object():
    text = orjson.dumps(SERVICE).decode()
    first = kept(observed_service(text))
    other = observed_service(text)
    other["metadata"]["name"] = "t"  # the same annotation on another object is not believed for it
    assert (first.name, kept(other).name) == ("s", "t")
    assert LAST_APPLIED not in as_json(kept(other))["metadata"].get("annotations", {})
    assert len(applied.VERDICTS._by_locator) == 1  # both observed objects carry uid-s


def test_a_verdict_is_used_only_for_the_text_it_judged():
    text = orjson.dumps(SERVICE).decode()
    assert kept(observed_service(text)).name == "s"
    other = text.replace('"name":"s"', '"name":"t"')  # the same object (uid) now carries another text
    assert LAST_APPLIED not in as_json(kept(observed_service(other)))["metadata"].get("annotations", {})
    assert applied.VERDICTS._by_locator["uid-s"].text == other  # judged anew, and remembered for the uid


def test_the_verdicts_stay_within_their_bound_oldest_first():
    verdicts = applied._Verdicts(limit_bytes=300)
    texts = [orjson.dumps({**SERVICE, "metadata": {"name": f"s{i}"}}).decode() for i in range(5)]
    for i, text in enumerate(texts):
        assert verdicts.judge(text, f"uid-{i}") is not None
    kept_locators = list(verdicts._by_locator)
    assert sum(v.size for v in verdicts._by_locator.values()) <= 300
    assert kept_locators == [f"uid-{i}" for i in range(5)][-len(kept_locators) :] and "uid-0" not in kept_locators


def test_kept_and_built_children_are_checked_alike():
    child = kept(observed_service())
    check_composite_response({"children": [child, {**SERVICE, "metadata": {"name": "t"}}]})
    with pytest.raises(BadHookResponse, match="duplicates Service 's'"):
        check_composite_response({"children": [child, SERVICE]})


def test_only_json_and_kept_children_serialise():
    with pytest.raises(TypeError, match="not JSON serializable: set"):
        applied.serialise({"children": [{1, 2}]})
