"""Quantities Slurm cannot hold (issue 22, part 5): the admission webhook refuses them naming the container
and the field; a pod admitted anyway gets a 200 whose job-error names the problem, and no placeholder job."""

from __future__ import annotations

import json

import pytest

from hooks.app import create_app
from slinky_common import names, quantity
from tests.hooks.bridge.builders import body, container, obj, owner_ref, pod, request, slurmjob

PLACEHOLDER, ERROR = names.ANNOTATION_PLACEHOLDER_JOB, names.ANNOTATION_JOB_ERROR
DRA_GPU = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
HUGE = [
    pytest.param({"requests": {"cpu": "1e20"}}, "requests.cpu", "at most 65533", id="cpu-1e20"),
    pytest.param({"limits": {"memory": "1e30"}}, "limits.memory", "at most 9223372036854775807", id="memory-1e30"),
    pytest.param({"limits": {"nvidia.com/gpu": "1e19"}}, "limits.nvidia.com/gpu", "at most", id="plugin-gpus"),
    pytest.param({"limits": {DRA_GPU: "1e19"}}, f"limits.{DRA_GPU}", "at most", id="dra-gpus"),
    pytest.param({"requests": {"cpu": "65534"}}, "requests.cpu", "at most 65533", id="cpu-one-past-uint16"),
    pytest.param({"requests": {"cpu": "1e2000000000"}}, "requests.cpu", "larger than any amount", id="cpu-1e2e9"),
]


@pytest.fixture(scope="module")
def client():
    return create_app().test_client()


def admission(client, target):
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": target["metadata"]["namespace"], "object": target},
    }
    resp = client.post("/bridge/admission/validate", json=review)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["response"]


def sync(client, target, *rel):
    resp = client.post("/bridge/pod/sync", json=body(request(target, *rel)))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["annotations"]


def asking(resources):
    return pod(containers=[{"name": "main", "image": "busybox", "resources": resources}])


@pytest.mark.parametrize(("resources", "field", "bound"), HUGE)
def test_admission_refuses_a_quantity_slurm_cannot_hold_naming_container_and_field(client, resources, field, bound):
    response = admission(client, asking(resources))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert f"container 'main': resources.{field}" in message and bound in message, message


def test_admission_refuses_a_pod_whose_containers_together_exceed_the_bound(client):
    target = pod(containers=[container("a", requests={"cpu": "40000"}), container("b", requests={"cpu": "40000"})])
    response = admission(client, target)
    assert response["allowed"] is False
    assert "requests.cpu totals 80000 CPUs" in response["status"]["message"], response["status"]


def test_admission_leaves_hugepages_and_ephemeral_storage_to_kubernetes(client):
    """They never reach a Slurm number, so Slurm's bounds do not apply to them."""
    resources = {"requests": {"hugepages-2Mi": "1e30", "ephemeral-storage": "1e30"}}
    assert admission(client, asking(resources))["allowed"] is True


@pytest.mark.parametrize(("resources", "field", "bound"), HUGE)
def test_pod_sync_of_an_admitted_pod_reports_the_quantity_and_publishes_no_job(client, resources, field, bound):
    out = sync(client, asking(resources))
    assert out[PLACEHOLDER] is None and out[names.ANNOTATION_PLACEHOLDER_GROUP] is None
    assert "slurm-bridge/p" in out[ERROR] and bound in out[ERROR], out[ERROR]


def test_pod_sync_withdraws_the_job_a_pod_published_before_its_group_grew_past_the_bound(client):
    target = asking({"requests": {"memory": "1e30"}})
    target["metadata"]["annotations"] = {PLACEHOLDER: "{}", names.ANNOTATION_PLACEHOLDER_GROUP: "Pod/ns/p"}
    out = sync(client, target)
    assert out[PLACEHOLDER] is None and "requests.memory" in out[ERROR]


@pytest.mark.parametrize("annotation", ["cpu-per-task", "mem-per-node"])
def test_a_job_annotation_slurm_cannot_hold_is_named(client, annotation):
    out = sync(client, pod(annotations=slurmjob(**{annotation.replace("-", "_"): "1e30"})))
    assert out[PLACEHOLDER] is None and f"slurmjob.slinky.slurm.net/{annotation}='1e30'" in out[ERROR]


def test_a_job_template_limit_slurm_cannot_hold_names_the_job(client):
    limits = {"template": {"spec": {"resources": {"limits": {"cpu": "1e20"}}}}}
    job = obj("batch/v1", "Job", "j", spec=limits)
    out = sync(client, pod(owner=owner_ref(job)), job)
    assert out[PLACEHOLDER] is None and "Job slurm-bridge/j spec.template.spec.resources.limits" in out[ERROR]


def test_the_largest_values_slurm_holds_still_make_a_job(client):
    out = sync(client, asking({"requests": {"cpu": str(quantity.MAX_CPUS)}, "limits": {"nvidia.com/gpu": "8"}}))
    job = json.loads(out[PLACEHOLDER])
    assert job["cpus_per_task"] == quantity.MAX_CPUS and job["tres_per_node"] == "gres/gpu=8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e2000000000", "larger than any amount Slurm can hold"),  # building it exactly took minutes
        ("1" * 5000, "larger than any amount Slurm can hold"),  # beyond int()'s 4,300 digits: a ValueError
        ("1e12345678901", "not a Kubernetes quantity"),  # Kubernetes reads the exponent as int32
    ],
)
def test_parse_refuses_text_too_large_to_build_exactly(text, message):
    with pytest.raises(quantity.BadQuantity, match=message):
        quantity.parse(text)


def test_parse_rounds_a_tiny_non_zero_value_to_a_nano_as_kubernetes_does():
    assert quantity.parse("0." + "0" * 5000 + "1") == quantity.NANO
    assert quantity.cpus(quantity.parse("1e-40")) == 1
