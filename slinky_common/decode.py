"""JSON decoded against a shape: only the fields a reader keeps are built, the rest skipped unbuilt.

Both halves decode large JSON this way: the hook server its CompositeController requests
(hooks/requestjson.py), slurm_sync its Slurm listings and pod pages (slurm_sync/shapes.py). Whatever the
shape does not fit, what is not valid UTF-8 and what nests past the recursion limit is decoded again by
the caller's strict decoder, whose verdict stands.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

_UTF8_CHUNK = 1 << 16

Body = TypeVar("Body", bound=bytes | bytearray)


def shaped(shape: Any, strict: Callable[[Body], Any]) -> Callable[[Body], Any]:
    """A decoder of JSON of ``shape`` (skipping what it leaves out); ``strict`` decodes, and judges,
    whatever the shape does not fit, what is not valid UTF-8 and what nests past the recursion limit.
    slurm_sync decodes its large listings this way too (slurm_sync/shapes.py)."""
    decoder = msgspec.json.Decoder(shape)

    def decode(body: Body) -> Any:
        if not _is_utf8(body):
            return strict(body)
        try:
            return decoder.decode(body)
        except (msgspec.DecodeError, RecursionError):  # a ValidationError too: the shape does not fit
            return strict(body)

    return decode


def _is_utf8(body: bytes | bytearray) -> bool:
    """Strict UTF-8 (surrogates refused, as orjson refuses them), checked in pieces: one accented
    letter in a 15 MB request must not cost a 15 MB copy."""
    if body.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(body)
    try:
        for start in range(0, len(body), _UTF8_CHUNK):
            decoder.decode(view[start : start + _UTF8_CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True
