"""The spec readers every hook and slurm_sync share (slinky_common/fields.py): a value or its default, or
InvalidSpec naming the field, one message per field wherever it is read."""

from __future__ import annotations

import pytest

from slinky_common import fields
from slinky_common.errors import BadHookRequest, InvalidSpec


def test_jwt_key_ref_prefers_jwt_key_ref_over_the_deprecated_alias():
    both = {"jwtKeyRef": {"name": "new", "key": "k"}, "jwtHs256KeyRef": {"name": "old", "key": "k"}}
    assert fields.jwt_key_ref(both) == fields.KeyRef("new", "k")
    assert fields.jwt_key_ref({"jwtHs256KeyRef": {"name": "old", "key": "k"}}) == fields.KeyRef("old", "k")
    assert fields.jwt_key_ref({}) is None


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"slurmKeyRef": "x"}, "spec.slurmKeyRef must be an object"),
        ({"slurmKeyRef": {"key": "k"}}, "spec.slurmKeyRef.name"),
        ({"slurmKeyRef": {"name": "n"}}, "spec.slurmKeyRef.key"),
    ],
)
def test_bad_key_refs_name_the_field(spec, needle):
    with pytest.raises(BadHookRequest, match=needle):
        fields.key_ref(spec, "slurmKeyRef")


def test_an_integer_out_of_range_names_the_field_the_bounds_and_the_value():
    assert fields.opt_int({}, "replicas", 1) == 1
    assert fields.opt_int({"replicas": 0}, "replicas", 1) == 0
    for bad in (-1, 11, True, "3", 2.0):
        with pytest.raises(InvalidSpec, match=rf"^spec\.replicas must be an integer from 0 to 10, got {bad!r}$"):
            fields.opt_int({"replicas": bad}, "replicas", 1, maximum=10)


def test_an_enum_takes_its_default_when_absent_or_empty_and_names_the_choices_otherwise():
    allowed = ("RollingUpdate", "OnDelete")
    assert fields.opt_enum({}, "type", "RollingUpdate", allowed) == "RollingUpdate"
    assert fields.opt_enum({"type": ""}, "type", "RollingUpdate", allowed) == "RollingUpdate"
    assert fields.opt_enum({"type": "OnDelete"}, "type", "RollingUpdate", allowed, "spec.updateStrategy") == "OnDelete"
    with pytest.raises(
        InvalidSpec, match=r"^spec\.updateStrategy\.type must be one of RollingUpdate, OnDelete, got 'x'$"
    ):
        fields.opt_enum({"type": "x"}, "type", "RollingUpdate", allowed, "spec.updateStrategy")


def test_readers_name_the_nested_path_and_invalid_spec_is_a_bad_request():
    with pytest.raises(InvalidSpec, match=r"^spec\.ssh\.enabled must be a boolean$"):
        fields.opt_bool({"enabled": "yes"}, "enabled", False, "spec.ssh")
    with pytest.raises(InvalidSpec, match=r"^spec\.template must be an object$"):
        fields.opt_obj({"template": []}, "template")
    with pytest.raises(InvalidSpec, match=r"^spec\.extraConf must be a string$"):
        fields.opt_str({"extraConf": 1}, "extraConf")
    assert issubclass(InvalidSpec, BadHookRequest)  # a hook that does not report it still answers 400


def test_a_container_override_of_the_wrong_json_type_names_the_field():
    assert fields.container_override({}, "slurmd") == {}
    with pytest.raises(InvalidSpec, match=r"spec\.slurmd"):
        fields.container_override({"slurmd": {"resources": []}}, "slurmd")
