"""Deriving the RBAC a component needs from its code: every Kubernetes client call, found with `ast`
and mapped through tests/charts/rbac_table.yaml to (apiGroup, resource, verb). A list method handed to
a watch (``watch.stream(core.list_node, ...)``) is the verb ``watch`` on what it lists."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slinky_common import names

REPO = Path(__file__).resolve().parents[2]
TABLE_FILE = Path(__file__).with_name("rbac_table.yaml")
Rule = tuple[str, str, str]  # (apiGroup, resource, verb)
Obj = dict[str, Any]


@functools.cache
def table() -> Obj:
    return yaml.safe_load(TABLE_FILE.read_text())


@dataclass(frozen=True)
class Call:
    path: Path
    line: int
    method: str
    rule: Rule


def component_files(component: str) -> list[Path]:
    spec = table()["components"][component]
    excluded = {p for pattern in spec["exclude"] for p in REPO.glob(pattern)}
    return sorted({p for pattern in spec["code"] for p in REPO.glob(pattern)} - excluded)


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _enclosing_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.FunctionDef | None:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef):
            return node
    return None


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if index < len(call.args):
        return call.args[index]
    return next((kw.value for kw in call.keywords if kw.arg == keyword), None)


def _literal(node: ast.expr | None) -> str | None:
    """A string literal, or `names.X` resolved through slinky_common.names (the one place names are spelt)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "names":
        value = getattr(names, node.attr, None)
        return value if isinstance(value, str) else None
    return None


def _callers_literals(function: ast.FunctionDef, param: str, trees: dict[Path, ast.Module]) -> set[str]:
    """The literal values callers pass for `param` of `function` (called as obj.function(...)); a caller
    passing its own parameter on is followed to its callers in turn."""
    params = [a.arg for a in function.args.args]
    position = params.index(param) - (1 if params and params[0] == "self" else 0)
    found: set[str] = set()
    for tree in trees.values():
        parents = _parents(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == function.name:
                argument = _argument(node, position, param)
                value = _literal(argument)
                caller = _enclosing_function(node, parents)
                if value is not None:
                    found.add(value)
                elif (
                    isinstance(argument, ast.Name)
                    and caller is not None
                    and caller is not function
                    and argument.id in [a.arg for a in caller.args.args]
                ):
                    found |= _callers_literals(caller, argument.id, trees)
                else:
                    raise AssertionError(
                        f"a call of {function.name}() passes a non-literal {param}; the RBAC derivation cannot resolve "
                        "it"
                    )
    return found


def _resolve(
    node: ast.expr | None, where: ast.Call, parents: dict[ast.AST, ast.AST], trees: dict[Path, ast.Module]
) -> set[str]:
    value = _literal(node)
    if value is not None:
        return {value}
    function = _enclosing_function(where, parents)
    if isinstance(node, ast.Name) and function is not None and node.id in [a.arg for a in function.args.args]:
        return _callers_literals(function, node.id, trees)
    raise AssertionError(
        f"line {where.lineno}: cannot resolve {ast.unparse(node) if node else '<missing>'} to literal values"
    )


@functools.cache
def _wrapper_functions() -> dict[str, list[tuple[Path, ast.FunctionDef, ast.Module]]]:
    """Methods of the thin client wrappers (slurm_sync/kube.py, bridge_kube.py) by name: a call of one
    of these names from a component counts as the client calls inside it. Matching is by name, so two
    wrappers with one method name both count (an over-approximation, never an under-one)."""
    found: dict[str, list[tuple[Path, ast.FunctionDef, ast.Module]]] = {}
    for pattern in table()["wrappers"]:
        for path in sorted(REPO.glob(pattern)):
            module = ast.parse(path.read_text(), str(path))
            for node in ast.walk(module):
                if isinstance(node, ast.FunctionDef):
                    found.setdefault(node.name, []).append((path, node, module))
    return found


def _calls_in(
    path: Path, root: ast.AST, module: ast.Module, trees: dict[Path, ast.Module], seen: set[int]
) -> Iterator[Call]:
    """Client calls under `root` (a node of `module`), following calls into the wrappers."""
    typed, custom = table()["typed"], table()["custom"]
    wrappers = _wrapper_functions()
    parents = _parents(module)
    for node in ast.walk(root):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # a wrapper module's function
            method = node.func.id
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
        else:
            continue
        if method in typed and isinstance(node.func, ast.Attribute):
            yield Call(path, node.lineno, method, tuple(typed[method]))
        elif method in custom and isinstance(node.func, ast.Attribute):
            verb, index = custom[method]
            groups = _resolve(_argument(node, 0, "group"), node, parents, trees)
            plurals = _resolve(_argument(node, index, "plural"), node, parents, trees)
            subresource = "/status" if method.endswith("_status") else ""
            for group in groups:
                for plural in plurals:
                    yield Call(path, node.lineno, method, (group, plural + subresource, verb))
        if method in table()["watches"] and isinstance(node.func, ast.Attribute):
            yield from _watched(path, node, parents, trees)
        for wrapper_path, function, wrapper_module in wrappers.get(method, []):
            if id(function) not in seen:
                seen.add(id(function))
                yield from _calls_in(wrapper_path, function, wrapper_module, trees, seen)


def _watched(path: Path, call: ast.Call, parents: dict[ast.AST, ast.AST], trees: dict[Path, ast.Module]
             ) -> Iterator[Call]:  # fmt: skip
    """A watch: ``<watch>.stream(<client list method>, <its arguments>...)`` watches what that method lists."""
    listed = call.args[0] if call.args else None
    if not isinstance(listed, ast.Attribute):
        raise AssertionError(f"{path}:{call.lineno}: a watch of something other than a client list method")
    typed, custom = table()["typed"], table()["custom"]
    if listed.attr in typed:
        group, resource, _ = typed[listed.attr]
        yield Call(path, call.lineno, listed.attr, (group, resource, "watch"))
        return
    _, index = custom[listed.attr]
    shifted = ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords)
    for group in _resolve(_argument(shifted, 0, "group"), call, parents, trees):
        for plural in _resolve(_argument(shifted, index, "plural"), call, parents, trees):
            yield Call(path, call.lineno, listed.attr, (group, plural, "watch"))


