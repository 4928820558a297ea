"""Safe readers of observed JSON (slinky_common/jsontypes.py): an object may hold any JSON type anywhere."""

from __future__ import annotations

from slinky_common.jsontypes import dict_field, list_field


def test_a_field_of_another_type_reads_as_empty_and_the_right_type_as_itself() -> None:
    obj = {"metadata": {"name": "a"}, "items": [1], "spec": None, "status": "x", "list": {"a": 1}}
    assert dict_field(obj, "metadata") == {"name": "a"} and list_field(obj, "items") == [1]
    assert dict_field(obj, "spec") == dict_field(obj, "status") == dict_field(obj, "absent") == {}
    assert list_field(obj, "list") == list_field(obj, "status") == list_field(obj, "absent") == []
    assert dict_field(obj, "metadata") is obj["metadata"]  # the object itself, not a copy
