"""Values written into Slurm's config files (slurm.conf, slurmdbd.conf): quoted so Slurm's parser reads
them back unchanged, refused when it cannot, and list-valued options a user also set merged with ours."""

from __future__ import annotations

import re

from slinky_common.errors import InvalidSpec


def conf_field(value: str, field: str) -> str:
    """A spec value written into a Slurm config file; one that would change the file's meaning is refused."""
    written = conf_value(value)
    if written is None:
        raise InvalidSpec(
            f"{field} cannot be written into a Slurm config file (line break, NUL, or a double quote with spaces)"
        )
    return written


def merged_config(operator: dict[str, list[str]], extra_conf: str) -> list[str]:
    """`MERGED CONFIG` lines: list-valued options the user also set in extraConf, unioned with ours.

    Slurm keeps the last occurrence of a key, so a user's `AuthInfo=` in extraConf would silently
    drop options the daemons need; the merged line, written last, holds both. For `key=value` items
    ours win on the same key; option names are lower-cased (Slurm ignores their case, values keep
    theirs: paths are case-sensitive); the union is sorted.
    """
    user = last_values(extra_conf, {k.lower() for k in operator})
    lines = []
    for key, ours in operator.items():
        theirs = user.get(key.lower())
        if theirs is None:
            continue
        items = {_item_key(item): item for item in (_lower_key(v.strip()) for v in theirs.split(",")) if item}
        items.update({_item_key(item): item for item in ours})
        lines.append(f"{key}={','.join(sorted(items.values()))}")
    return lines


def conf_value(value: str) -> str | None:
    """`value` written so Slurm's config parser reads it back unchanged; None if it cannot be.

    The parser drops everything after an unescaped `#`, removes one backslash of each escape, and
    reads a value up to the first space unless it is double-quoted (a quoted value cannot hold `"`).
    """
    if any(c in value for c in "\r\n\0"):
        return None
    escaped = value.replace("\\", "\\\\").replace("#", "\\#")
    if any(c.isspace() for c in value):
        return None if '"' in value else f'"{escaped}"'
    return None if value.startswith('"') else escaped


def last_values(conf: str, keys: set[str]) -> dict[str, str]:
    """The last value of each wanted key in slurm.conf syntax (comments and `\\` continuations)."""
    found: dict[str, str] = {}
    logical = re.sub(r"\\\r?\n", "", conf)
    for line in logical.splitlines():
        line = re.sub(r"(?<!\\)#.*", "", line).strip()
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in keys:
            found[key.strip().lower()] = value.strip()
    return found


def _lower_key(item: str) -> str:
    key, sep, value = item.partition("=")
    return key.lower() + sep + value


def _item_key(item: str) -> str:
    return item.split("=", 1)[0]
