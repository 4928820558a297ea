"""Small helpers over the official client for the tests against the real API server."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fixtures.slurm import wait_for
from tests.support.kube import load_yaml_docs

Obj = dict[str, Any]
GROUP, VERSION = "slinky.slurm.net", "v1beta1"
METACONTROLLER = "metacontroller.k8s.io"
CERT_MANAGER = "cert-manager.io"


def error_text(exc: ApiException) -> str:
    """The server's message and every cause as ``field: message`` (one string to search)."""
    body = json.loads(exc.body or "{}")
    causes = (body.get("details") or {}).get("causes") or []
    return "\n".join([body.get("message", ""), *(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)])


def rejection(call: Callable[[], Any]) -> tuple[int, str]:
    """Run a write that must fail; its HTTP status and error text (AssertionError if it succeeded)."""
    try:
        call()
    except ApiException as exc:
        return exc.status, error_text(exc)
    raise AssertionError("the API server accepted what it should have rejected")


def apply_crds(api: client.ApiClient, paths: list) -> list[str]:
    """Create (or replace) every CRD in the files; their names."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in paths:
        for crd in load_yaml_docs(path):
            name = crd["metadata"]["name"]
            try:
                current = ext.read_custom_resource_definition(name)
                assert current.metadata is not None  # the server always returns metadata
                crd["metadata"]["resourceVersion"] = current.metadata.resource_version
                ext.replace_custom_resource_definition(name, crd)  # type: ignore[arg-type]  # the client takes dicts too
            except ApiException as exc:
                if exc.status != 404:
                    raise
                ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]  # the client takes dicts too
            names.append(name)
    return names


def conditions(api: client.ApiClient, crd_name: str) -> dict[str, str]:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(crd_name)
    assert crd.status is not None  # the server always returns a CRD's status
    return {c.type: c.status for c in (crd.status.conditions or [])}


def plural(kind: str) -> str:
    return {
        "Accounting": "accountings",
        "Controller": "controllers",
        "LoginSet": "loginsets",
        "NodeSet": "nodesets",
        "RestApi": "restapis",
        "Token": "tokens",
    }[kind]


def create_cr(api: client.ApiClient, obj: Obj, namespace: str, dry_run: bool = False) -> Obj:
    """Create a custom resource with strict field validation (as kubectl and helm do)."""
    extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural(obj["kind"]), obj, field_validation="Strict", **extra
    )
    return cast(Obj, created)  # the decoded JSON object the server answered


def stand_in_crd(group: str, version: str, kind: str, plural: str, scope: str = "Cluster") -> Obj:
    """A CRD that serves a third party's kind (Metacontroller's, cert-manager's: not shipped with this
    project) with any content: the kind exists, its content is checked elsewhere (our schemas)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # *.k8s.io groups are protected; Metacontroller's own CRDs carry the same annotation
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {"api-approved.kubernetes.io": "unapproved, request not yet submitted"},
        },
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def ensure_crds(api: client.ApiClient, crds: list[Obj]) -> None:
    """Create each CRD that does not exist yet and wait until it is Established."""
    ext = client.ApiextensionsV1Api(api)
    for crd in crds:
        name = crd["metadata"]["name"]
        if not ext.list_custom_resource_definition(field_selector=f"metadata.name={name}").items:
            ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]  # the client takes dicts too
        wait_for(
            functools.partial(conditions, api, name),
            lambda c: c.get("Established") == "True",
            what=f"{name} Established",
        )
