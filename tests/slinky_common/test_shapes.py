"""The compiled shape validators (slinky_common/shapes.py `conforms`) never pass an object `check_object` refuses.

`conforms` is the fast path of every observed object's check; `check_object` is the authority that
names the field. A False from `conforms` only costs time; a True for a malformed object would let
it reach a hook, so random corruptions of real objects must never get a True that `check_object` denies.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slinky_common import shapes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"


def observed_objects() -> list[dict[str, Any]]:
    """Every observed child, related object and attachment of the example requests."""
    found = []
    for path in sorted(EXAMPLES.glob("*.json")):
        body = json.loads(path.read_text())
        for key in ("children", "related", "attachments"):
            for group in (body.get(key) or {}).values():
                found += group.values()
    return found


OBJECTS = observed_objects()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    found = []
    for key, inner in items:
        found.append((*prefix, key))
        found += paths(inner, (*prefix, key))
    return found


def refused(obj: Any, parent: bool) -> bool:
    """What the authority says, with the compiled validators left out."""
    try:
        shapes.check_object(obj, "obj", parent=parent, metadata=dict(shapes.METADATA))  # not METADATA: no fast path
    except shapes.ShapeError:
        return True
    return False


@pytest.mark.parametrize("index", range(len(OBJECTS)))
def test_every_observed_object_of_the_examples_takes_the_fast_path(index):
    obj = OBJECTS[index]
    assert shapes.conforms(obj) or obj["kind"] == "Secret", obj["metadata"]["name"]


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_corrupted_object_conforms_only_if_check_object_accepts_it(data):
    obj = copy.deepcopy(data.draw(st.sampled_from(OBJECTS)))
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(paths(obj) or [()]))
        if not where:
            break
        parent = obj
        for key in where[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = data.draw(JSON_VALUES)
    for parent in (False, True):
        if shapes.conforms(obj, parent):
            assert not refused(obj, parent)
            shapes.check_object(obj, "obj", parent)  # the fast path agrees


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_corrupted_container_override_passes_only_if_the_walk_accepts_it(data):
    pod = next(o for o in OBJECTS if o["kind"] == "Pod")
    container = copy.deepcopy(data.draw(st.sampled_from(pod["spec"]["containers"] + pod["spec"]["initContainers"])))
    where = data.draw(st.sampled_from(paths(container)))
    parent = container
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = data.draw(JSON_VALUES)
    try:
        shapes._check(container, shapes.CONTAINER, "c")
    except shapes.ShapeError:
        with pytest.raises(shapes.ShapeError):
            shapes.check(container, shapes.CONTAINER, "c")


def test_a_malformed_field_is_named_by_check_object():
    pod = copy.deepcopy(next(o for o in OBJECTS if o["kind"] == "Pod"))
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": True}}
    assert not shapes.conforms(pod)
    with pytest.raises(shapes.ShapeError, match=r"obj\.spec\.containers\[0\]\.resources\.limits must map"):
        shapes.check_object(pod, "obj")
