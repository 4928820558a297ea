"""The Metacontroller manifests in compositecontrollers/: valid, strict, and wired as docs/architecture.md §2-4 says."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from slinky_common import names
from tests.compositecontrollers.manifests import (
    CONTRACT_ROUTES,
    CRD_DIR,
    Obj,
    all_hooks,
    composites,
    decorators,
    hooks_of,
    label_selector_keys,
    load_manifest,
    load_schema,
    manifest_paths,
    manifests,
    segment_of,
)
from tests.support.kube import load_yaml_docs

SLINKY_PLURALS = ("controllers", "nodesets", "loginsets", "restapis", "accountings", "tokens")
HOOK_SERVICE = {"name": "slurm-operator-hooks", "namespace": "slinky", "port": 8080, "protocol": "http"}

# Our design: which child types each kind owns (one owner per object).
CHILD_TYPES: dict[str, set[tuple[str, str]]] = {
    "controllers": {("v1", "services"), ("v1", "configmaps"), ("apps/v1", "statefulsets"),
                    ("policy/v1", "poddisruptionbudgets")},
    "nodesets": {("v1", "pods"), ("v1", "persistentvolumeclaims"), ("v1", "configmaps")},
    "loginsets": {("apps/v1", "deployments"), ("v1", "services"), ("v1", "configmaps"), ("v1", "secrets")},
    "restapis": {("apps/v1", "deployments"), ("v1", "services")},
    "accountings": {("apps/v1", "statefulsets"), ("v1", "services"), ("v1", "secrets")},
    "tokens": {("v1", "secrets")},
}  # fmt: skip

# API groups every cluster serves; a child type from anywhere else (a ServiceMonitor) stops the
# whole controller when its CRD is missing.
BUILTIN_API_VERSIONS = {"v1", "apps/v1", "policy/v1", "batch/v1"}


def schema_errors(doc: Obj) -> list[tuple[str, str]]:
    """(JSON path, message) of every schema violation, nested oneOf/anyOf causes included."""
    validator = jsonschema.Draft202012Validator(load_schema())
    found: list[tuple[str, str]] = []
    stack = list(validator.iter_errors(doc))
    while stack:
        error = stack.pop()
        found.append((error.json_path, error.message))
        stack.extend(error.context or [])
    return found


def by_name(file: str) -> Obj:
    return copy.deepcopy(manifests()[file])


# --- the schema and validation ----------------------------------------------------------------------


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_one_composite_per_slinky_kind_and_the_bridge_decorators() -> None:
    assert sorted(composites()) == sorted(SLINKY_PLURALS)
    assert sorted(decorators()) == ["slurm-bridge-node-external", "slurm-bridge-node-worker", "slurm-bridge-pod"]


@pytest.mark.parametrize("path", manifest_paths(), ids=lambda p: p.name)
def test_manifest_validates_against_our_metacontroller_schema(path: Path) -> None:
    assert schema_errors(load_manifest(path)) == []


def _set(path: list[str | int], value: object) -> Callable[[Obj], None]:
    def mutate(doc: Obj) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]  # type: ignore[index]
        node[path[-1]] = value  # type: ignore[index]

    return mutate


def _rename(path: list[str | int], old: str, new: str) -> Callable[[Obj], None]:
    def mutate(doc: Obj) -> None:
        node = doc
        for key in path:
            node = node[key]  # type: ignore[index]
        node[new] = node.pop(old)

    return mutate


NEGATIVE_CASES = [
    # (id, manifest, mutation, JSON path the error must point at)
    (
        "typo-in-child-field",
        "nodeset.yaml",
        _rename(["spec", "childResources", 0], "updateStrategy", "updateStratgy"),
        "$.spec.childResources[0]",
    ),
    ("typo-in-spec-field", "token.yaml", _rename(["spec"], "resyncPeriodSeconds", "resyncPeriodSecond"), "$.spec"),
    (
        "bad-update-method",
        "nodeset.yaml",
        _set(["spec", "childResources", 0, "updateStrategy", "method"], "Sometimes"),
        "$.spec.childResources[0].updateStrategy.method",
    ),
    (
        "string-resync-period",
        "controller.yaml",
        _set(["spec", "resyncPeriodSeconds"], "30"),
        "$.spec.resyncPeriodSeconds",
    ),
    ("zero-resync-period", "controller.yaml", _set(["spec", "resyncPeriodSeconds"], 0), "$.spec.resyncPeriodSeconds"),
    ("hook-version-v3", "nodeset.yaml", _set(["spec", "hooks", "sync", "version"], "v3"), "$.spec.hooks.sync.version"),
    (
        "kind-instead-of-resource",
        "restapi.yaml",
        _set(["spec", "childResources", 0, "resource"], "Deployment"),
        "$.spec.childResources[0].resource",
    ),
    (
        "unused-hook-name",
        "token.yaml",
        _set(["spec", "hooks", "preUpdateChild"], {"webhook": {"url": "http://x/y"}}),
        "$.spec.hooks",
    ),
    (
        "url-and-service",
        "token.yaml",
        _set(["spec", "hooks", "sync", "webhook", "url"], "http://hooks.slinky:8080/token/sync"),
        "$.spec.hooks.sync.webhook",
    ),
    (
        "service-without-path",
        "token.yaml",
        lambda d: d["spec"]["hooks"]["sync"]["webhook"].pop("path"),
        "$.spec.hooks.sync.webhook",
    ),
    (
        "timeout-not-a-duration",
        "token.yaml",
        _set(["spec", "hooks", "sync", "webhook", "timeout"], "5 seconds"),
        "$.spec.hooks.sync.webhook.timeout",
    ),
    (
        "bad-unmarshall-mode",
        "token.yaml",
        _set(["spec", "hooks", "sync", "webhook", "responseUnMarshallMode"], "lenient"),
        "$.spec.hooks.sync.webhook.responseUnMarshallMode",
    ),
    (
        "basic-authorization-type",
        "token.yaml",
        _set(
            ["spec", "hooks", "sync", "webhook", "authorization"],
            {"type": "Basic", "secretRef": {"name": "t", "namespace": "slinky", "key": "token"}},
        ),
        "$.spec.hooks.sync.webhook.authorization.type",
    ),
    (
        "etag-timeout-without-cleanup",
        "token.yaml",
        _set(["spec", "hooks", "sync", "webhook", "etag"], {"enabled": True, "cacheTimeoutSeconds": 60}),
        "$.spec.hooks.sync.webhook.etag",
    ),
    (
        "status-checks-without-rolling",
        "controller.yaml",
        _set(["spec", "childResources", 2, "updateStrategy", "statusChecks"], {"conditions": [{"type": "Ready"}]}),
        "$.spec.childResources[2].updateStrategy.method",
    ),
    (
        "rolling-decorator-attachment",
        "bridge-pod.yaml",
        _set(
            ["spec", "attachments"],
            [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "RollingInPlace"}}],
        ),
        "$.spec.attachments[0].updateStrategy.method",
    ),
    (
        "exists-with-values",
        "bridge-pod.yaml",
        _set(["spec", "resources", 0, "labelSelector", "matchExpressions", 0, "values"], ["true"]),
        "$.spec.resources[0].labelSelector.matchExpressions[0].values",
    ),
    ("generate-selector-on-decorator", "bridge-pod.yaml", _set(["spec", "generateSelector"], True), "$.spec"),
    ("namespaced-controller", "nodeset.yaml", _set(["metadata", "namespace"], "slinky"), "$.metadata"),
]


@pytest.mark.parametrize(
    ("file", "mutate", "where"), [c[1:] for c in NEGATIVE_CASES], ids=[c[0] for c in NEGATIVE_CASES]
)
def test_schema_rejects_a_broken_manifest(file: str, mutate: Callable[[Obj], None], where: str) -> None:
    doc = by_name(file)
    assert schema_errors(doc) == [], "the unbroken manifest must be valid, or this case proves nothing"
    mutate(doc)
    paths = [path for path, _ in schema_errors(doc)]
    assert where in paths, f"expected an error at {where}, got {paths}"


# --- parents and their CRDs -------------------------------------------------------------------------


def _crd_for(plural: str, group: str) -> Obj:
    path = CRD_DIR / f"{group}_{plural}.yaml"
    assert path.is_file(), f"{path.relative_to(CRD_DIR.parent)} is missing"
    crds = [doc for doc in load_yaml_docs(path) if doc.get("kind") == "CustomResourceDefinition"]
    assert len(crds) == 1, f"{path.name}: expected one CustomResourceDefinition"
    return crds[0]


@pytest.mark.parametrize("plural", SLINKY_PLURALS)
def test_parent_is_a_crd_with_the_status_subresource(plural: str) -> None:
    """Metacontroller ignores a CompositeController whose parent CRD lacks the status subresource."""
    parent = composites()[plural]["spec"]["parentResource"]
    group, version = parent["apiVersion"].split("/")
    crd = _crd_for(plural, group)
    assert (crd["spec"]["group"], crd["spec"]["names"]["plural"]) == (group, plural)
    # Namespaced parents are what the v2 `ns/name` keys of examples/requests assume.
    assert crd["spec"]["scope"] == "Namespaced"
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    assert version in served, f"{plural}: version {version} is not served"
    assert "status" in served[version].get("subresources", {}), f"{plural}: no status subresource"


@pytest.mark.parametrize("plural", SLINKY_PLURALS)
def test_generate_selector_because_parents_have_no_spec_selector(plural: str) -> None:
    """Without generateSelector Metacontroller fails every sync of a parent lacking spec.selector."""
    cc = composites()[plural]
    group, version = cc["spec"]["parentResource"]["apiVersion"].split("/")
    crd = _crd_for(plural, group)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    assert "selector" not in schema["properties"]["spec"].get("properties", {})
    assert cc["spec"].get("generateSelector") is True


# --- children and update strategies -----------------------------------------------------------------


@pytest.mark.parametrize("plural", SLINKY_PLURALS)
def test_child_types_are_the_designed_ones(plural: str) -> None:
    rules = composites()[plural]["spec"]["childResources"]
    assert {(r["apiVersion"], r["resource"]) for r in rules} == CHILD_TYPES[plural]
    assert len(rules) == len(CHILD_TYPES[plural]), "a child type is listed twice"


def test_child_types_are_served_by_every_cluster() -> None:
    rules = [
        r
        for doc in manifests().values()
        for r in doc["spec"].get("childResources", []) + doc["spec"].get("attachments", [])
    ]
    assert {r["apiVersion"] for r in rules} <= BUILTIN_API_VERSIONS


def test_every_child_rule_chooses_its_update_strategy() -> None:
    """The default (OnDelete) silently freezes children; every rule must say what it wants."""
    unset = [
        (doc["metadata"]["name"], rule["resource"])
        for doc in manifests().values()
        for rule in doc["spec"].get("childResources", []) + doc["spec"].get("attachments", [])
        if "method" not in rule.get("updateStrategy", {})
    ]
    assert unset == []


def test_pods_are_never_updated_or_recreated_by_metacontroller() -> None:
    """A slurmd pod is replaced only by the nodeset hook, after drain (docs/architecture.md §4)."""
    pod_rules = [
        (doc["metadata"]["name"], rule.get("updateStrategy", {}).get("method"))
        for doc in manifests().values()
        for rule in doc["spec"].get("childResources", []) + doc["spec"].get("attachments", [])
        if (rule["apiVersion"], rule["resource"]) == ("v1", "pods")
    ]
    assert pod_rules, "the NodeSet controller must own pods"
    assert all(method == "OnDelete" for _, method in pod_rules), pod_rules


def test_claims_are_never_updated() -> None:
    rules = composites()["nodesets"]["spec"]["childResources"]
    claims = [r for r in rules if r["resource"] == "persistentvolumeclaims"]
    assert [r["updateStrategy"]["method"] for r in claims] == ["OnDelete"]


# --- hooks --------------------------------------------------------------------------------------------


def test_every_hook_is_version_v2() -> None:
    assert [(doc, hook) for doc, hook, spec in all_hooks() if spec.get("version") != "v2"] == []


def test_every_hook_calls_the_hook_service_with_an_explicit_timeout() -> None:
    for doc, hook, spec in all_hooks():
        webhook = spec["webhook"]
        assert webhook.get("service") == HOOK_SERVICE, (doc, hook)
        assert "url" not in webhook, (doc, hook)
        assert webhook.get("timeout"), f"{doc} {hook}: no explicit timeout"


def _expected_path(doc: Obj, hook: str) -> str:
    if doc["kind"] == "CompositeController":
        return f"/{segment_of(doc['spec']['parentResource']['resource'])}/{hook}"
    targets = {rule["resource"] for rule in doc["spec"]["resources"]}
    assert len(targets) == 1, f"{doc['metadata']['name']}: one target type per bridge decorator"
    return f"/bridge/{segment_of(targets.pop())}/{hook}"


def test_every_hook_path_is_the_design_route_of_its_kind_and_hook() -> None:
    for doc in manifests().values():
        for hook, spec in hooks_of(doc).items():
            path = spec["webhook"]["path"]
            assert path in CONTRACT_ROUTES, f"{doc['metadata']['name']}: {path} is not a docs/architecture.md §3 route"
            assert path == _expected_path(doc, hook), f"{doc['metadata']['name']} {hook}: {path}"


def test_every_composite_reads_related_objects_through_customize() -> None:
    assert [plural for plural, cc in composites().items() if "customize" not in hooks_of(cc)] == []


def test_finalize_hooks_exactly_where_deletion_needs_slurm_side_work() -> None:
    """NodeSet drains before delete; the bridge cancels jobs and unregisters nodes. Nothing else holds deletion."""
    composite_finalizers = sorted(plural for plural, cc in composites().items() if "finalize" in hooks_of(cc))
    assert composite_finalizers == ["nodesets"]
    assert all("finalize" in hooks_of(dc) for dc in decorators().values())


def test_every_controller_sets_a_resync_period() -> None:
    assert [doc["metadata"]["name"] for doc in manifests().values() if "resyncPeriodSeconds" not in doc["spec"]] == []


# --- bridge decorators ----------------------------------------------------------------------------------


def test_a_decorator_names_each_target_type_once() -> None:
    """Metacontroller keys decorator selectors by group and kind: a second rule for the same type
    silently replaces the first instead of widening the selection."""
    for name, dc in decorators().items():
        types = [(r["apiVersion"].rpartition("/")[0], r["resource"]) for r in dc["spec"]["resources"]]
        assert len(types) == len(set(types)), name


def test_decorators_need_no_attachments() -> None:
    assert {name: dc["spec"].get("attachments", []) for name, dc in decorators().items()} == {
        name: [] for name in decorators()
    }


def _selector_keys_for(resource: str) -> set[str]:
    return {
        key
        for dc in decorators().values()
        for rule in dc["spec"]["resources"]
        if rule["resource"] == resource
        for key in label_selector_keys(rule.get("labelSelector"))
    }


def test_pod_selector_is_the_admission_label_of_hooks_names() -> None:
    assert _selector_keys_for("pods") == {names.LABEL_BRIDGE_MANAGED}


def test_node_selectors_are_the_node_labels_of_hooks_names() -> None:
    assert _selector_keys_for("nodes") == {names.LABEL_BRIDGE_WORKER, names.LABEL_EXTERNAL_NODE}


def test_every_label_a_manifest_selects_on_is_spelt_in_hooks_names() -> None:
    vocabulary = {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}
    keys = {
        key
        for doc in manifests().values()
        for rule in [*doc["spec"].get("resources", []), doc["spec"].get("parentResource", {})]
        for key in label_selector_keys(rule.get("labelSelector"))
        | set(rule.get("annotationSelector", {}).get("matchAnnotations", {}))
        | {e["key"] for e in rule.get("annotationSelector", {}).get("matchExpressions", [])}
    }
    assert keys and keys <= vocabulary, keys - vocabulary
