"""RestApi → slurmrestd Deployment and Service (hooks/restapi.py), through HTTP and as pure functions."""

from __future__ import annotations

import pytest

from hooks import restapi
from hooks.app import create_app
from hooks.contract import parse_composite
from slinky_common import names
from tests.hooks.kinds.restapi import controller, restapi_cr, sync
from tests.support.hooks import as_observed, assert_invalid_spec, by_kind, condition_of, cr, related, request
from tests.support.kube import validate_builtin


@pytest.fixture()
def client():
    return create_app().test_client()


def container(response: dict) -> dict:
    return by_kind(response)["Deployment/slurm-restapi"]["spec"]["template"]["spec"]["containers"][0]


def test_children_validate_strictly_and_match_the_childresource_rules(client):
    parent = restapi_cr(
        replicas=2,
        slurmrestd={"args": ["-vv"], "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "1"}}},
        template={"metadata": {"labels": {"team": "hpc"}}, "spec": {"nodeSelector": {"pool": "cpu"}}},
        service={"nodePort": 32500, "spec": {"type": "NodePort", "externalIPs": ["1.2.3.4"]}},
    )
    resp = sync(client, parent, rel=related(controller()))
    assert sorted(by_kind(resp)) == ["Deployment/slurm-restapi", "Service/slurm-restapi"]
    for child in resp["children"]:
        assert validate_builtin(child) == []
        assert (child["apiVersion"], child["kind"]) in {("apps/v1", "Deployment"), ("v1", "Service")}


def test_args_limit_slurmrestd_to_slurmctld_only_without_accounting(client):
    without = container(sync(client, restapi_cr(), rel=related(controller())))
    with_acct = container(sync(client, restapi_cr(), rel=related(controller(accountingRef={"name": "acct"}))))
    user_args = container(sync(client, restapi_cr(slurmrestd={"args": ["-vv"]}), rel=related(controller())))
    assert without["args"] == ["-s", "openapi/slurmctld", "0.0.0.0:6820"]
    assert with_acct["args"] == ["0.0.0.0:6820"]
    assert user_args["args"] == ["-s", "openapi/slurmctld", "-vv", "0.0.0.0:6820"]


def test_deployment_runs_as_nobody_with_jwt_daemon_and_the_controllers_config():
    req = parse_composite(request(restapi_cr(replicas=3), rel=related(controller())), "RestApi")
    deployment = by_kind(restapi.sync(req))["Deployment/slurm-restapi"]
    pod = deployment["spec"]["template"]
    main = pod["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "fsGroup": 65534,
    }
    assert main["securityContext"]["runAsUser"] == 65534
    assert {"name": "SLURM_JWT", "value": "daemon"} in main["env"]
    assert main["ports"] == [{"name": "slurmrestd", "containerPort": 6820, "protocol": "TCP"}]
    assert {p: main[p]["tcpSocket"] for p in ("startupProbe", "livenessProbe", "readinessProbe")} == {
        p: {"port": "slurmrestd"} for p in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    (volume,) = pod["spec"]["volumes"]
    assert volume["projected"]["sources"] == [
        {"configMap": {"name": "slurm-config", "items": [{"key": "slurm.conf", "path": "slurm.conf"}]}},
        {"secret": {"name": "slurm-auth", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
    ]
    assert pod["metadata"]["annotations"][names.ANNOTATION_DEFAULT_CONTAINER] == "slurmrestd"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_template_and_container_overrides_merge_over_ours(client):
    parent = restapi_cr(
        slurmrestd={
            "image": "my/slurmrestd:1",
            "env": [{"name": "SLURM_JWT", "value": "daemon"}, {"name": "X", "value": "y"}],
        },
        template={"metadata": {"labels": {"team": "hpc"}}, "spec": {"nodeSelector": {"pool": "cpu"}}},
    )
    deployment = by_kind(sync(client, parent, rel=related(controller())))["Deployment/slurm-restapi"]
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    assert main["image"] == "my/slurmrestd:1"
    assert [e["name"] for e in main["env"]] == ["SLURM_JWT", "SLURMRESTD_SECURITY", "X"]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "hpc"
    assert deployment["metadata"]["labels"]["team"] == "hpc"


def test_service_port_node_port_and_selector():
    parent = restapi_cr(service={"nodePort": 32500, "spec": {"externalIPs": ["1.2.3.4"]}})
    svc = by_kind(restapi.sync(parse_composite(request(parent, rel=related(controller())), "RestApi")))[
        "Service/slurm-restapi"
    ]
    assert svc["spec"] == {
        "selector": {names.LABEL_NAME: "slurmrestd", names.LABEL_INSTANCE: "slurm"},
        "ports": [
            {"name": "slurmrestd", "port": 6820, "targetPort": "slurmrestd", "protocol": "TCP", "nodePort": 32500}
        ],
    }


def test_same_request_gives_the_same_bytes_and_feedback_is_a_fixed_point(client):
    body = request(restapi_cr(slurmrestd={"args": ["-vv"]}), rel=related(controller()))
    first, second = client.post("/restapi/sync", json=body), client.post("/restapi/sync", json=body)
    assert first.status_code == 200 and first.data == second.data
    desired = first.get_json()["children"]
    again = sync(
        client, body["parent"], children=as_observed(desired, {"replicas": 1, "readyReplicas": 1}), rel=body["related"]
    )
    assert again["children"] == desired
    assert condition_of(again, names.CONDITION_AVAILABLE)["status"] == "True"


def test_missing_controller_keeps_the_existing_deployment_and_explains(client):
    desired = sync(client, restapi_cr(), rel=related(controller()))["children"]
    resp = sync(client, restapi_cr(), children=as_observed(desired))
    assert resp["children"] == desired
    refs = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert (refs["status"], refs["reason"]) == ("False", "ControllerNotFound")
    assert "'slurm'" in refs["message"]
    assert resp["resyncAfterSeconds"] > 0


def test_missing_controller_and_no_deployment_yet_creates_only_the_service(client):
    resp = sync(client, restapi_cr())
    assert sorted(by_kind(resp)) == ["Service/slurm-restapi"]
    assert condition_of(resp, names.CONDITION_AVAILABLE)["reason"] == "NotCreated"


def test_customize_asks_for_the_controller_by_name(client):
    resp = client.post("/restapi/customize", json={"parent": restapi_cr()})
    assert resp.get_json() == {
        "relatedResources": [
            {"apiVersion": names.API_VERSION, "resource": "controllers", "namespace": "slurm", "names": ["slurm"]}
        ]
    }


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({}, "spec.controllerRef.name is required"),
        ({"controllerRef": {"name": "slurm"}, "replicas": "three"}, "spec.replicas"),
        ({"controllerRef": {"name": "slurm"}, "replicas": -1}, "spec.replicas"),
        ({"controllerRef": {"name": "slurm"}, "slurmrestd": {"args": "-vv"}}, "spec.slurmrestd.args"),
        ({"controllerRef": {"name": "slurm"}, "template": []}, "spec.template"),
    ],
)
def test_invalid_spec_is_a_condition_naming_the_field_and_changes_nothing(client, spec, needle):
    for rel in (related(controller()), {}):
        assert_invalid_spec(client, "restapi", restapi_cr(), cr("RestApi", "slurm", spec), rel, needle)


def test_invalid_value_in_the_related_controller_keeps_the_deployment_and_says_where(client):
    applied = sync(client, restapi_cr(), rel=related(controller()))
    bad = related(controller(slurmKeyRef={"name": "slurm-auth"}))
    resp = sync(client, restapi_cr(), as_observed(applied["children"]), bad)
    assert sorted(resp["children"], key=str) == sorted(applied["children"], key=str)
    assert (
        "related Controller 'slurm' spec.slurmKeyRef.key" in condition_of(resp, names.CONDITION_INVALID_SPEC)["message"]
    )


@pytest.mark.parametrize("path", ["/restapi/sync", "/restapi/customize"])
def test_a_request_that_is_not_a_hook_request_is_still_a_400(client, path):
    parent = restapi_cr()
    del parent["metadata"]["namespace"]
    resp = client.post(path, json=request(parent))
    assert resp.status_code == 400 and "parent.metadata.namespace" in resp.get_json()["error"]
    wrong_kind = client.post(path, json=request(cr("Token", "slurm", {})))
    assert wrong_kind.status_code == 400 and "parent.kind" in wrong_kind.get_json()["error"]
