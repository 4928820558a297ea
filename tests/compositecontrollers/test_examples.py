"""examples/requests/*.json: one well-formed request per docs/architecture.md §3 route, in step with the manifests."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hooks.routes import route_table
from slinky_common import names
from tests.compositecontrollers.manifests import (
    CONTRACT_ROUTES,
    EXAMPLES_DIR,
    KIND_OF_RESOURCE,
    Obj,
    composites,
    decorators,
    hooks_of,
    segment_of,
    selector_matches,
    type_key,
)
from tests.support.kube import validate_builtin, validate_cr

MANAGED_NAMESPACE = "slurm-bridge"
COMPOSITE_KEYS = {"controller", "parent", "children", "related", "finalizing"}
DECORATOR_KEYS = {"controller", "object", "attachments", "related", "finalizing"}
CUSTOMIZE_KEYS = {"controller", "parent"}


def route_of(path: Path) -> str:
    """`nodeset-sync.json` -> `/nodeset/sync`, `bridge-pod-sync.json` -> `/bridge/pod/sync`."""
    return "/" + path.stem.replace("-", "/")


def example_paths() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.json"))


def load_strict(path: Path) -> Obj:
    """JSON as Metacontroller's Go decoder reads it: no NaN/Infinity, no duplicate keys."""

    def no_constants(token: str) -> Any:
        raise ValueError(f"{path.name}: non-standard JSON constant {token}")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> Obj:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"{path.name}: duplicate keys in {keys}"
        return dict(pairs)

    body = json.loads(path.read_text(), parse_constant=no_constants, object_pairs_hook=no_duplicates)
    assert isinstance(body, dict), f"{path.name}: top level must be an object"
    return body


def examples_for(predicate: Any) -> list[Path]:
    return [p for p in example_paths() if predicate(route_of(p))]


def is_composite(route: str) -> bool:
    return not route.startswith("/bridge/")


def hook_name(route: str) -> str:
    return route.rsplit("/", 1)[1]


def composite_for(route: str) -> Obj:
    segment = route.split("/")[1]
    return next(cc for plural, cc in composites().items() if segment_of(plural) == segment)


def decorator_for(body: Obj) -> Obj:
    name = body["controller"]["metadata"]["name"]
    assert name in decorators(), f"controller {name!r} is not one of compositecontrollers/"
    return decorators()[name]


def check_object_map(groups: Obj, where: str) -> None:
    """`{"Kind.apiVersion": {"ns/name": object}}` with v2 keys that agree with each object."""
    assert isinstance(groups, dict), where
    for key, objects in groups.items():
        assert isinstance(objects, dict), f"{where}[{key}]"
        for object_key, obj in objects.items():
            meta = obj["metadata"]
            assert f"{obj['kind']}.{obj['apiVersion']}" == key, f"{where}[{key}][{object_key}]"
            expected = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            assert object_key == expected, f"{where}[{key}]: v2 key {object_key!r} should be {expected!r}"


def embedded_objects(body: Obj) -> list[Obj]:
    found = [
        obj
        for group in ("children", "related", "attachments")
        for objs in body.get(group, {}).values()
        for obj in objs.values()
    ]
    found += [body[k] for k in ("parent", "object") if k in body]
    if "request" in body:
        found.append(body["request"]["object"])
    return found


# --- coverage and syntax ------------------------------------------------------------------------------


def test_one_example_per_served_route_and_none_for_a_501() -> None:
    served = {r.path for r in route_table() if r.handler is not None}
    routes = [route_of(p) for p in example_paths()]
    assert sorted(routes) == sorted(served & CONTRACT_ROUTES)


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_example_is_strict_json(path: Path) -> None:
    load_strict(path)


def test_examples_are_what_the_generator_writes() -> None:
    """Edit examples/requests/generate.py, not the JSON; this also catches a manifest edit not regenerated."""
    spec = importlib.util.spec_from_file_location("generate_examples", EXAMPLES_DIR / "generate.py")
    assert spec and spec.loader
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = [
        name
        for name, body in module.requests().items()
        if not (EXAMPLES_DIR / name).is_file() or (EXAMPLES_DIR / name).read_text() != module.render(body)
    ]
    assert stale == [], "run .venv/bin/python examples/requests/generate.py"


