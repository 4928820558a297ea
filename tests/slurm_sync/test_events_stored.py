"""slurm_sync's Events against a real Kubernetes API server (tests/kube/plugin.py): the server accepts
the events.k8s.io/v1 bodies events.py builds (Normal on a pod, Warning on a NodeSet, a note at the
size limit), stores what we sent, and a repeat within the rate limit reaches it not at all."""

from __future__ import annotations

import pytest
from kubernetes import client

from slinky_common.names import API_VERSION
from slurm_sync.events import MAX_NOTE, REPORTING_CONTROLLER, Events, Notice, nodeset_ref, pod_ref
from slurm_sync.kube import Kube

pytestmark = pytest.mark.kube


def stored(kube_api: client.ApiClient, namespace: str) -> list[dict]:
    events = client.EventsV1Api(kube_api).list_namespaced_event(namespace)
    return [client.ApiClient().sanitize_for_serialization(e) for e in events.items]


def test_the_api_server_takes_our_events_and_a_repeat_within_the_limit_is_not_sent(
    kube_api: client.ApiClient, kube_namespace: str
) -> None:
    events = Events(Kube(kube_api), instance="slurm-sync-0")
    drained = Notice("Normal", "SlurmNodeDrained", "Slurm reports node n3 drained.", "Mark")
    assert events.notify(pod_ref(kube_namespace, "gpu-0", "uid-gpu-0"), drained)
    assert events.warn(nodeset_ref(kube_namespace, "gpu"), "PendingJobCancelled", "x" * (MAX_NOTE + 100), "CancelJob")
    assert not events.notify(pod_ref(kube_namespace, "gpu-0", "uid-gpu-0"), drained)  # within the limit
    by_reason = {e["reason"]: e for e in stored(kube_api, kube_namespace)}
    assert sorted(by_reason) == ["PendingJobCancelled", "SlurmNodeDrained"]
    pod_event = by_reason["SlurmNodeDrained"]
    assert (pod_event["type"], pod_event["action"], pod_event["note"]) == ("Normal", "Mark", drained.note)
    assert pod_event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": kube_namespace,
        "name": "gpu-0",
        "uid": "uid-gpu-0",
    }
    assert (pod_event["reportingController"], pod_event["reportingInstance"]) == (REPORTING_CONTROLLER, "slurm-sync-0")
    nodeset_event = by_reason["PendingJobCancelled"]
    assert nodeset_event["type"] == "Warning" and len(nodeset_event["note"]) == MAX_NOTE
    assert (nodeset_event["regarding"]["kind"], nodeset_event["regarding"]["apiVersion"]) == ("NodeSet", API_VERSION)
