"""What the components of one Slurm cluster share: spec readers, references between CRs, conditions.

RestApi, LoginSet and NodeSet pods find slurmctld, its config map and its keys through the
Controller CR (hooks/controller/model.py); Accounting and Token read key Secrets. All of these
arrive as Metacontroller `related` objects. This module turns a spec reference into a
related-resource rule (for customize) and into the object or value it names (for sync).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hooks import contract, kubenames
from hooks.applied import Child, Kept, kept
from hooks.contract import CompositeRequest
from hooks.podtemplate import merge_container
from hooks.status import condition, invalid_spec_ready
from slinky_common import names
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef

JSON = dict[str, Any]
T = TypeVar("T")

SECRET_TYPE = contract.TYPE_SECRET

SSH_PORT = 22
SLURM_UID = 401  # the `slurm` user in Slinky's images
SLURM_USER = "slurm"
# Kubernetes' default cluster DNS domain; hooks cannot ask the cluster, so searches assume it.
CLUSTER_DOMAIN = "cluster.local"
# Images when a CR names none (Slinky's chart defaults); a Deployment without an image is rejected.
IMAGE_REPOSITORY = "ghcr.io/slinkyproject"
IMAGE_TAG = "26.05-ubuntu26.04"
# While a reference is missing, ask Metacontroller to look again this soon (a related object's
# creation also wakes the parent; this covers a missed event).
MISSING_REFERENCE_RESYNC_SECONDS = 30
LOG_DIR = "/var/log/slurm"
LOGFILE_IMAGE = "docker.io/library/alpine:latest"
# Makes the log FIFO a daemon writes to and copies it to stdout (so `kubectl logs -c logfile`
# shows the daemon's log); a trapped TERM ends the wait at once instead of after the grace period.
LOGFILE_SCRIPT = """\
trap 'exit 0' TERM INT
if [ ! -p "$SOCKET" ]; then rm -f "$SOCKET"; mkfifo -m 0777 "$SOCKET"; fi
while true; do cat "$SOCKET" & wait $!; done
"""


def default_image(component: str) -> str:
    return f"{IMAGE_REPOSITORY}/{component}:{IMAGE_TAG}"


# --- derived names ---------------------------------------------------------------------------------


def accounting_host(accounting: str) -> str:
    """slurmdbd's pod hostname and Service name (`<name>-accounting`)."""
    return f"{accounting}-accounting"


# --- spec parsing ----------------------------------------------------------------------------------


def conf_field(value: str, field: str) -> str:
    """A spec value written into a Slurm config file; one that would change the file's meaning is refused."""
    written = conf_value(value)
    if written is None:
        raise InvalidSpec(
            f"{field} cannot be written into a Slurm config file (line break, NUL, or a double quote with spaces)"
        )
    return written


# --- references ------------------------------------------------------------------------------------


def secret_rule(namespace: str, secret_names: list[str]) -> JSON:
    """Related Secrets by name; `names` must never be empty (that would mean every Secret)."""
    return {"apiVersion": "v1", "resource": "secrets", "namespace": namespace, "names": sorted(set(secret_names))}


def find_related(req: CompositeRequest, type_key: str, namespace: str, name: str) -> JSON | None:
    for obj in req.related_of(type_key):
        meta = obj["metadata"]
        if meta.get("name") == name and meta.get("namespace", namespace) == namespace:
            return obj
    return None


@dataclass(frozen=True)
class Missing:
    """Why a referenced value is unavailable; messages name objects, never values."""

    reason: str
    message: str


def secret_value(req: CompositeRequest, namespace: str, ref: KeyRef) -> bytes | Missing:
    """The bytes one key of a related Secret holds, or why they are unavailable."""
    secret = find_related(req, SECRET_TYPE, namespace, ref.name)
    if secret is None:
        return Missing("SecretNotFound", f"Secret {ref.name!r} does not exist")
    encoded = (secret.get("data") or {}).get(ref.key)
    if not isinstance(encoded, str):
        return Missing("SecretKeyNotFound", f"Secret {ref.name!r} has no key {ref.key!r}")
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return Missing("SecretKeyInvalid", f"Secret {ref.name!r} key {ref.key!r} is not valid base64")


def observed(req: CompositeRequest, type_key: str, name: str) -> JSON | None:
    """The observed child of one type and name."""
    return next((c for c in req.children_of(type_key) if c["metadata"].get("name") == name), None)


def logfile_sidecar(log_file: str, override: JSON | None) -> JSON:
    """The native sidecar that turns a daemon's log file (a FIFO) into container output."""
    base = {
        "name": "logfile",
        "image": LOGFILE_IMAGE,
        "restartPolicy": "Always",
        "command": ["sh", "-c", LOGFILE_SCRIPT],
        "env": [{"name": "SOCKET", "value": log_file}],
        "volumeMounts": [{"name": "slurm-logfile", "mountPath": LOG_DIR}],
    }
    return merge_container(base, override)


