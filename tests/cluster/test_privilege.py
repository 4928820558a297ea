"""The least-privilege figure's arithmetic (tests/cluster/privilege.py), on audit events as the lab's API
server writes them (k8s.io/apiserver's JSON log backend)."""

from __future__ import annotations

import json

from tests.cluster.privilege import Grant, grants, unexplained, uses

ACCOUNT = "system:serviceaccount:slinky:slurm-operator-slurm-sync"
ROLE = {"kind": "ClusterRole", "rules": [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
]}  # fmt: skip


def event(user: str, verb: str, resource: str, group: str = "", sub: str = "", code: int = 200) -> str:
    ref = {"resource": resource, "namespace": "slurm", "apiGroup": group, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    head = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "stage": "ResponseComplete"}
    return json.dumps({**head, "verb": verb, "user": {"username": user}, "objectRef": ref,
                       "responseStatus": {"code": code}})  # fmt: skip


def test_grants_minus_uses_is_what_the_account_never_asked_for() -> None:
    log = [
        event(ACCOUNT, "list", "pods"), event(ACCOUNT, "watch", "pods"), event(ACCOUNT, "patch", "pods", sub="status"),
        event("system:serviceaccount:slurm:other", "get", "pods"),  # someone else's
        event(ACCOUNT, "delete", "nodes", code=403),  # asked, refused: a use, not a grant
        json.dumps({"verb": "get", "user": {"username": ACCOUNT}, "requestURI": "/api"}),  # no object: discovery
        "",
    ]  # fmt: skip
    used = uses(log, ACCOUNT)
    assert used == {Grant("list", "pods", ""), Grant("watch", "pods", ""), Grant("patch", "pods/status", ""),
                    Grant("delete", "nodes", "")}  # fmt: skip
    unused = grants([ROLE]) - used
    assert sorted(map(str, unused)) == ["create events.events.k8s.io", "get pods", "patch pods"]


def test_an_unused_grant_must_be_named_in_the_document() -> None:
    unused = {Grant("create", "events", "events.k8s.io"), Grant("patch", "pods/status", "")}
    doc = "| `create events.events.k8s.io` | only when a pod is deleted by hand |"
    assert unexplained(unused, doc) == [Grant("patch", "pods/status", "")]
    assert str(Grant("patch", "pods/status", "")) == "patch pods/status"
