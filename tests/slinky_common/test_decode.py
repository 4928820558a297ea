"""Shaped decoding (slinky_common/decode.py): only the fields a shape keeps are built, and whatever the shape
does not fit is judged by the caller's strict decoder."""

from __future__ import annotations

from typing import Any, TypedDict

import orjson
import pytest

from slinky_common.decode import shaped


class _Kept(TypedDict, total=False):
    name: Any
    state: Any


def strict(body: bytes | bytearray) -> Any:
    return orjson.loads(body)


decode = shaped(_Kept, strict)


def test_fields_the_shape_leaves_out_are_skipped():
    assert decode(b'{"name": "n1", "state": ["IDLE"], "gres": {"huge": [1, 2, 3]}}') == {
        "name": "n1",
        "state": ["IDLE"],
    }


def test_what_the_shape_does_not_fit_gets_the_strict_decoders_verdict():
    assert decode(b"[1, 2]") == [1, 2]  # a list where the shape says object: decoded strictly, whole
    with pytest.raises(orjson.JSONDecodeError):
        decode(b'{"name": ')


def test_text_that_is_not_utf8_is_judged_strictly_even_where_the_shape_would_skip_it():
    with pytest.raises(orjson.JSONDecodeError):
        decode(b'{"name": "n1", "skipped": "\xff"}')
