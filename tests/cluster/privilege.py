"""The least-privilege figure of the cluster lab: which of slurm_sync's grants no request of it used.

The operator chart gives slurm_sync's ServiceAccount a ClusterRole and a Role (tests/charts/test_rbac.py derives
them from the code's calls); the lab's API server writes an audit event for every request a ServiceAccount
makes (hack/cluster/audit-policy.yaml). Grants minus uses, over a whole run of the cluster lab's tests, is what
the account may do and never did there: each such grant must be explained in docs/operations.md (a path the
lab's tests do not take), else it is a grant to take away.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

Obj = dict[str, Any]


class Grant(NamedTuple):
    verb: str
    resource: str  # with its subresource: pods/status
    group: str

    def __str__(self) -> str:
        """kubectl's spelling: `patch pods/status`, `create events.events.k8s.io`."""
        resource, _, sub = self.resource.partition("/")
        name = f"{resource}.{self.group}" if self.group else resource
        return f"{self.verb} {name}{'/' + sub if sub else ''}"


def grants(roles: Iterable[Obj]) -> set[Grant]:
    """Every (verb, resource, group) the rules of these Roles and ClusterRoles name (no wildcards: the charts
    have none, tests/charts/test_rbac.py)."""
    out = set()
    for role in roles:
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    out |= {Grant(verb, resource, group) for verb in rule.get("verbs") or []}
    return out


def uses(audit_lines: Iterable[str], user: str) -> set[Grant]:
    """What the user's requests asked for, from the API server's audit events (allowed or not)."""
    out = set()
    for line in audit_lines:
        if not line.strip():
            continue
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (event.get("user") or {}).get("username") != user or not ref.get("resource"):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.add(Grant(event["verb"], resource, ref.get("apiGroup") or ""))
    return out


def unexplained(unused: Iterable[Grant], doc: str) -> list[Grant]:
    """The unused grants the document does not name (as `verb resource`, in backquotes)."""
    return sorted(g for g in unused if f"`{g}`" not in doc)
