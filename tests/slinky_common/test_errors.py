"""The errors of a malformed request or spec (slinky_common/errors.py), shared by every reader."""

from __future__ import annotations

import pytest

from slinky_common import errors, fields
from slinky_common.errors import BadHookRequest, InvalidSpec


def test_an_invalid_spec_is_a_bad_request_so_a_hook_that_does_not_report_it_still_answers_400() -> None:
    assert issubclass(InvalidSpec, BadHookRequest) and issubclass(BadHookRequest, ValueError)


def test_one_class_object_wherever_it_is_raised() -> None:
    """The hooks and slurm_sync catch the very classes the shared readers raise (no copy in either half)."""
    with pytest.raises(errors.InvalidSpec):
        fields.opt_str({"x": 1}, "x")
