"""The JSON a Kubernetes or Slurm answer decodes to, and safe readers of it: an observed object may hold
any JSON type anywhere, so a reader that expects an object or a list gets an empty one instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]


def dict_field(obj: Mapping[str, Any], key: str) -> JSON:
    """``obj[key]`` when it is a JSON object, else ``{}``: an observed object may hold any JSON type anywhere."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_field(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a JSON array, else ``[]`` (see dict_field)."""
    value = obj.get(key)
    return value if isinstance(value, list) else []