# --- composite requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", examples_for(lambda r: is_composite(r) and hook_name(r) != "customize"), ids=lambda p: p.name
)
def test_composite_request_matches_its_manifest(path: Path) -> None:
    route, body = route_of(path), load_strict(path)
    cc = composite_for(route)
    assert set(body) == COMPOSITE_KEYS
    assert body["finalizing"] is (hook_name(route) == "finalize")
    assert body["controller"]["metadata"]["name"] == cc["metadata"]["name"]
    assert body["controller"]["spec"] == cc["spec"], "controller differs from the manifest: regenerate"
    parent_rule = cc["spec"]["parentResource"]
    parent = body["parent"]
    assert parent["apiVersion"] == parent_rule["apiVersion"]
    assert parent["kind"] == KIND_OF_RESOURCE[(parent_rule["apiVersion"], parent_rule["resource"])]
    # One group per childResources rule, present even when empty.
    assert set(body["children"]) == {type_key(r["apiVersion"], r["resource"]) for r in cc["spec"]["childResources"]}
    check_object_map(body["children"], "children")
    check_object_map(body["related"], "related")


@pytest.mark.parametrize(
    "path", examples_for(lambda r: is_composite(r) and hook_name(r) != "customize"), ids=lambda p: p.name
)
def test_observed_children_belong_to_their_parent(path: Path) -> None:
    """As Metacontroller claims them with generateSelector:
    same namespace, controller-uid label, controller ownerRef."""
    body = load_strict(path)
    parent = body["parent"]["metadata"]
    for objects in body["children"].values():
        for obj in objects.values():
            meta = obj["metadata"]
            assert meta["namespace"] == parent["namespace"]
            assert meta["labels"]["controller-uid"] == parent["uid"]
            owners = [o for o in meta["ownerReferences"] if o.get("controller")]
            assert [o["uid"] for o in owners] == [parent["uid"]]


@pytest.mark.parametrize(
    "path", examples_for(lambda r: is_composite(r) and hook_name(r) == "finalize"), ids=lambda p: p.name
)
def test_finalize_request_parent_is_being_deleted(path: Path) -> None:
    body = load_strict(path)
    cc = composite_for(route_of(path))
    meta = body["parent"]["metadata"]
    assert meta.get("deletionTimestamp")
    if "finalize" in hooks_of(cc):
        assert f"metacontroller.io/compositecontroller-{cc['metadata']['name']}" in meta["finalizers"]


REFERENCE_KINDS = {"controllerRef": "Controller", "accountingRef": "Accounting"}


def references(spec: Obj) -> set[tuple[str, str]]:
    """(kind, name) of every object a Slinky spec names: *KeyRef and sssdConfRef are Secrets."""
    found: set[tuple[str, str]] = set()
    for key, value in spec.items():
        if isinstance(value, dict) and "name" in value and (key.endswith("KeyRef") or key == "sssdConfRef"):
            found.add(("Secret", value["name"]))
        elif key in REFERENCE_KINDS:
            found.add((REFERENCE_KINDS[key], value["name"]))
        elif isinstance(value, dict):
            found |= references(value)
    return found


@pytest.mark.parametrize(
    "path", examples_for(lambda r: is_composite(r) and hook_name(r) == "sync"), ids=lambda p: p.name
)
def test_everything_the_parent_references_is_related(path: Path) -> None:
    body = load_strict(path)
    namespace = body["parent"]["metadata"]["namespace"]
    related = {(obj["kind"], key) for objects in body["related"].values() for key, obj in objects.items()}
    missing = {
        (kind, name)
        for kind, name in references(body["parent"]["spec"])
        if (kind, f"{namespace}/{name}") not in related
    }
    assert missing == set()


@pytest.mark.parametrize("path", examples_for(lambda r: hook_name(r) == "customize"), ids=lambda p: p.name)
def test_customize_request_is_controller_and_parent(path: Path) -> None:
    route, body = route_of(path), load_strict(path)
    assert set(body) == CUSTOMIZE_KEYS
    if is_composite(route):
        controller = composite_for(route)
        rule = controller["spec"]["parentResource"]
        assert body["parent"]["kind"] == KIND_OF_RESOURCE[(rule["apiVersion"], rule["resource"])]
    else:
        controller = decorator_for(body)
        assert hooks_of(controller)["customize"]["webhook"]["path"] == route
    assert body["controller"]["spec"] == controller["spec"]


