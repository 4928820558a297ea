"""The bridge loop's views of pods and Nodes (slurm_sync/bridge/view.py): every field read from where the
apiserver writes it, and an object that cannot be read in part still shown with that part blank."""

from __future__ import annotations

import datetime

import pytest

from slinky_common import names
from slurm_sync.bridge.devices import ContainerRequest, PodClaimStatus, RequestMapping
from slurm_sync.bridge.view import BridgeNode, BridgePod, parse_time, read_node, read_pod
from tests.slurm_sync.bridgekube import BNS, OUR_TAINT, SCHED, bridge_pod, kube_node
from tests.slurm_sync.drafixtures import NVIDIA, PREFIX, container


def test_every_field_of_a_pod_is_read_from_where_the_apiserver_writes_it() -> None:
    annotations = {
        names.ANNOTATION_PLACEHOLDER_JOB: "{}",
        names.ANNOTATION_PLACEHOLDER_GROUP: "G",
        names.ANNOTATION_PLACEHOLDER_APPLIED: "d1",
        names.ANNOTATION_JOB_RELEASED: "41",
        names.ANNOTATION_SLURM_NODE: "kn1",
        names.ANNOTATION_SUBMIT_ERROR: "why",
    }
    obj = bridge_pod("train-0", job_id=42, node_name="kn1", phase="Running", uid="u-1", pod_group="pg",
                     finalizers=["other", names.FINALIZER_SCHEDULER], annotations=annotations)  # fmt: skip
    obj["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"
    obj["spec"]["containers"] = [container("main", nvidia="2")]
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "claim-1",
        "requestMappings": [{"containerName": "main", "resourceName": PREFIX + NVIDIA, "requestName": "gpu"}],
    }
    assert read_pod(obj) == BridgePod(
        namespace=BNS,
        name="train-0",
        uid="u-1",
        resource_version="5",
        scheduler=SCHED,
        phase="Running",
        node_name="kn1",
        deletion=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        job_id=42,
        job_body="{}",
        group="G",
        applied="d1",
        released="41",
        slurm_node="kn1",
        finalizers=("other", names.FINALIZER_SCHEDULER),
        pod_group="pg",
        submit_error="why",
        devices=(ContainerRequest("main", PREFIX + NVIDIA, "2"),),
        claim_status=PodClaimStatus("claim-1", (RequestMapping("main", PREFIX + NVIDIA, "gpu"),)),
    )


def test_an_empty_object_is_still_a_pod_with_every_part_blank() -> None:
    assert read_pod({}) == BridgePod(
        namespace="",
        name="",
        uid="",
        resource_version="",
        scheduler="",
        phase="",
        node_name="",
        deletion=None,
        job_id=None,
        job_body=None,
        group=None,
        applied=None,
        released=None,
        slurm_node=None,
        finalizers=(),
    )
    nulls = {"metadata": {"name": "p", "labels": None, "annotations": None, "finalizers": None}, "spec": None,
             "status": None}  # fmt: skip
    assert (read_pod(nulls).name, read_pod(nulls).job_id, read_pod(nulls).devices) == ("p", None, ())


@pytest.mark.parametrize(("label", "job_id"), [("7", 7), ("007", 7), ("", None), ("7a", None), ("-7", None),
                                               ("7.0", None), (" 7", None)])  # fmt: skip
def test_a_job_id_label_that_is_not_a_number_is_no_job_id_and_the_pod_is_kept(label: str, job_id: int | None) -> None:
    obj = bridge_pod("p")
    obj["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = label
    pod = read_pod(obj)
    assert (pod.name, pod.job_id) == ("p", job_id)


def test_a_pod_without_a_scheduling_group_name_has_no_pod_group_and_its_key_is_namespace_and_name() -> None:
    obj = bridge_pod("p", ns="team-a")
    obj["spec"]["schedulingGroup"] = {"podGroupName": ""}
    pod = read_pod(obj)
    assert (pod.pod_group, pod.key) == (None, "team-a/p")


def test_times_are_read_with_their_zone_and_an_absent_time_is_none() -> None:
    assert parse_time("2026-01-02T03:04:05Z") == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    shifted = parse_time("2026-01-02T04:04:05+01:00")
    assert shifted == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC) and shifted.utcoffset() is not None
    assert parse_time(None) is None and parse_time("") is None


def test_every_field_of_a_node_is_read_and_its_slurm_name_is_the_label_else_its_own_name() -> None:
    other = {"key": "x", "effect": "NoSchedule"}
    registration = {"name": "ext1", "cpus": 2}
    obj = kube_node("kn1", slurm_name="n1", taint=True, drain="slurm-bridge: cordoned", taints=[other, OUR_TAINT],
                    registration=registration, registered="ext1")  # fmt: skip
    assert read_node(obj) == BridgeNode(
        name="kn1",
        slurm_name="n1",
        resource_version="3",
        taints=(other, OUR_TAINT),
        desired_taint=f"{names.TAINT_MANAGED_NODE}={SCHED}:NoExecute",
        drain_reason="slurm-bridge: cordoned",
        registration='{"cpus":2,"name":"ext1"}',
        registered="ext1",
        bridge=True,
    )
    plain = read_node(kube_node("kn2"))
    assert (plain.slurm_name, plain.taints, plain.desired_taint, plain.registration) == ("kn2", (), None, None)


def test_only_a_bridge_worker_or_an_external_node_takes_bridge_pods() -> None:
    def labelled(labels: dict[str, str]) -> bool:
        return read_node({"metadata": {"name": "k", "labels": labels}, "spec": {}}).bridge

    assert labelled({names.LABEL_BRIDGE_WORKER: ""}) and labelled({names.LABEL_EXTERNAL_NODE: "true"})
    assert not labelled({}) and not labelled({names.LABEL_SLURM_NODE_NAME: "n1"})
    assert read_node({}) == BridgeNode("", "", "", (), None, None, None, None, False)
