"""How a hook answers a spec the CRD schema let through but no child can be built from: a 200 that keeps
every child as last applied and says which field is wrong, never a 400 Metacontroller would only log,
never an empty child list that would delete the cluster."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from hooks import kubenames, podschema
from hooks.applied import Child, Kept, kept
from hooks.contract import CompositeRequest
from hooks.references import MISSING_REFERENCE_RESYNC_SECONDS
from hooks.status import condition, invalid_spec_ready
from slinky_common import names
from slinky_common.errors import InvalidSpec
from slinky_common.jsontypes import JSON

T = TypeVar("T")


def reports_invalid_spec(sync: Callable[[CompositeRequest], JSON]) -> Callable[[CompositeRequest], JSON]:
    """Wraps a sync hook: an InvalidSpec becomes a 200 that changes nothing (see `invalid_spec_response`)."""

    @functools.wraps(sync)
    def guarded(req: CompositeRequest) -> JSON:
        try:
            response = sync(req)
            check_new_children(req, response["children"])
            check_pod_templates(response["children"])
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


# Where a rendered pod's fields come from: the CR's pod template, or the override named like the container.
POD_FIELD_SOURCES = "set in spec.template or in the container's override, spec.<container name>"


def check_pod_templates(children: list[Child]) -> None:
    """Raise InvalidSpec if a workload this sync built has pod fields the API server refuses (hooks/podschema.py).

    Built, not kept: a kept child is sent as it was accepted. The workload would be refused whole, so
    no pod of it is replaced; the condition says which field instead of a Metacontroller event.
    """
    for child in children:
        if isinstance(child, Kept):
            continue
        problems = podschema.workload_problems(child)
        if problems:
            name = (child.get("metadata") or {}).get("name")
            raise InvalidSpec(
                f"the API server would refuse the pod template of {child.get('kind')} {name} ({POD_FIELD_SOURCES}): "
                + podschema.summary(problems)
            )


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