# --- status ----------------------------------------------------------------------------------------


def references_condition(parent: JSON, missing: list[Missing]) -> JSON:
    """Explains unresolved references; the children that depend on them are kept as they are."""
    if not missing:
        return condition(
            parent, names.CONDITION_REFERENCES_RESOLVED, True, "Resolved", "every referenced object exists"
        )
    message = "; ".join(m.message for m in missing) + "; children that need it are kept unchanged until it exists"
    return condition(parent, names.CONDITION_REFERENCES_RESOLVED, False, missing[0].reason, message)


def reports_invalid_spec(sync: Callable[[CompositeRequest], JSON]) -> Callable[[CompositeRequest], JSON]:
    """Wraps a sync hook: an InvalidSpec becomes a 200 that changes nothing (see `invalid_spec_response`)."""

    @functools.wraps(sync)
    def guarded(req: CompositeRequest) -> JSON:
        try:
            response = sync(req)
            check_new_children(req, response["children"])
            return response
        except InvalidSpec as err:
            return invalid_spec_response(req, err)

    return guarded


def check_new_children(req: CompositeRequest, children: list[Child]) -> None:
    """Raise InvalidSpec if a child that does not exist yet has a name or label the API server refuses.

    Observed children (every kept one) were accepted when they were created, so only new ones are checked.
    """
    built = [child for child in children if not isinstance(child, Kept)]
    if not built:
        return
    observed = {(o.get("kind"), o["metadata"].get("name")) for group in req.children.values() for o in group.values()}
    name = req.parent["metadata"]["name"]
    for child in built:
        meta = child.get("metadata") or {}
        if (child.get("kind"), meta.get("name")) in observed:
            continue
        problems = kubenames.child_problems(child)
        if problems:
            if name in (meta.get("name") or ""):
                kind = req.parent["kind"]
                raise InvalidSpec(f"metadata.name {name!r} cannot name this {kind}'s children: {problems[0]}")
            raise InvalidSpec(f"a spec value gives a child a name or label the API server refuses: {problems[0]}")


def invalid_spec_response(req: CompositeRequest, err: InvalidSpec) -> JSON:
    """Every observed child exactly as last applied, the observed status plus a condition naming the field.

    A 400 would leave the user with nothing but a Metacontroller event, and an empty child list
    would delete the cluster; so nothing is created, changed or deleted until the spec is fixed
    (a new generation syncs at once; the resync covers a related object being fixed).
    """
    children: list[Child] = [kept(c) for type_key in sorted(req.children) for c in req.children_of(type_key)]
    status = dict(req.parent.get("status") or {})
    replaced = (names.CONDITION_INVALID_SPEC, names.CONDITION_READY)
    others = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") not in replaced]
    message = f"{err}; every existing child is kept as last applied until this is fixed"
    status["conditions"] = [
        invalid_spec_ready(req.parent, message),
        *others,
        condition(req.parent, names.CONDITION_INVALID_SPEC, True, "InvalidValue", message),
    ]
    return {"status": status, "children": children, "resyncAfterSeconds": MISSING_REFERENCE_RESYNC_SECONDS}


def derivable(*derive: Callable[[], list[T]]) -> list[T]:
    """What customize can derive: each part on its own, a part an invalid spec value prevents left out.

    Failing customize instead would stop Metacontroller from ever calling sync, which is where the
    value is reported.
    """
    found: list[T] = []
    for part in derive:
        try:
            found += part()
        except InvalidSpec:
            continue
    return found


def available_condition(parent: JSON, workload: JSON | None, desired: int) -> JSON:
    """Whether the observed Deployment/StatefulSet has as many ready pods as desired."""
    if workload is None:
        return condition(parent, names.CONDITION_AVAILABLE, False, "NotCreated", "the workload does not exist yet")
    ready = (workload.get("status") or {}).get("readyReplicas") or 0
    ok = ready >= desired
    return condition(
        parent, names.CONDITION_AVAILABLE, ok, "Ready" if ok else "NotReady", f"{ready}/{desired} pods ready"
    )


# --- Slurm config files ------------------------------------------------------------------------------


def merged_config(operator: dict[str, list[str]], extra_conf: str) -> list[str]:
    """`MERGED CONFIG` lines: list-valued options the user also set in extraConf, unioned with ours.

    Slurm keeps the last occurrence of a key, so a user's `AuthInfo=` in extraConf would silently
    drop options the daemons need; the merged line, written last, holds both. For `key=value` items
    ours win on the same key; option names are lower-cased (Slurm ignores their case, values keep
    theirs: paths are case-sensitive); the union is sorted.
    """
    user = _last_values(extra_conf, {k.lower() for k in operator})
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


def _last_values(conf: str, keys: set[str]) -> dict[str, str]:
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
