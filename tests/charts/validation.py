"""Strict validation of every rendered document by what it is: a built-in kind (Kubernetes 1.33
schemas), one of our custom resources (crds/), a Metacontroller kind (tests/compositecontrollers'
schema) or a third-party kind we render (thirdparty_schemas.yaml). Anything else is a problem."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.compositecontrollers.manifests import load_schema
from tests.support.kube import validate_builtin, validate_cr

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.33"
THIRD_PARTY = Path(__file__).with_name("thirdparty_schemas.yaml")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@functools.cache
def _metacontroller() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema())


@functools.cache
def _third_party(kind: str) -> jsonschema.Draft202012Validator:
    schemas = yaml.safe_load(THIRD_PARTY.read_text())
    schema = {"$schema": schemas["$schema"], "$defs": schemas["$defs"], **schemas[kind]}
    return jsonschema.Draft202012Validator(schema)


def _schema_errors(validator: jsonschema.Draft202012Validator, obj: Obj) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(obj)]


def webhook_path_errors(obj: Obj) -> list[str]:
    """The API server's check of clientConfig.service.path (kubernetes-validate's schema has none):
    every segment a DNS-1123 subdomain, so no query string."""
    errors = []
    for i, hook in enumerate(obj.get("webhooks") or []):
        path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path")
        if path in (None, "", "/"):
            continue
        segments = path[1:].removesuffix("/").split("/") if path.startswith("/") else [path]
        if not path.startswith("/") or not all(len(s) <= 253 and DNS1123_SUBDOMAIN.fullmatch(s) for s in segments):
            errors.append(f"webhooks.{i}.clientConfig.service.path: {path!r} is not a path of DNS-1123 segments")
    return errors


def validate(obj: Obj) -> list[str]:
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.rpartition("/")[0]
    if group == "slinky.slurm.net":
        return validate_cr(obj, REPO / "crds")
    if group == "metacontroller.k8s.io":
        return _schema_errors(_metacontroller(), obj)
    if group in ("monitoring.coreos.com", "cert-manager.io"):
        return _schema_errors(_third_party(str(obj.get("kind"))), obj)
    errors = validate_builtin(obj, K8S_VERSION)
    if obj.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        errors += webhook_path_errors(obj)
    return errors