def kubernetes_methods_called(paths: Iterable[Path]) -> set[str]:
    """Every attribute call on a kubernetes client API object that looks like an API verb, known or not."""
    verbs = ("list_", "read_", "patch_", "create_", "delete_", "replace_", "get_", "watch_", "connect_")
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute)
            ):
                receiver = node.func.value.attr
                if receiver in (
                    "core",
                    "custom",
                    "apps",
                    "policy",
                    "coordination",
                    "events",
                    "resource",
                ) and node.func.attr.startswith(verbs):
                    found.add(node.func.attr)
    return found


@functools.cache  # the code does not change during a run; parsing it is most of these tests' time
def derived_calls(component: str) -> tuple[Call, ...]:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in component_files(component)}
    seen: set[int] = set()
    return tuple(call for path, tree in trees.items() for call in _calls_in(path, tree, tree, trees, seen))


def derived_rules(component: str) -> frozenset[Rule]:
    return frozenset(call.rule for call in derived_calls(component))


def planned_methods(component: str) -> list[str]:
    return list((table().get("planned") or {}).get(component) or [])


def planned_rules(component: str) -> set[Rule]:
    return {tuple(table()["typed"][m]) for m in planned_methods(component)}


def expand(rules: Iterable[Obj]) -> set[Rule]:
    """RBAC PolicyRules as (apiGroup, resource, verb) triples."""
    return {
        (g, r, v)
        for rule in rules
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
    }


def allows(rules: Iterable[Obj], group: str, resource: str, verb: str, name: str = "") -> bool:
    """Whether PolicyRules allow one request, as the RBAC authorizer decides: a rule matches on its group,
    resource and verb (or "*"), and a rule with resourceNames only a request for one of those names. A
    create, list or watch carries no name (""), so no rule with resourceNames allows it."""
    return any(
        _matches(rule.get("apiGroups", []), group)
        and _matches(rule.get("resources", []), resource)
        and _matches(rule.get("verbs", []), verb)
        and (not rule.get("resourceNames") or name in rule["resourceNames"])
        for rule in rules
    )


def _matches(allowed: list[str], wanted: str) -> bool:
    return "*" in allowed or wanted in allowed