# --- bridge requests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    examples_for(lambda r: r.startswith(("/bridge/pod/", "/bridge/node/")) and hook_name(r) != "customize"),
    ids=lambda p: p.name,
)
def test_decorator_request_matches_its_manifest(path: Path) -> None:
    route, body = route_of(path), load_strict(path)
    assert set(body) == DECORATOR_KEYS
    dc = decorator_for(body)
    hook = hook_name(route)
    assert hooks_of(dc)[hook]["webhook"]["path"] == route
    assert body["controller"]["spec"] == dc["spec"], "controller differs from the manifest: regenerate"
    assert body["finalizing"] is (hook == "finalize")
    target = body["object"]
    rules = [r for r in dc["spec"]["resources"] if KIND_OF_RESOURCE[(r["apiVersion"], r["resource"])] == target["kind"]]
    assert rules, f"{target['kind']} is not a target of {dc['metadata']['name']}"
    assert set(body["attachments"]) == {
        type_key(r["apiVersion"], r["resource"]) for r in dc["spec"].get("attachments", [])
    }
    check_object_map(body["attachments"], "attachments")
    check_object_map(body["related"], "related")
    finalizer = f"metacontroller.io/decoratorcontroller-{dc['metadata']['name']}"
    if hook == "sync":
        assert selector_matches(rules[0].get("labelSelector"), target["metadata"].get("labels", {}))
    else:  # finalize comes on deletion or when the target stops matching; either way our finalizer is on it
        assert finalizer in target["metadata"]["finalizers"]


@pytest.mark.parametrize("path", examples_for(lambda r: r.startswith("/bridge/admission/")), ids=lambda p: p.name)
def test_admission_request_is_an_admission_review_for_a_managed_pod(path: Path) -> None:
    body = load_strict(path)
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    request = body["request"]
    assert request["uid"]
    assert request["operation"] == "CREATE"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    pod = request["object"]
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == request["namespace"] == MANAGED_NAMESPACE


def test_validate_example_shows_the_pod_as_mutated_and_selected_by_the_pod_decorator() -> None:
    """Mutation runs first: the validating webhook sees the bridge scheduler and the managed label."""
    before = load_strict(EXAMPLES_DIR / "bridge-admission-mutate.json")["request"]["object"]
    after = load_strict(EXAMPLES_DIR / "bridge-admission-validate.json")["request"]["object"]
    selector = decorators()["slurm-bridge-pod"]["spec"]["resources"][0]["labelSelector"]
    assert before["spec"]["schedulerName"] == "default-scheduler"
    assert not selector_matches(selector, before["metadata"].get("labels", {}))
    assert after["spec"]["schedulerName"] == names.BRIDGE_SCHEDULER_NAME
    assert selector_matches(selector, after["metadata"]["labels"])


# --- the examples against the hook server and the Kubernetes schemas ---------------------------------


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_hook_server_accepts_the_example(path: Path) -> None:
    """With no handlers every route parses the request, then answers 501; a 400 names what is malformed."""
    from hooks.app import create_app

    response = (
        create_app(handlers={})
        .test_client()
        .post(route_of(path), data=path.read_bytes(), content_type="application/json")
    )
    assert response.status_code == 501, response.get_json()


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.name)
def test_embedded_objects_are_valid_kubernetes_objects(path: Path) -> None:
    body = load_strict(path)
    problems = {
        f"{obj['kind']} {obj['metadata'].get('name') or obj['metadata'].get('generateName')}": errors
        for obj in embedded_objects(body)
        if (errors := validate_cr(obj) if obj["apiVersion"].startswith(names.GROUP + "/") else validate_builtin(obj))
    }
    assert problems == {}


# --- one coherent cluster ------------------------------------------------------------------------------


def parent_of(file: str) -> Obj:
    return load_strict(EXAMPLES_DIR / file)["parent"]


def test_examples_describe_one_cluster_named_slurm() -> None:
    parents = {plural: parent_of(f"{segment_of(plural)}-sync.json") for plural in composites()}
    assert {p["metadata"]["namespace"] for p in parents.values()} == {"slurm"}
    controller, nodeset = parents["controllers"], parents["nodesets"]
    assert controller["metadata"]["name"] == "slurm"
    assert controller["spec"]["slurmKeyRef"] == {"name": "slurm-key", "key": "slurm.key"}
    assert controller["spec"]["jwtKeyRef"] == {"name": "slurm-jwt-key", "key": "jwt.key"}
    assert nodeset["metadata"]["name"] == "slurm-worker-debug"
    assert nodeset["spec"]["controllerRef"] == {"name": "slurm"}
    assert nodeset["spec"]["replicas"] == 2 and nodeset["spec"]["partition"]["enabled"] is True
    assert [parents[p]["metadata"]["name"] for p in ("loginsets", "restapis", "accountings", "tokens")] == [
        "slurm-login",
        "slurm",
        "slurm",
        "slurm-token",
    ]
    token = parents["tokens"]["spec"]
    assert token["username"] == "slurm" and token["jwtKeyRef"] == {"name": "slurm-jwt-key", "key": "jwt.key"}
    pods = load_strict(EXAMPLES_DIR / "nodeset-sync.json")["children"]["Pod.v1"]
    assert len(pods) == nodeset["spec"]["replicas"]
