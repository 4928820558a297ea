"""The hook route table of docs/architecture.md §3: path, request contract, response check and handler.

Handlers are found by convention, so adding a hook never means editing this file: the route
`/<segment>/<hook>` is served by the function `<hook>` of module `hooks.<segment>` (for the bridge,
`/bridge/<part>/<hook>` by `hooks.bridge.<part>.<hook>`). A route whose module or function does not
exist yet stays in the table with `handler=None`: it still checks its request (400 on a malformed
one) and then answers 501, never a made-up 200. A module's `CHILD_READERS` (type key -> reader)
read the children of its sync and finalize requests as the contract checks them (contract.parse_composite).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hooks import contract, requestjson

Handler = Callable[[Any], contract.JSON]

# URL segment -> parent kind of the CompositeControllers.
COMPOSITE_KINDS: dict[str, str] = {
    "controller": "Controller",
    "nodeset": "NodeSet",
    "loginset": "LoginSet",
    "restapi": "RestApi",
    "accounting": "Accounting",
    "token": "Token",
}


Load = Callable[[bytes], contract.JSON]
Parse = Callable[[contract.JSON, str], Any]
Check = Callable[[contract.JSON], contract.JSON]


@dataclass(frozen=True)
class Route:
    path: str
    kind: str
    load: Load  # the body as JSON data
    parse: Parse
    check: Check
    handler: Handler | None


def route_table(handlers: dict[str, Handler] | None = None) -> list[Route]:
    """Every POST route of the hook server, in a stable order; `handlers` overrides discovery.

    Composite sync and finalize requests are decoded without what no hook reads of them
    (hooks/requestjson.py); every other request is read whole.
    """
    whole, shaped = contract.load_json_object, requestjson.load_composite_request
    specs: list[tuple[str, str, Load, Parse, Check]] = []
    for segment, kind in COMPOSITE_KINDS.items():
        parse_composite = _composite_parser(segment) if handlers is None else contract.parse_composite
        specs += [
            (f"/{segment}/sync", kind, shaped, parse_composite, contract.check_composite_response),
            (f"/{segment}/customize", kind, whole, contract.parse_customize, contract.check_customize_response),
            (f"/{segment}/finalize", kind, shaped, parse_composite, contract.check_composite_response),
        ]
    specs += [
        ("/bridge/pod/sync", "Pod", whole, contract.parse_decorator, contract.check_decorator_response),
        ("/bridge/pod/customize", "Pod", whole, contract.parse_customize, contract.check_customize_response),
        ("/bridge/pod/finalize", "Pod", whole, contract.parse_decorator, contract.check_decorator_response),
        ("/bridge/node/sync", "Node", whole, contract.parse_decorator, contract.check_decorator_response),
        ("/bridge/node/finalize", "Node", whole, contract.parse_decorator, contract.check_decorator_response),
        ("/bridge/admission/mutate", "Pod", whole, contract.parse_admission, contract.check_admission_response),
        ("/bridge/admission/validate", "Pod", whole, contract.parse_admission, contract.check_admission_response),
    ]
    pick = handlers.get if handlers is not None else _discover
    return [Route(path, kind, load, parse, check, pick(path)) for path, kind, load, parse, check in specs]


def _discover(path: str) -> Handler | None:
    """`/nodeset/sync` -> hooks.nodeset.hook.sync; None while the module or function is not written."""
    *parts, hook = path.strip("/").split("/")
    module = _module("hooks." + ".".join(parts))
    return getattr(module, hook, None)


def _composite_parser(segment: str) -> Callable[[contract.JSON, str], contract.CompositeRequest]:
    """contract.parse_composite with the hook module's CHILD_READERS, if it has any."""
    readers: Mapping[str, contract.ChildReader] | None = getattr(_module(f"hooks.{segment}"), "CHILD_READERS", None)
    return functools.partial(contract.parse_composite, readers=readers) if readers else contract.parse_composite


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:  # a real import error inside the module must surface
            raise
        return None
