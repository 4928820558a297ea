"""Every hook route, fed structurally wrong requests: a 400 naming the field, or a computed answer; never a 500.

Each case starts from the route's sample request (examples/requests/) and breaks one value at any
depth: an object where a string belongs, a list for an object, a number for a name, null, a
removed key. A 500 means "the hook failed": Metacontroller retries it forever and the user sees
nothing but an event, so a malformed request must never get one.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hooks.routecases import REMOVE, ROUTES, SAMPLES, broken, nested, post

WRONG = st.sampled_from(
    [REMOVE, None, True, 0, -1, 2**40, 1.5, "", "x", "-", [], [1], ["x"], {}, {"a": 1}, {"name": {}}, [{}], [None]]
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into `value` (dict keys and list indexes), parents before children."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


PATHS = {route: paths(body) for route, body in SAMPLES.items()}


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), route=st.sampled_from(ROUTES), wrong=WRONG)
def test_one_wrong_value_anywhere_never_gets_a_500(data, route, wrong):
    path = data.draw(st.sampled_from(PATHS[route]), label="path")
    resp = post(route, broken(SAMPLES[route], path, wrong))
    assert resp.status_code != 500, (path, wrong, resp.get_json())
    if resp.status_code == 400:
        assert resp.get_json()["error"], "a 400 names what is wrong"


KEYS_READ = [
    "labels", "annotations", "ownerReferences", "deletionTimestamp", "creationTimestamp", "generation", "namespace",
    "uid", "finalizers", "conditions", "phase", "nodeName", "hostname", "containers", "initContainers", "tolerations",
    "volumes", "resources", "requests", "limits", "selector", "matchLabels", "template", "spec", "status", "metadata",
    "data", "partition", "controllerRef", "service", "taints", "unschedulable", "readyReplicas", "childResources",
    "name", "kind", "activeDeadlineSeconds", "schedulingGroup", "minMember", "minResources", "leaderWorkerTemplate",
    "size", "env", "ports", "args",
]  # fmt: skip


def objects(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to an object inside `value` (the body itself included)."""
    found = [prefix] if isinstance(value, dict) else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found += objects(item, (*prefix, key))
    return found


OBJECTS = {route: objects(body) for route, body in SAMPLES.items()}


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    route=st.sampled_from(ROUTES),
    key=st.sampled_from(KEYS_READ),
    wrong=WRONG.filter(lambda w: w is not REMOVE),
)
def test_a_wrong_value_added_under_a_key_a_hook_reads_never_gets_a_500(data, route, key, wrong):
    path = data.draw(st.sampled_from(OBJECTS[route]), label="object")
    resp = post(route, broken(SAMPLES[route], (*path, key), wrong))
    assert resp.status_code != 500, (path, key, wrong, resp.get_json())


POD0 = ("children", "Pod.v1", "slurm/slurm-worker-debug-0")


@pytest.mark.parametrize(
    ("route", "path", "wrong", "named"),
    [
        ("/nodeset/sync", (*POD0, "metadata", "name"), 7, "metadata.name"),
        ("/nodeset/sync", (*POD0, "metadata"), "x", "metadata"),
        ("/nodeset/sync", (*POD0, "spec", "nodeName"), {"a": 1}, "spec.nodeName"),
        ("/controller/sync", ("related",), [], "related"),
        ("/bridge/pod/sync", ("object", "metadata", "ownerReferences", 0, "kind"), {}, "ownerReferences[0].kind"),
        ("/bridge/admission/validate", ("request", "object", "spec", "containers"), {}, "object.spec.containers"),
    ],
)
def test_a_structurally_wrong_value_gets_a_400_naming_the_field(route, path, wrong, named):
    resp = post(route, broken(SAMPLES[route], path, wrong))
    assert resp.status_code == 400 and named in resp.get_json()["error"], resp.get_json()


@pytest.mark.parametrize("route", ROUTES)
def test_every_value_of_every_sample_replaced_by_an_object_never_gets_a_500(route):
    """Exhaustive for the commonest shape error: an object where a scalar or a list belongs."""
    failures = []
    for path in PATHS[route]:
        for wrong in ({"name": {}}, [{}]):
            resp = post(route, broken(SAMPLES[route], path, wrong))
            if resp.status_code == 500:
                failures.append(path)
    assert failures == [], failures[:20]


def huge_quantity(exponent: int) -> str:
    return f"1e{exponent}"


# Values the parsers accept that once made hooks fail: nesting deeper than an answer can carry (up to
# what the parsers take), quantities beyond 64 bits, key material no JWT can be signed with.
HOSTILE = st.one_of(
    st.builds(nested, st.sampled_from([253, 254, 255, 300, 600, 900, 990]), st.sampled_from([{}, "x", 1])),
    st.builds(huge_quantity, st.sampled_from([19, 20, 30, 300, 4000, 2_000_000_000])),
    st.sampled_from(["", " ", "\n", "1" * 5000, "0." + "0" * 5000 + "1", "65534", "1e-40", "99999Ei", "-1e20"]),
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), route=st.sampled_from(ROUTES), hostile=HOSTILE)
def test_a_hostile_value_anywhere_never_gets_a_500(data, route, hostile):
    path = data.draw(st.sampled_from(PATHS[route]), label="path")
    resp = post(route, broken(SAMPLES[route], path, hostile))
    assert resp.status_code in (200, 400, 501), (path, str(hostile)[:80], resp.get_json())
    if resp.status_code == 400:
        assert resp.get_json()["error"], "a 400 names what is wrong"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), route=st.sampled_from(ROUTES), key=st.sampled_from(KEYS_READ), hostile=HOSTILE)
def test_a_hostile_value_added_under_a_key_a_hook_reads_never_gets_a_500(data, route, key, hostile):
    path = data.draw(st.sampled_from(OBJECTS[route]), label="object")
    resp = post(route, broken(SAMPLES[route], (*path, key), hostile))
    assert resp.status_code in (200, 400, 501), (path, key, str(hostile)[:80], resp.get_json())
