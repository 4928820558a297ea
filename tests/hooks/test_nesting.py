"""Nesting deeper than an answer can carry (applied.MAX_DEPTH, orjson's limit; the parsers take about 1,000
levels): a 400 naming the object, the path and the limit, never a 500 (issue 22, part 5)."""

from __future__ import annotations

import orjson
import pytest

from hooks import applied
from hooks.applied import MAX_DEPTH
from slinky_common import names
from tests.hooks.routecases import SAMPLES, broken, nested, post

POD0 = ("children", "Pod.v1", "slurm/slurm-worker-debug-0")


def without_last_applied() -> dict:
    """The sample pod kept as observed (server-side apply writes no annotation), so the hook writes its fields."""
    body = orjson.loads(orjson.dumps(SAMPLES["/nodeset/sync"]))
    del body["children"]["Pod.v1"]["slurm/slurm-worker-debug-0"]["metadata"]["annotations"][
        names.ANNOTATION_LAST_APPLIED
    ]
    return body


@pytest.mark.parametrize("depth", [300, 900])
def test_an_observed_child_nested_too_deeply_is_a_400_naming_it(depth):
    resp = post("/nodeset/sync", broken(without_last_applied(), (*POD0, "spec", "x"), nested(depth, {})))
    assert resp.status_code == 400, resp.get_json()
    error = resp.get_json()["error"]
    assert "observed Pod slurm/slurm-worker-debug-0" in error and f"deeper than {MAX_DEPTH} levels" in error, error
    assert "spec.x.0.a" in error, error


def test_a_last_applied_annotation_nested_too_deeply_is_not_believed():
    """The annotation parses (orjson reads 1,024 levels) but cannot be written back: the object is judged."""
    body = orjson.loads(orjson.dumps(SAMPLES["/nodeset/sync"]))
    annotations = body["children"]["Pod.v1"]["slurm/slurm-worker-debug-0"]["metadata"]["annotations"]
    last = orjson.loads(annotations[names.ANNOTATION_LAST_APPLIED])
    last["spec"]["x"] = nested(600, {})
    annotations[names.ANNOTATION_LAST_APPLIED] = orjson.dumps(last).decode()
    applied.VERDICTS.clear()
    resp = post("/nodeset/sync", body)
    assert resp.status_code == 200, resp.get_json()
    assert b'"x"' not in resp.get_data()


@pytest.mark.parametrize(
    ("route", "where", "path"),
    [
        ("/nodeset/sync", ("parent",), ("spec", "slurmd", "x")),
        ("/controller/sync", ("parent",), ("spec", "x")),
        ("/bridge/pod/sync", ("object",), ("spec", "x")),
        ("/bridge/admission/validate", ("request", "object"), ("spec", "x")),
    ],
)
@pytest.mark.parametrize("depth", [255, 990])
def test_a_parent_or_object_nested_too_deeply_is_a_400_naming_it(route, where, path, depth):
    """Hooks hash, merge and copy these: nesting past the limit failed there (a 500)."""
    resp = post(route, broken(SAMPLES[route], (*where, *path), nested(depth, {})))
    assert resp.status_code == 400, resp.get_json()
    error = resp.get_json()["error"]
    expected = f"{'.'.join(where)} nests deeper than {MAX_DEPTH} levels, at {'.'.join(path)}.0.a"
    assert error.startswith(expected), error


def test_nesting_an_answer_can_carry_is_answered():
    resp = post("/nodeset/sync", broken(without_last_applied(), (*POD0, "spec", "x"), nested(240, {})))
    assert resp.status_code == 200, resp.get_json()


@pytest.mark.parametrize("depth", [300, 900])
def test_an_observed_statefulsets_claim_template_nested_too_deeply_is_a_400(depth):
    """The Controller hook copies an existing StatefulSet's claim templates (copy.deepcopy recursed past
    the limit: a 500, found by the route fuzzer)."""
    body = orjson.loads(orjson.dumps(SAMPLES["/controller/sync"]))
    (key,) = [k for k in body["children"]["StatefulSet.apps/v1"] if k.endswith("/slurm-controller")]
    where = ("children", "StatefulSet.apps/v1", key, "spec", "volumeClaimTemplates")
    template = {"metadata": {"name": "statesave"}, "spec": {"selector": nested(depth, {})}}
    resp = post("/controller/sync", broken(body, where, [template]))
    assert resp.status_code == 400, resp.get_json()
    assert "nests deeper" in resp.get_json()["error"], resp.get_json()
