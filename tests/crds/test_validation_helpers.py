"""tests/support/kube.py: each check must catch what the apiserver would reject, and say where."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import (
    REPO_ROOT,
    assert_valid_builtin,
    assert_valid_cr,
    load_yaml_docs,
    validate_builtin,
    validate_cr,
    validate_crd,
)


def pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


# --- built-in kinds -----------------------------------------------------------------------------------


def test_valid_builtin_objects_pass() -> None:
    assert validate_builtin(pod()) == []
    assert_valid_builtin(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "pdb"},
            "spec": {"maxUnavailable": 1},
        }
    )
    assert_valid_builtin({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "YWJj"}})


def test_builtin_reports_every_error_with_its_path() -> None:
    bad = pod(restartPolicy=3, nodeName=["a"])
    bad["spec"]["containers"][0]["port"] = 80
    assert validate_builtin(bad) == [
        "spec.containers[0].port: unknown field",
        "spec.nodeName: ['a'] is not of type 'string', 'null'",
        "spec.restartPolicy: 3 is not of type 'string', 'null'",
    ]


def test_unknown_builtin_kind_is_an_error_not_a_pass() -> None:
    assert validate_builtin({"apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet"}) == [
        "<root>: NodeSet slinky.slurm.net/v1beta1 is not a built-in kind of Kubernetes 1.33"
    ]
    assert validate_builtin({"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "p"}}) != []
    assert validate_builtin({"kind": "Pod"}) == ["<root>: apiVersion and kind are required"]


def test_unsupported_kubernetes_version_raises() -> None:
    with pytest.raises(ValueError, match=r"1\.99"):
        validate_builtin(pod(), k8s_version="1.99")


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod(overhead={"cpu": "lots"}), "spec.overhead.cpu: 'lots' is not valid under any of the given schemas"),
        (
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "not base64!"}},
            "data.k: 'not base64!' is not a 'byte'",
        ),
        ({**pod(), "metadata": {"name": "Pod_1"}}, "metadata.name: 'Pod_1' is not a DNS-1123 subdomain"),
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc"}, "spec": {}},
            "metadata.name: '1svc' is not a DNS-1035 label (Service names)",
        ),
        (
            {**pod(), "metadata": {"name": "p", "labels": {"hash": "x" * 64}}},
            f"metadata.labels.hash: invalid label value {'x' * 64!r}",
        ),
        (
            {**pod(), "metadata": {"name": "p", "labels": {"bad key!": "v"}}},
            "metadata.labels: invalid label key 'bad key!'",
        ),
        ({**pod(), "metadata": {}}, "metadata.name: Required value"),
    ],
    ids=["quantity", "base64", "name", "service-name", "label-value", "label-key", "no-name"],
)
def test_builtin_checks_what_the_schemas_leave_to_the_apiserver(obj: dict[str, Any], expected: str) -> None:
    assert expected in validate_builtin(obj)


def test_assert_valid_builtin_lists_the_errors() -> None:
    with pytest.raises(AssertionError, match=r"Pod 'p' is invalid:\n  spec.containers\[0\].port: unknown field"):
        bad = pod()
        bad["spec"]["containers"][0]["port"] = 80
        assert_valid_builtin(bad)


# --- custom resources against a CRD of our own making ---------------------------------------------------

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "x-kubernetes-validations": [
                                    {"rule": "self.size <= self.limit", "message": "size must not exceed limit"}
                                ],
                                "properties": {
                                    "size": {"type": "integer", "maximum": 10, "default": 1},
                                    "limit": {"type": "integer", "default": 5},
                                    "surge": {
                                        "x-kubernetes-int-or-string": True,
                                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                                    },
                                    "mode": {"type": "string", "enum": ["a", "b"], "nullable": True},
                                    "tags": {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "x-kubernetes-list-type": "set",
                                    },
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "name": {
                                        "type": "string",
                                        "x-kubernetes-validations": [
                                            {"rule": "self == oldSelf", "message": "name is immutable"}
                                        ],
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def widget_crds(tmp_path: Path) -> Path:
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    return tmp_path


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def test_the_test_crd_itself_is_valid() -> None:
    assert validate_crd(WIDGET_CRD) == []


def test_defaults_are_applied_before_rules(widget_crds: Path) -> None:
    assert validate_cr(widget(), widget_crds) == []
    assert validate_cr(widget(size=6), widget_crds) == ["spec: size must not exceed limit"]
    assert validate_cr(widget(size=6, limit=8), widget_crds) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"size": 11, "limit": 20}, ["spec.size: 11 is greater than the maximum of 10"]),
        ({"surge": 1.5}, ["spec.surge: 1.5 is not valid under any of the given schemas"]),
        ({"mode": "c"}, ["spec.mode: 'c' is not one of ['a', 'b', None]"]),
        ({"tags": ["x", "x"]}, ["spec.tags[1]: Duplicate value: 'x'"]),
        ({"colour": "red", "size": 1}, ["spec.colour: unknown field"]),
        ({"tags": None}, ["spec.tags: None is not of type 'array'"]),
    ],
    ids=["maximum", "int-or-string", "enum", "set", "unknown-field", "null"],
)
def test_schema_violations(widget_crds: Path, spec: dict[str, Any], expected: list[str]) -> None:
    assert validate_cr(widget(**spec), widget_crds) == expected


def test_what_the_schema_allows(widget_crds: Path) -> None:
    assert_valid_cr(widget(surge="25%", mode=None, tags=["x", "y"], extra={"anything": {"goes": 1}}), widget_crds)


def test_unknown_top_level_field_and_unknown_kind(widget_crds: Path) -> None:
    assert validate_cr({**widget(), "specs": {}}, widget_crds) == ["specs: unknown field"]
    assert validate_cr({**widget(), "kind": "Gadget"}, widget_crds) == [
        f"<root>: no CRD for Gadget example.com/v1 in {widget_crds}"
    ]


def test_transition_rules_need_an_old_object(widget_crds: Path) -> None:
    assert validate_cr(widget(name="b"), widget_crds) == []
    assert validate_cr(widget(name="b"), widget_crds, old=widget(name="a")) == ["spec.name: name is immutable"]
    assert validate_cr(widget(name="a"), widget_crds, old=widget(name="a")) == []
    assert validate_cr(widget(name="a"), widget_crds, old=widget()) == []


def test_validate_cr_does_not_change_its_input(widget_crds: Path) -> None:
    obj = widget()
    validate_cr(obj, widget_crds)
    assert obj == widget()


# --- CRDs ---------------------------------------------------------------------------------------------


def broken(change: Any) -> dict[str, Any]:
    crd = copy.deepcopy(WIDGET_CRD)
    change(crd)
    return crd


def spec_properties(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c["spec"]["versions"][0].update(servd=True), "spec.versions[0].servd: unknown field"),
        (lambda c: c["metadata"].update(name="widget.example.com"), "metadata.name: must be <plural>.<group>"),
        (
            lambda c: spec_properties(c).update(loose={"description": "no type"}),
            "v1: spec.loose: type is required in a structural schema",
        ),
        (
            lambda c: spec_properties(c)["mode"].update(default="c"),
            "v1: spec.mode.default: 'c' is not one of ['a', 'b', None]",
        ),
        (
            lambda c: spec_properties(c)["name"].update(
                default="x", **{"x-kubernetes-validations": [{"rule": "self != 'x'", "message": "name must not be x"}]}
            ),
            "v1: spec.name.default: name must not be x",
        ),
        (
            lambda c: spec_properties(c).update(
                both={"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}
            ),
            "v1: spec.both: properties and additionalProperties are mutually exclusive",
        ),
        (
            lambda c: spec_properties(c)["name"]["x-kubernetes-validations"].append(
                {"rule": "self ==", "message": "m"}
            ),
            "v1: spec.name: rule 'self ==' does not parse",
        ),
        (
            lambda c: spec_properties(c)["name"]["x-kubernetes-validations"].append(
                {"rule": "true", "message": "two\nlines"}
            ),
            "v1: spec.name: rule message must be one line",
        ),
        (
            lambda c: spec_properties(c)["name"]["x-kubernetes-validations"].append(
                {"rule": "self == oldSelf", "message": "again"}
            ),
            "v1: spec.name: rule 'self == oldSelf' appears twice",
        ),
        (
            lambda c: c["spec"]["versions"][0].update(
                additionalPrinterColumns=[{"name": "X", "type": "integer", "jsonPath": ".spec.sise"}]
            ),
            "v1: column X .spec.sise is not a integer field of the schema",
        ),
        (
            lambda c: c["spec"]["versions"][0].update(
                additionalPrinterColumns=[{"name": "S", "type": "string", "jsonPath": '.spec.name[?(@.a=="b")].c'}]
            ),
            'v1: column S .spec.name[?(@.a=="b")].c is not a string field of the schema',
        ),
        (
            lambda c: c["spec"]["versions"][0]["subresources"].update(
                scale={"specReplicasPath": ".spec.mode", "statusReplicasPath": ".status.n"}
            ),
            "v1: scale specReplicasPath .spec.mode is not a integer field of the schema",
        ),
    ],
    ids=[
        "unknown-field",
        "name",
        "untyped",
        "bad-default",
        "default-breaks-rule",
        "properties-and-map",
        "cel-syntax",
        "message",
        "duplicate-rule",
        "column",
        "column-filter",
        "scale",
    ],
)
def test_validate_crd_catches(change: Any, expected: str) -> None:
    errors = validate_crd(broken(change))
    assert any(error.startswith(expected) for error in errors), errors


def test_load_yaml_docs_skips_empty_documents(tmp_path: Path) -> None:
    path = tmp_path / "multi.yaml"
    path.write_text("---\na: 1\n---\n---\n# only a comment\n---\nb: 2\n")
    assert load_yaml_docs(path) == [{"a": 1}, {"b": 2}]


def test_repo_root_is_this_repository() -> None:
    assert (REPO_ROOT / "pyproject.toml").is_file()
    assert (REPO_ROOT / "tests" / "support" / "kube.py").is_file()
