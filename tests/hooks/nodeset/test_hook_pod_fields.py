"""Worker pod fields the API server would refuse (hooks/podschema.py) are an InvalidSpec before any pod is condemned.

Slinky's CRD keeps `slurmd`, `logfile` and `template` open, so `slurmd.imagePullPolicy: Sometimes` reaches the
hook; a rollout to it once drained the old pods for a new pod Kubernetes would never create. Now the sync
answers with every pod kept as last applied, no drain intent, no new pod, and a condition naming the field.
"""

from __future__ import annotations

import json

import pytest

from hooks import podschema
from slinky_common import names
from tests.hooks.nodeset.builders import children, condition, draining, node, nodeset, observed, post, request, sync

REFUSED = [
    (
        {"slurmd": {"imagePullPolicy": "Sometimes"}},
        'spec.containers[0] (container "slurmd").imagePullPolicy: Unsupported value: "Sometimes": '
        'supported values: "Always", "IfNotPresent", "Never"',
    ),
    (
        {"template": {"spec": {"containers": [{"name": "slurmd", "imagePullPolicy": "Sometimes"}]}}},
        'spec.containers[0] (container "slurmd").imagePullPolicy: Unsupported value: "Sometimes"',
    ),
    (
        {"slurmd": {"resources": {"limits": {"memory": "4 Gi"}}}},
        'spec.containers[0] (container "slurmd").resources.limits.memory: Invalid value: "4 Gi": quantities must',
    ),
    (
        {"slurmd": {"ports": [{"containerPort": 99999}]}},
        'spec.containers[0] (container "slurmd").ports[1].containerPort: Invalid value: 99999: '
        "must be between 1 and 65535, inclusive",
    ),
    (
        {"logfile": {"imagePullPolicy": "Sometimes"}},
        'spec.initContainers[0] (container "logfile").imagePullPolicy: Unsupported value: "Sometimes"',
    ),
    ({"template": {"spec": {"restartPolicy": "Sometimes"}}}, 'spec.restartPolicy: Unsupported value: "Sometimes"'),
]


def running(client, **spec) -> tuple[dict, list[dict]]:
    """Two idle worker pods of the current revision, as Metacontroller shows them, and the NodeSet's status."""
    first = sync(client, request(nodeset(replicas=2, **spec)))
    pods = [observed(p) for p in children(first).values()]
    steady = sync(client, request(nodeset(status=first["status"], replicas=2, **spec), pods=pods))
    assert draining(steady) == {} and sorted(children(steady)) == ["gpu-0", "gpu-1"]
    return steady["status"], pods


def last_applied(obj: dict) -> dict:
    return json.loads(obj["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED])


@pytest.mark.parametrize(("spec", "problem"), REFUSED)
def test_refused_pod_fields_condemn_no_pod_and_create_none(client, spec, problem):
    status, pods = running(client)
    parent = nodeset(status=status, replicas=2, **spec)
    resp = post(client, "/nodeset/sync", request(parent, pods=pods), nodeset())
    assert resp["children"] == [last_applied(p) for p in pods], "every pod kept exactly as last applied"
    assert draining(resp) == {}, "no pod condemned"
    invalid = condition(resp, names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and problem in invalid["message"], invalid["message"]
    assert invalid["message"].startswith("the API server would refuse this NodeSet's pods (set in spec.template")
    ready = condition(resp, names.CONDITION_READY)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert {k: v for k, v in resp["status"].items() if k != "conditions"} == {
        k: v for k, v in status.items() if k != "conditions"
    }
    assert resp["resyncAfterSeconds"] == 30


def test_both_refused_fields_are_named_and_the_fix_starts_the_rollout(client):
    status, pods = running(client)
    bad = {"slurmd": {"imagePullPolicy": "Sometimes", "ports": [{"containerPort": 0}]}}
    resp = post(client, "/nodeset/sync", request(nodeset(status=status, replicas=2, **bad), pods=pods), nodeset())
    message = condition(resp, names.CONDITION_INVALID_SPEC)["message"]
    assert "imagePullPolicy" in message and "ports[1].containerPort: Invalid value: 0" in message
    fixed_parent = nodeset(status=resp["status"], replicas=2, slurmd={"imagePullPolicy": "Always"})
    fixed = sync(client, request(fixed_parent, pods=pods))
    assert names.CONDITION_INVALID_SPEC not in {c["type"] for c in fixed["status"]["conditions"]}
    assert list(draining(fixed).values()) == [f"rolling update to revision {fixed['status']['nodeSetHash']}"]


def test_a_new_nodeset_with_refused_fields_creates_no_pod(client):
    resp = post(client, "/nodeset/sync", request(nodeset(replicas=3, slurmd={"imagePullPolicy": "Sometimes"})))
    assert children(resp) == {} and "imagePullPolicy" in condition(resp, names.CONDITION_INVALID_SPEC)["message"]


def test_a_daemonset_mode_nodeset_keeps_its_pods_too(client):
    nodes = [node("node-a"), node("node-b")]
    first = sync(client, request(nodeset(scalingMode="DaemonSet"), nodes=nodes))
    pods = [observed(p, node_name=p["metadata"]["name"].removeprefix("gpu-")) for p in children(first).values()]
    assert len(pods) == 2
    parent = nodeset(status=first["status"], scalingMode="DaemonSet", slurmd={"imagePullPolicy": "Sometimes"})
    resp = post(client, "/nodeset/sync", request(parent, pods=pods, nodes=nodes), nodeset())
    assert resp["children"] == [last_applied(p) for p in pods] and draining(resp) == {}
    assert "imagePullPolicy" in condition(resp, names.CONDITION_INVALID_SPEC)["message"]


def test_a_steady_sync_merges_and_checks_no_template(client, monkeypatch):
    """Nothing to create or replace: the template is not even merged (a steady resync stays as cheap as it was)."""
    status, pods = running(client)

    def refuse(*args, **kwargs):
        raise AssertionError("a steady sync checked the pod template")

    monkeypatch.setattr(podschema, "template_problems", refuse)
    resp = sync(client, request(nodeset(status=status, replicas=2), pods=pods))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"] and draining(resp) == {}
