"""Our CRDs on a real API server: installed and Established, the examples accepted, and every rejection
case of tests/crds rejected by the server itself (structural schema and CEL), naming the field."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from kubernetes import client

from tests.crds.cases import ACCEPTED, PLURALS, REJECTED, Rejected, all_rules, changed, example, example_docs
from tests.kube.kubeapi import GROUP, VERSION, conditions, create_cr, plural, rejection
from tests.support.kube import REPO_ROOT, load_yaml_docs


def test_every_crd_is_established_with_its_names_accepted(installed_crds: list[str], kube_api) -> None:
    assert sorted(installed_crds) == sorted(f"{p}.{GROUP}" for p in PLURALS.values())
    for name in installed_crds:
        found = conditions(kube_api, name)
        assert found["Established"] == "True" and found["NamesAccepted"] == "True", (name, found)
        assert found.get("NonStructuralSchema") is None, (name, found)


def test_crds_are_served_in_discovery(installed_crds: list[str], kube_api) -> None:
    resources = client.CustomObjectsApi(kube_api).get_api_resources(GROUP, VERSION)
    served = {r.name for r in resources.resources}
    assert {f"{p}/status" for p in PLURALS.values()} <= served
    assert set(PLURALS.values()) <= served


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return obj


@pytest.mark.parametrize(
    ("filename", "doc"),
    example_docs(),
    ids=[f"{name}:{doc['kind']}/{doc['metadata']['name']}" for name, doc in example_docs()],
)
def test_example_is_accepted(installed_crds, kube_api, kube_namespace: str, filename: str, doc: dict) -> None:
    obj = in_namespace(doc, kube_namespace)
    if obj["apiVersion"] == f"{GROUP}/{VERSION}":
        created = create_cr(kube_api, obj, kube_namespace)
        assert created["metadata"]["generation"] == 1
        assert (
            created["spec"]
            == client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
                GROUP, VERSION, kube_namespace, plural(obj["kind"]), obj["metadata"]["name"]
            )["spec"]
        )
    else:
        client.CoreV1Api(kube_api).create_namespaced_secret(kube_namespace, obj, field_validation="Strict")


def expected_field(expected: str) -> str:
    """The field a rejection names: ``spec: 'x' is a required property`` names ``spec.x``."""
    path, _, message = expected.partition(": ")
    required = re.fullmatch(r"'([^']+)' is a required property", message)
    if required:
        return required.group(1) if path == "<root>" else f"{path}.{required.group(1)}"
    return path


def cel_messages(kind: str) -> set[str]:
    return {validation["message"] for _, validation in all_rules(kind)}


def write(api: client.ApiClient, namespace: str, obj: dict, old: dict | None, status: bool) -> None:
    """Create obj, or create old and update it to obj; a status case goes through /status."""
    custom = client.CustomObjectsApi(api)
    name, kind_plural = obj["metadata"]["name"], plural(obj["kind"])
    if old is None and not status:
        create_cr(api, obj, namespace)
        return
    current = create_cr(api, old if old is not None else example_without_status(obj), namespace)
    obj = dict(obj, metadata=dict(obj["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
    replace = custom.replace_namespaced_custom_object_status if status else custom.replace_namespaced_custom_object
    replace(GROUP, VERSION, namespace, kind_plural, name, obj, field_validation="Strict")


def example_without_status(obj: dict) -> dict:
    return {key: value for key, value in obj.items() if key != "status"}


# Where tests/crds' offline validator is stricter than the API server: the server prunes a null in a
# non-nullable field (then defaults it) instead of rejecting it.
PRUNED_BY_THE_SERVER = {"null in non-nullable field"}


@pytest.mark.parametrize(
    "case", [c for c in REJECTED if c.name not in PRUNED_BY_THE_SERVER], ids=lambda case: case.name
)
def test_rejected_by_the_server(installed_crds, kube_api, kube_namespace: str, case: Rejected) -> None:
    base = in_namespace(example(case.kind), kube_namespace)
    old = changed(base, case.old) if case.old is not None else None
    new = changed(base, case.changes)
    field = expected_field(case.expected)
    status, text = rejection(lambda: write(kube_api, kube_namespace, new, old, field.startswith("status")))
    assert status in (400, 422), text
    assert field in text, f"the server's error does not name {field}:\n{text}"
    message = case.expected.split(": ", 1)[1]
    if message in cel_messages(case.kind):
        assert message in text, f"the server's error lacks the CEL message {message!r}:\n{text}"


def test_null_in_a_non_nullable_field_is_pruned_and_defaulted(installed_crds, kube_api, kube_namespace: str) -> None:
    (case,) = [c for c in REJECTED if c.name in PRUNED_BY_THE_SERVER]
    created = create_cr(
        kube_api, changed(in_namespace(example(case.kind), kube_namespace), case.changes), kube_namespace
    )
    assert created["spec"]["replicas"] == 1


@pytest.mark.parametrize(("name", "kind", "changes", "old"), ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_accepted_by_the_server(
    installed_crds,
    kube_api,
    kube_namespace: str,
    name: str,
    kind: str,
    changes: dict,
    old: dict | None,
) -> None:
    base = in_namespace(example(kind), kube_namespace)
    previous = changed(base, old) if old is not None else None
    new = changed(base, {**(old or {}), **changes}) if old is not None else changed(base, changes)
    write(kube_api, kube_namespace, new, previous, status=False)


# --- CRDs the server must refuse --------------------------------------------------------------------


def broken_crd(schema_change: dict[str, Any]) -> dict[str, Any]:
    """A copy of the NodeSet CRD under another group, with one change to its schema."""
    crd = copy.deepcopy(next(iter(load_crd("nodesets"))))
    crd["spec"]["group"] = "broken.example.com"
    crd["metadata"]["name"] = "nodesets.broken.example.com"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"].update(schema_change)
    return crd


def load_crd(plural_name: str) -> list[dict[str, Any]]:
    return load_yaml_docs(REPO_ROOT / "crds" / f"{GROUP}_{plural_name}.yaml")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"x-kubernetes-validations": [{"rule": "self.replicas >", "message": "broken"}]}, "compilation failed"),
        ({"x-kubernetes-validations": [{"rule": "self.nosuchfield == 1", "message": "broken"}]}, "undefined field"),
        ({"properties": {"replicas": {"description": "no type"}}}, "type: Required value"),
        ({"properties": {"replicas": {"type": "integer", "default": "three"}}}, "default"),
    ],
    ids=["cel-syntax", "cel-unknown-field", "no-type", "default-of-wrong-type"],
)
def test_broken_crd_is_refused(kube_api, change: dict, expected: str) -> None:
    crd = broken_crd(change)
    status, text = rejection(lambda: client.ApiextensionsV1Api(kube_api).create_custom_resource_definition(crd))
    assert status == 422, text
    assert expected in text, text
