"""Metacontroller's hook wire contract (hooks/contract.py), called directly: every malformed request is a
BadHookRequest naming the field (the 400), and every response Metacontroller would misread a BadHookResponse."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hooks import contract
from hooks.applied import MAX_DEPTH, Kept
from slinky_common import names
from slinky_common.errors import BadHookRequest

NODESET = {
    "apiVersion": names.API_VERSION,
    "kind": "NodeSet",
    "metadata": {"name": "debug", "namespace": "slurm", "uid": "u-1"},
    "spec": {"replicas": 2},
}
REVIEW = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}


def _obj(kind: str, name: str, namespace: str = "slurm", api_version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}, **extra}


def _nested(depth: int) -> dict[str, Any]:
    """An object nesting `depth` levels of {"a": ...}."""
    inner: dict[str, Any] = {}
    for _ in range(depth - 1):
        inner = {"a": inner}
    return inner


def _review(**request: Any) -> dict[str, Any]:
    return {**REVIEW, "request": {"uid": "r-1", **request}}


# --- load_json_object ------------------------------------------------------------------------------


def test_load_json_object_returns_the_object() -> None:
    assert contract.load_json_object(b'{"parent": {"a": [1, 2.5, null, true]}}') == {
        "parent": {"a": [1, 2.5, None, True]}
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", r"^request body is empty; expected a JSON object$"),
        (b"{", r"^request body is not valid JSON: "),
        (b'{"a": Infinity}', r"^request body is not valid JSON: "),
        (b'"text"', r"^request body must be a JSON object, got string$"),
        (b"3", r"^request body must be a JSON object, got number$"),
        (b"true", r"^request body must be a JSON object, got boolean$"),
        (b"null", r"^request body must be a JSON object, got null$"),
    ],
)
def test_load_json_object_refuses_what_is_not_one_strict_json_object(body: bytes, message: str) -> None:
    with pytest.raises(BadHookRequest, match=message):
        contract.load_json_object(body)


# --- parse_composite -------------------------------------------------------------------------------


def test_a_minimal_composite_request_has_empty_maps_and_is_not_finalizing() -> None:
    req = contract.parse_composite({"parent": NODESET}, "NodeSet")
    assert req.parent is NODESET
    assert (req.controller, req.children, req.related, req.finalizing, req.readings) == ({}, {}, {}, False, {})
    assert req.children_of(contract.TYPE_POD) == [] and req.related_of(contract.TYPE_SECRET) == []


def test_children_and_related_come_sorted_by_namespace_then_name_whatever_their_keys() -> None:
    pods = {"b": _obj("Pod", "b"), "slurm/a": _obj("Pod", "a"), "c": _obj("Pod", "c")}
    secrets = {"z/a": _obj("Secret", "a", "z"), "a/b": _obj("Secret", "b", "a"), "a/a": _obj("Secret", "a", "a")}
    body = {"parent": NODESET, "children": {"Pod.v1": pods}, "related": {"Secret.v1": secrets}, "finalizing": True}
    req = contract.parse_composite(body, "NodeSet")
    assert [p["metadata"]["name"] for p in req.children_of("Pod.v1")] == ["a", "b", "c"]
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in req.related_of("Secret.v1")] == [
        ("a", "a"),
        ("a", "b"),
        ("z", "a"),
    ]
    assert req.finalizing is True


def test_a_null_group_is_an_empty_one() -> None:
    req = contract.parse_composite({"parent": NODESET, "children": {"Pod.v1": None}, "related": None}, "NodeSet")
    assert req.children == {"Pod.v1": {}} and req.related == {}
    assert req.children_of("Pod.v1") == []


def test_readers_read_each_child_of_their_type_with_the_parent_in_request_order() -> None:
    seen: list[tuple[str, str]] = []

    def read_pod(pod: dict[str, Any], parent: dict[str, Any]) -> str:
        seen.append((pod["metadata"]["name"], parent["metadata"]["name"]))
        return pod["metadata"]["name"].upper()

    children = {"Pod.v1": {"b": _obj("Pod", "b"), "a": _obj("Pod", "a")}, "Secret.v1": {"s": _obj("Secret", "s")}}
    req = contract.parse_composite({"parent": NODESET, "children": children}, "NodeSet", {"Pod.v1": read_pod})
    assert req.readings == {"Pod.v1": ["B", "A"]}  # the request's order, not the sorted one
    assert seen == [("b", "debug"), ("a", "debug")]


def test_a_reader_runs_only_on_children_that_passed_their_check() -> None:
    read: list[str] = []
    bad = {"Pod.v1": {"a": _obj("Pod", "a"), "b": _obj("Pod", "b", spec={"containers": "x"})}}
    with pytest.raises(BadHookRequest, match=r"^children\['Pod\.v1'\]\['b'\]\.spec\.containers must be a list"):
        contract.parse_composite(
            {"parent": NODESET, "children": bad}, "NodeSet", {"Pod.v1": lambda p, _: read.append(p["metadata"]["name"])}
        )
    assert read == ["a"]


def test_related_objects_are_never_read_by_the_readers() -> None:
    body = {"parent": NODESET, "related": {"Pod.v1": {"slurm/a": _obj("Pod", "a")}}}
    req = contract.parse_composite(body, "NodeSet", {"Pod.v1": lambda p, _: 1})
    assert req.readings == {}


@pytest.mark.parametrize(
    ("parent", "message"),
    [
        ({**NODESET, "kind": "LoginSet"}, r"^parent\.kind must be 'NodeSet', got 'LoginSet'$"),
        ({k: v for k, v in NODESET.items() if k != "kind"}, r"^parent\.kind must be 'NodeSet', got None$"),
        ({**NODESET, "apiVersion": 1}, r"^parent\.apiVersion must be a string$"),
        ({**NODESET, "metadata": None}, r"^parent\.metadata must be an object, got null$"),
        ({**NODESET, "metadata": {"namespace": "slurm"}}, r"^parent\.metadata\.name must be a non-empty string$"),
        ({**NODESET, "metadata": {"name": 7}}, r"^parent\.metadata\.name must be a non-empty string$"),
        ({**NODESET, "metadata": {"name": "a", "namespace": 3}}, r"^parent\.metadata\.namespace must be a string$"),
        ({**NODESET, "metadata": {"name": "a", "uid": None}}, r"^parent\.metadata\.uid must be a string$"),
        ({**NODESET, "metadata": {"name": "a", "annotations": []}}, r"^parent\.metadata\.annotations must map"),
        ({**NODESET, "metadata": {"name": "a", "generation": "1"}}, r"^parent\.metadata\.generation must be an int"),
        ({**NODESET, "status": "Ready"}, r"^parent\.status must be an object, got string$"),
        ({**NODESET, "spec": 2}, r"^parent\.spec must be an object, got number$"),
    ],
)
def test_a_malformed_parent_is_a_bad_request_naming_the_field(parent: dict[str, Any], message: str) -> None:
    with pytest.raises(BadHookRequest, match=message):
        contract.parse_composite({"parent": parent}, "NodeSet")


def test_a_parent_nesting_deeper_than_an_answer_can_carry_is_a_bad_request() -> None:
    fits = {**NODESET, "spec": {"x": _nested(MAX_DEPTH - 2)}}  # parent, spec and x are three of the levels
    assert contract.parse_composite({"parent": fits}, "NodeSet").parent is fits
    too_deep = {**NODESET, "spec": {"x": _nested(MAX_DEPTH + 10)}}
    with pytest.raises(BadHookRequest, match=rf"^parent nests deeper than {MAX_DEPTH} levels, at spec\.x\.a"):
        contract.parse_composite({"parent": too_deep}, "NodeSet")


def test_related_objects_are_judged_for_nesting_but_children_are_left_to_the_hook() -> None:
    deep = _nested(MAX_DEPTH + 10)
    children = {"ConfigMap.v1": {"c": _obj("ConfigMap", "c", x=deep)}}
    assert contract.parse_composite({"parent": NODESET, "children": children}, "NodeSet").children == children
    with pytest.raises(BadHookRequest, match=r"^related\['ConfigMap\.v1'\]\['slurm/c'\] nests deeper than 254"):
        contract.parse_composite(
            {"parent": NODESET, "related": {"ConfigMap.v1": {"slurm/c": _obj("ConfigMap", "c", x=deep)}}}, "NodeSet"
        )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"children": {"Pod.v1": {"p": _obj("Node", "p")}}}, r"^children\['Pod\.v1'\]\['p'\]\.kind must be 'Pod' "),
        ({"children": {"Pod.v1": {"p": {"kind": "Pod"}}}}, r"^children\['Pod\.v1'\]\['p'\] must be an object with"),
        ({"related": {"Secret.v1": []}}, r"^related\['Secret\.v1'\] must be an object keyed by name, got array$"),
        ({"related": 1}, r"^related must be an object keyed by 'Kind\.apiVersion', got number$"),
        ({"controller": []}, r"^controller must be an object, got array$"),
        ({"controller": {"spec": {"childResources": "x"}}}, r"^controller\.spec\.childResources must be a list"),
        ({"controller": {"metadata": {"annotations": {"a": 1}}}}, r"^controller\.metadata\.annotations must map"),
        ({"finalizing": None}, r"^finalizing must be a boolean, got null$"),
        ({"finalizing": 1}, r"^finalizing must be a boolean, got number$"),
        (
            {"related": {"Secret.v1": {"s/k": _obj("Secret", "k", data={"k": "not base64!"})}}},
            r"^related\['Secret\.v1'\]\['s/k'\]\.data\['k'\] must be base64$",
        ),
    ],
)
def test_malformed_request_fields_are_bad_requests_naming_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadHookRequest, match=message):
        contract.parse_composite({"parent": NODESET, **body}, "NodeSet")


# --- parse_customize and parse_decorator ---------------------------------------------------------------


def test_customize_reads_controller_and_parent_only() -> None:
    controller = {"metadata": {"name": "nodeset"}, "spec": {"childResources": [{"apiVersion": "v1"}]}}
    req = contract.parse_customize({"controller": controller, "parent": NODESET, "children": "ignored"}, "NodeSet")
    assert req == contract.CustomizeRequest(controller=controller, parent=NODESET)
    with pytest.raises(BadHookRequest, match=r"^parent is missing$"):
        contract.parse_customize({"object": NODESET}, "NodeSet")


def test_decorator_request_reads_its_object_attachments_and_related() -> None:
    pod = _obj("Pod", "p", spec={"nodeName": "n1"})
    node = _obj("Node", "n1", namespace="")
    secret = _obj("Secret", "s", "b")
    body = {
        "object": pod,
        "attachments": {"Node.v1": {"n1": node}},
        "related": {"Secret.v1": {"b/s": secret, "a/s": _obj("Secret", "s", "a")}},
        "finalizing": True,
    }
    req = contract.parse_decorator(body, "Pod")
    assert (req.object, req.attachments, req.finalizing) == (pod, {"Node.v1": {"n1": node}}, True)
    assert [s["metadata"]["namespace"] for s in req.related_of("Secret.v1")] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"parent": _obj("Pod", "p")}, r"^object is missing$"),
        ({"object": _obj("Node", "p")}, r"^object\.kind must be 'Pod', got 'Node'$"),
        ({"object": _obj("Pod", "p"), "attachments": []}, r"^attachments must be an object keyed by 'Kind\.apiV"),
        (
            {"object": _obj("Pod", "p"), "attachments": {"Node.v1": {"n": _obj("Pod", "n")}}},
            r"^attachments\['Node\.v1'\]\['n'\]\.kind must be 'Node' \(its type key is 'Node\.v1'\), got 'Pod'$",
        ),
        ({"object": _obj("Pod", "p"), "finalizing": "false"}, r"^finalizing must be a boolean, got string$"),
    ],
)
def test_malformed_decorator_requests_are_bad_requests(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadHookRequest, match=message):
        contract.parse_decorator(body, "Pod")


# --- parse_admission -------------------------------------------------------------------------------


def test_an_admission_review_for_a_pod_being_created_without_a_name_is_accepted() -> None:
    pod = {"metadata": {"generateName": "worker-", "namespace": "slurm"}, "spec": {}}  # no name, no kind
    req = contract.parse_admission(_review(operation="CREATE", object=pod), "Pod")
    assert req == contract.AdmissionRequest(
        uid="r-1", operation="CREATE", object=pod, old_object=None, namespace="slurm"
    )


def test_the_request_namespace_wins_over_the_objects() -> None:
    pod = _obj("Pod", "p", "from-object")
    assert contract.parse_admission(_review(operation="UPDATE", object=pod, oldObject=pod, namespace="ns"), "Pod") == (
        contract.AdmissionRequest("r-1", "UPDATE", pod, pod, "ns")
    )


def test_a_delete_without_an_object_reviews_the_old_one_of_any_kind() -> None:
    old = _obj("Node", "n", namespace="")
    req = contract.parse_admission(_review(operation="DELETE", oldObject=old), "Pod")
    assert (req.object, req.old_object, req.namespace) == (old, old, "")
    bare = contract.parse_admission(_review(operation="DELETE"), "Pod")
    assert (bare.object, bare.old_object, bare.namespace) == ({}, None, "")


@pytest.mark.parametrize(
    ("review", "message"),
    [
        ({**REVIEW, "kind": "Review", "request": {}}, r"^kind must be 'AdmissionReview', got 'Review'$"),
        ({**REVIEW, "apiVersion": None, "request": {}}, r"^apiVersion must be 'admission\.k8s\.io/v1', got None$"),
        ({**REVIEW, "request": []}, r"^request must be an object, got array$"),
        ({**REVIEW, "request": {"uid": "", "operation": "CREATE"}}, r"^request\.uid must be a non-empty string$"),
        ({**REVIEW, "request": {"uid": 1, "operation": "CREATE"}}, r"^request\.uid must be a non-empty string$"),
        (_review(operation="create", object={}), r"^request\.operation must be CREATE, UPDATE, DELETE or CONNECT, got"),
        (_review(operation="UPDATE", object={}, oldObject="x"), r"^request\.oldObject must be an object or null, got"),
        (_review(operation="CREATE"), r"^request\.object must be an object, got null$"),
        (_review(operation="CREATE", object=[]), r"^request\.object must be an object, got array$"),
        (
            _review(operation="CREATE", object={"kind": "Pod"}),
            r"^request\.object\.metadata must be an object, got null$",
        ),
        (
            _review(operation="CREATE", object={"metadata": {"name": 3}}),
            r"^request\.object\.metadata\.name must be a string, got number$",
        ),
        (
            _review(operation="UPDATE", object=_obj("Pod", "p"), oldObject={"metadata": {"labels": {"a": 1}}}),
            r"^request\.oldObject\.metadata\.labels must map names to strings$",
        ),
        (
            _review(operation="CREATE", object=_obj("Pod", "p"), namespace=5),
            r"^request\.namespace must be a string, got number$",
        ),
        (
            _review(operation="CREATE", object=_obj("Pod", "p", x=_nested(MAX_DEPTH + 5))),
            r"^request\.object nests deeper than 254 levels",
        ),
    ],
)
def test_malformed_admission_reviews_are_bad_requests_naming_the_field(review: dict[str, Any], message: str) -> None:
    with pytest.raises(BadHookRequest, match=message):
        contract.parse_admission(review, "Pod")


# --- response checks -------------------------------------------------------------------------------


def test_a_valid_composite_response_is_returned_unchanged() -> None:
    kept = Kept("v1", "Pod", "a", "slurm", orjson.Fragment(b"{}"))
    resp = {
        "status": {"replicas": 1},
        "children": [_obj("Pod", "b"), kept, _obj("Pod", "a", "other")],  # one name in two namespaces
        "resyncAfterSeconds": 0,
        "finalized": False,
    }
    assert contract.check_composite_response(resp) is resp
    assert contract.check_composite_response({"children": [], "resyncAfterSeconds": 2.5}) == {
        "children": [],
        "resyncAfterSeconds": 2.5,
    }


@pytest.mark.parametrize(
    ("resp", "message"),
    [
        ({}, r"^children must be a list \(an absent list would delete every child\)$"),
        ({"children": {}}, r"^children must be a list"),
        ({"children": [], "child": []}, r"^response has unknown keys \['child'\]$"),
        ({"children": [["Pod"]]}, r"^children\[0\] must be an object$"),
        (
            {"children": [{"kind": "Pod", "metadata": {"name": "a"}}]},
            r"^children\[0\] needs string apiVersion, kind, metadata.namespace and metadata.name$",
        ),
        (
            {"children": [{"apiVersion": "v1", "kind": "Pod", "metadata": "a"}]},
            r"^children\[0\] needs string apiVersion",
        ),
        ({"children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": ""}}]}, r"^children\[0\] needs"),
        (
            {"children": [_obj("Pod", "a"), Kept("v1", "Pod", "a", "slurm", orjson.Fragment(b"{}"))]},
            r"^children\[1\] duplicates Pod 'a'$",
        ),
        ({"children": [], "status": None}, r"^status must be an object$"),
        ({"children": [], "resyncAfterSeconds": "5"}, r"^resyncAfterSeconds must be a finite non-negative number"),
        ({"children": [], "resyncAfterSeconds": True}, r"^resyncAfterSeconds must be a finite non-negative number"),
        (
            {"children": [{"apiVersion": "v1", "kind": ["Pod"], "metadata": {"name": "a"}}]},
            r"^children\[0\] needs string",
        ),
        ({"children": [{"apiVersion": 1, "kind": "Pod", "metadata": {"name": "a"}}]}, r"^children\[0\] needs string"),
        (
            {"children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": {}}}]},
            r"^children\[0\] needs string",
        ),
        ({"children": [], "resyncAfterSeconds": float("inf")}, r"^resyncAfterSeconds must be a finite non-negative"),
        ({"children": [], "resyncAfterSeconds": -0.5}, r"^resyncAfterSeconds must be a finite non-negative number"),
        ({"children": [], "finalized": 1}, r"^finalized must be a boolean$"),
    ],
)
def test_composite_responses_metacontroller_would_misread_are_refused(resp: dict[str, Any], message: str) -> None:
    with pytest.raises(contract.BadHookResponse, match=message):
        contract.check_composite_response(resp)


def test_decorator_responses_may_remove_labels_and_carry_attachments() -> None:
    resp = {"labels": {"a": "1", "b": None}, "annotations": {}, "attachments": [_obj("Node", "n", "")]}
    assert contract.check_decorator_response(resp) is resp
    assert contract.check_decorator_response({}) == {}


@pytest.mark.parametrize(
    ("resp", "message"),
    [
        ({"labels": {"a": 1}}, r"^labels must map names to strings or null$"),
        ({"annotations": ["a"]}, r"^annotations must map names to strings or null$"),
        ({"attachments": {}}, r"^attachments must be a list$"),
        ({"attachments": [_obj("Node", "n"), _obj("Node", "n")]}, r"^attachments\[1\] duplicates Node 'n'$"),
        ({"children": []}, r"^response has unknown keys \['children'\]$"),
        ({"finalized": "yes"}, r"^finalized must be a boolean$"),
    ],
)
def test_bad_decorator_responses_are_refused(resp: dict[str, Any], message: str) -> None:
    with pytest.raises(contract.BadHookResponse, match=message):
        contract.check_decorator_response(resp)


def test_customize_responses_list_related_resources_by_names_or_selectors() -> None:
    resp = {
        "relatedResources": [
            {"apiVersion": "v1", "resource": "secrets", "namespace": "slurm", "names": ["a"]},
            {"apiVersion": "v1", "resource": "pods", "labelSelector": {"matchLabels": {"a": "b"}}},
        ]
    }
    assert contract.check_customize_response(resp) is resp
    assert contract.check_customize_response({"relatedResources": []}) == {"relatedResources": []}


@pytest.mark.parametrize(
    ("resp", "message"),
    [
        ({}, r"^relatedResources must be a list of objects$"),
        ({"relatedResources": ["secrets"]}, r"^relatedResources must be a list of objects$"),
        ({"relatedResources": [], "children": []}, r"^response has unknown keys \['children'\]$"),
        ({"relatedResources": [{"resource": "pods", "selector": {}}]}, r"^relatedResources\[0\] has unknown keys"),
        (
            {"relatedResources": [{"resource": "pods"}, {"resource": "pods", "names": ["a"], "namespaceSelector": {}}]},
            r"^relatedResources\[1\]: names cannot be combined with a selector$",
        ),
    ],
)
def test_bad_customize_responses_are_refused(resp: dict[str, Any], message: str) -> None:
    with pytest.raises(contract.BadHookResponse, match=message):
        contract.check_customize_response(resp)


def test_admission_responses_are_admission_reviews_with_a_uid_and_a_boolean_verdict() -> None:
    resp = {**REVIEW, "response": {"uid": "r-1", "allowed": False, "status": {"message": "no"}}}
    assert contract.check_admission_response(resp) is resp
    for bad in (
        {**REVIEW, "apiVersion": "admission.k8s.io/v1beta1", "response": {"uid": "r", "allowed": True}},
        {"apiVersion": "admission.k8s.io/v1", "response": {"uid": "r", "allowed": True}},
        {**REVIEW, "response": {"uid": "r", "allowed": "true"}},
        {**REVIEW, "response": {"uid": "", "allowed": True}},
        {**REVIEW, "response": None},
    ):
        with pytest.raises(contract.BadHookResponse):
            contract.check_admission_response(bad)


def test_check_nesting_passes_what_fits_and_names_the_path_of_what_does_not() -> None:
    contract.check_nesting({"big": 2**70, "x": _nested(MAX_DEPTH - 1)}, "related")  # too big for orjson, not deep
    with pytest.raises(BadHookRequest, match=r"^request\.object nests deeper than 254 levels, at a\.a\.a"):
        contract.check_nesting(_nested(MAX_DEPTH + 1), "request.object")


def test_type_keys_are_kind_dot_api_version() -> None:
    assert contract.TYPE_NODESET == f"NodeSet.{names.API_VERSION}" == "NodeSet.slinky.slurm.net/v1beta1"
    assert (contract.TYPE_STATEFULSET, contract.TYPE_PVC) == ("StatefulSet.apps/v1", "PersistentVolumeClaim.v1")
