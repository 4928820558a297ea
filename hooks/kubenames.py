"""Kubernetes name rules for the children a hook builds, so that no child the API server would refuse is sent.

A CR's own name only has to be a DNS subdomain, but the names derived from it are stricter: a
Service is a DNS-1035 label (`1slurm-controller` starts with a digit, `slurm.prod-controller`
holds a dot), a StatefulSet's pods carry its name plus a revision hash in a 63-character label,
and every label value is at most 63 characters. A child that breaks a rule becomes an InvalidSpec
condition (every existing child kept), never a request the API server rejects on each resync.
"""

from __future__ import annotations

import re
from typing import Any, Final

JSON = dict[str, Any]

MAX_LABEL: Final = 63
MAX_SUBDOMAIN: Final = 253
# `<statefulset>-<revision hash>` is the pods' controller-revision-hash label (hash up to 10 characters).
MAX_STATEFULSET_NAME: Final = MAX_LABEL - 11

_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def name_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot name a `kind`, or None."""
    if kind == "Service":
        ok = len(name) <= MAX_LABEL and _DNS1035_LABEL.fullmatch(name)
        rule = f"a DNS-1035 label (a lower-case letter, then lower-case letters, digits or '-', at most {MAX_LABEL})"
    elif kind == "StatefulSet":
        ok = len(name) <= MAX_STATEFULSET_NAME and _DNS1123_LABEL.fullmatch(name)
        rule = f"a DNS label of at most {MAX_STATEFULSET_NAME} characters (its pods' revision label adds 11)"
    else:
        ok = len(name) <= MAX_SUBDOMAIN and _DNS1123_SUBDOMAIN.fullmatch(name)
        rule = f"a DNS subdomain (lower-case letters, digits, '-' and '.', at most {MAX_SUBDOMAIN} characters)"
    return None if ok else f"{kind} name {name!r} is not {rule}"


def label_problem(key: str, value: str) -> str | None:
    if len(value) <= MAX_LABEL and _LABEL_VALUE.fullmatch(value):
        return None
    return f"label {key}={value!r} is not a label value (at most {MAX_LABEL} letters, digits, '-', '_' or '.')"


def child_problems(child: JSON) -> list[str]:
    """Every rule the child's name, labels and pod template labels break."""
    meta = child.get("metadata") or {}
    problems = [name_problem(child.get("kind") or "", meta.get("name") or "")]
    label_maps = [meta.get("labels") or {}]
    template = (child.get("spec") or {}).get("template")
    if isinstance(template, dict):
        label_maps.append((template.get("metadata") or {}).get("labels") or {})
    problems += [label_problem(k, v) for labels in label_maps for k, v in labels.items()]
    return [p for p in problems if p]
