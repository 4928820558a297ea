"""`kubectl wait --for=condition=Ready` for every kind, on the status the hooks compute.

kubectl waits for `status.conditions[type=Ready].status == "True"`; `wait_for_ready` reads exactly
that. For each kind a healthy example is Ready and an unhealthy one is not, with a reason and a
message that name what to fix. Every status must also pass the CRD's schema.
"""

from __future__ import annotations

import json

import pytest

from hooks import token as token_hook
from slinky_common import names
from tests.hooks.kinds import accounting, controller, loginset, restapi, token
from tests.hooks.nodeset import builders as nodeset
from tests.hooks.nodeset.fixtures import clock  # noqa: F401  (fixture, pins the NodeSet hook's clock)
from tests.support.hooks import as_observed, related
from tests.support.kube import validate_cr

T0 = 1_700_000_000  # 2023-11-14T22:13:20Z, any fixed instant


def wait_for_ready(parent: dict, response: dict) -> dict:
    """The one Ready condition kubectl reads, after checking the status against the CRD."""
    assert validate_cr({**parent, "status": response["status"]}) == []
    ready = [c for c in response["status"]["conditions"] if c["type"] == names.CONDITION_READY]
    assert len(ready) == 1, response["status"]["conditions"]
    assert ready[0]["reason"] and ready[0]["message"], ready[0]
    return ready[0]


def rolled_out(replicas: int, ready: int | None = None, updated: int | None = None) -> dict:
    """A Deployment/StatefulSet status as the workload controllers write it."""
    ready = replicas if ready is None else ready
    updated = replicas if updated is None else updated
    return {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready, "updatedReplicas": updated}


# --- Controller -------------------------------------------------------------------------------------


def test_controller_is_ready_once_every_slurmctld_runs_the_current_template(client):
    parent, rel = controller.controller(), related(*controller.keys())
    first = controller.sync(client, parent, rel=rel)
    assert wait_for_ready(parent, first)["reason"] == "StatefulSetMissing"
    up = controller.sync(client, parent, children=as_observed(first["children"], status=rolled_out(1)), rel=rel)
    ready = wait_for_ready(parent, up)
    assert (ready["status"], ready["reason"]) == ("True", "PodsReady") and "1/1 slurmctld" in ready["message"]


def test_controller_with_a_missing_key_is_not_ready_even_while_its_pods_run(client):
    parent = controller.controller()
    first = controller.sync(client, parent, rel=related(*controller.keys()))
    observed = as_observed(first["children"], status=rolled_out(1))
    resp = controller.sync(client, parent, children=observed, rel=related(controller.keys()[0]))
    ready = wait_for_ready(parent, resp)
    assert (ready["status"], ready["reason"]) == ("False", "MissingReferences")
    assert ready["message"].startswith("ReferencesResolved: missing:") and "jwt-key" in ready["message"], ready[
        "message"
    ]


def test_external_controller_is_ready_as_soon_as_its_references_resolve(client):
    parent = controller.controller(external=True, externalConfig={"host": "ctld.example.org", "port": 6817})
    ready = wait_for_ready(parent, controller.sync(client, parent, rel=related(*controller.keys())))
    assert (ready["status"], ready["reason"]) == ("True", "External") and "ctld.example.org:6817" in ready["message"]


# --- RestApi, LoginSet, Accounting: one workload each -----------------------------------------------


@pytest.mark.parametrize(
    ("status", "generation", "reason", "needle"),
    [
        (rolled_out(2, ready=1), 1, "PodsNotReady", "1/2 slurmrestd pods ready"),
        (rolled_out(2, updated=1), 1, "PodsNotReady", "1/2 updated"),
        (rolled_out(2), 2, "RolloutPending", "Deployment slurm-restapi change not observed yet"),
    ],
)
def test_restapi_is_not_ready_while_its_rollout_is_incomplete(client, status, generation, reason, needle):
    parent, rel = restapi.restapi_cr(replicas=2), related(restapi.controller())
    observed = as_observed(restapi.sync(client, parent, rel=rel)["children"], status=status)
    observed["Deployment.apps/v1"]["slurm/slurm-restapi"]["metadata"]["generation"] = generation
    ready = wait_for_ready(parent, restapi.sync(client, parent, observed, rel))
    assert (ready["status"], ready["reason"]) == ("False", reason) and needle in ready["message"], ready["message"]


def test_restapi_ready_and_without_its_controller(client):
    parent, rel = restapi.restapi_cr(replicas=2), related(restapi.controller())
    observed = as_observed(restapi.sync(client, parent, rel=rel)["children"], status=rolled_out(2))
    ready = wait_for_ready(parent, restapi.sync(client, parent, observed, rel))
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True",
        "PodsReady",
        "2/2 slurmrestd pods ready on the current template",
    )
    orphan = wait_for_ready(parent, restapi.sync(client, parent, observed, {}))
    assert (orphan["status"], orphan["reason"]) == ("False", "ControllerNotFound")
    assert "Controller 'slurm' does not exist" in orphan["message"], orphan["message"]


def test_loginset_ready_and_with_its_sssd_secret_missing(client):
    parent = loginset.loginset_cr(replicas=1)
    first = loginset.sync(client, parent)
    assert wait_for_ready(parent, first)["reason"] == "DeploymentMissing"
    observed = as_observed(first["children"], status=rolled_out(1))
    ready = wait_for_ready(parent, loginset.sync(client, parent, observed))
    assert (ready["status"], ready["reason"]) == ("True", "PodsReady")
    missing = wait_for_ready(parent, loginset.sync(client, parent, observed, loginset.inputs(with_sssd=False)))
    references = next(
        c
        for c in loginset.sync(client, parent, observed, loginset.inputs(with_sssd=False))["status"]["conditions"]
        if c["type"] == names.CONDITION_REFERENCES_RESOLVED
    )
    assert (missing["status"], missing["reason"]) == ("False", references["reason"])
    assert "sssd" in missing["message"], missing["message"]


def test_accounting_ready_missing_password_and_external(client):
    parent = accounting.accounting_cr()
    observed = as_observed(accounting.sync(client, parent)["children"], status=rolled_out(1))
    ready = wait_for_ready(parent, accounting.sync(client, parent, observed))
    assert (ready["status"], ready["reason"]) == ("True", "PodsReady") and "1/1 slurmdbd" in ready["message"]
    missing = wait_for_ready(parent, accounting.sync(client, parent, observed, accounting.secrets(password=None)))
    assert missing["status"] == "False" and "mariadb" in missing["message"], missing
    external = accounting.accounting_cr(external=True, externalConfig={"host": "dbd.example.org", "port": 6819})
    outside = wait_for_ready(external, accounting.sync(client, external))
    assert (outside["status"], outside["reason"]) == ("True", "External") and "dbd.example.org" in outside["message"]


# --- Token -------------------------------------------------------------------------------------------


def test_token_is_ready_once_its_secret_holds_a_token(client, monkeypatch):
    monkeypatch.setattr(token_hook, "now", lambda: T0)
    parent = token.token_cr()
    first = token.sync(client, parent)
    waiting = wait_for_ready(parent, first)
    assert (waiting["status"], waiting["reason"]) == ("False", "SecretNotCreated") and "ci-jwt-alice" in waiting[
        "message"
    ]
    stored = wait_for_ready(parent, token.sync(client, parent, as_observed(first["children"])))
    assert (stored["status"], stored["reason"]) == ("True", "TokenIssued")
    no_key = wait_for_ready(parent, token.sync(client, parent, key=None))
    assert no_key["status"] == "False" and "jwt" in no_key["message"] and no_key["reason"] != "SecretNotCreated", no_key


# --- NodeSet: pods and Slurm's word on each -----------------------------------------------------------


def nodeset_pods(client, replicas: int = 2, **state) -> list[dict]:
    """The NodeSet's pods as Metacontroller shows them,
    with kubelet and slurm_sync state (see test_nodeset.observed)."""
    first = nodeset.sync(client, nodeset.request(nodeset.nodeset(replicas=replicas)))
    return [nodeset.observed(p, **state) for p in nodeset.children(first).values()]


def with_reason(pod: dict, state: str, message: str) -> dict:
    """slurm_sync writes Slurm's reason as the message of the SlurmNodeState<State> condition."""
    for item in pod["status"]["conditions"]:
        if item["type"] == names.CONDITION_SLURM_NODE_STATE_PREFIX + state:
            item["message"] = message
    return pod


def nodeset_ready(client, pods: list[dict], replicas: int = 2, **request) -> dict:
    parent = nodeset.nodeset(replicas=replicas)
    return wait_for_ready(parent, nodeset.sync(client, nodeset.request(parent, pods=pods, **request)))


@pytest.fixture()
def client():
    from hooks.app import create_app

    return create_app().test_client()


@pytest.mark.parametrize("states", [("Idle",), ("Allocated",), ("Mixed", "Completing"), ("Idle", "Maintenance")])
def test_nodeset_is_ready_when_every_pod_is_ready_and_usable_in_slurm(client, states):
    ready = nodeset_ready(client, nodeset_pods(client, slurm=states))
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "True",
        "NodesReady",
        "2/2 pods ready and usable in Slurm",
    )


def test_nodeset_drains_we_asked_for_keep_it_ready(client):
    pods = nodeset_pods(client, slurm=("Idle", "Drain"))
    with_reason(pods[0], "Drain", "slurm-operator: node cordoned")
    with_reason(pods[1], "Drain", "admin: swapping a DIMM")
    pods[1]["metadata"]["annotations"][names.ANNOTATION_POD_CORDON] = "true"
    assert nodeset_ready(client, pods)["status"] == "True"


def test_a_drain_a_health_checker_requested_keeps_the_nodeset_ready(client):
    pods = nodeset_pods(client, slurm=("Idle", "Drain"))
    with_reason(pods[0], "Drain", "slurm-operator: node cordoned")
    with_reason(pods[1], "Drain", "nhc: GPU 3 fell off the bus")
    pods[1]["metadata"]["annotations"][names.ANNOTATION_POD_CORDON_REQUESTED] = "true"
    assert nodeset_ready(client, pods)["status"] == "True"
    del pods[1]["metadata"]["annotations"][names.ANNOTATION_POD_CORDON_REQUESTED]
    assert nodeset_ready(client, pods)["status"] == "False"


def test_nodeset_without_pods_yet_says_how_many_exist(client):
    ready = nodeset_ready(client, [])
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "PodsMissing", "0/2 desired pods exist")


def test_nodeset_with_a_pod_not_ready_names_it(client):
    pods = nodeset_pods(client)
    pods[1] = nodeset.observed(
        json.loads(pods[1]["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]), ready=False
    )
    ready = nodeset_ready(client, pods)
    assert (ready["status"], ready["reason"]) == ("False", "PodsNotReady")
    assert ready["message"] == "1/2 pods running and ready; not ready: gpu-1", ready["message"]


def test_nodeset_with_a_slurm_node_down_names_it_with_slurms_reason(client):
    pods = nodeset_pods(client)
    pods[0] = with_reason(
        nodeset.observed(
            json.loads(pods[0]["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]),
            slurm=("Down", "NotResponding"),
        ),
        "Down",
        "Not responding",
    )
    ready = nodeset_ready(client, pods)
    assert (ready["status"], ready["reason"]) == ("False", "SlurmNodeDown")
    assert ready["message"].startswith("Slurm node DOWN: gpu-0 (Not responding)"), ready["message"]


def test_nodeset_with_an_unexpected_drain_names_the_pod_and_the_reason(client):
    pods = nodeset_pods(client, slurm=("Idle",))
    pods[1] = with_reason(
        nodeset.observed(
            json.loads(pods[1]["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]), slurm=("Idle", "Drain")
        ),
        "Drain",
        "Kill task failed",
    )
    ready = nodeset_ready(client, pods)
    assert (ready["status"], ready["reason"]) == ("False", "SlurmNodeDrained")
    assert "gpu-1 (Kill task failed)" in ready["message"] and "gpu-0" not in ready["message"], ready["message"]


@pytest.mark.parametrize(
    ("states", "reason", "needle"),
    [
        ((), "SlurmStateUnknown", "no Slurm node state reported yet"),
        (("Future",), "SlurmNodeNotUsable", "gpu-0 (FUTURE)"),
        (("Idle", "InvalidReg"), "SlurmNodeNotUsable", "gpu-0 (INVALID_REG)"),
    ],
)
def test_nodeset_with_pods_slurm_cannot_use_is_not_ready(client, states, reason, needle):
    ready = nodeset_ready(client, nodeset_pods(client, slurm=states))
    assert (ready["status"], ready["reason"]) == ("False", reason) and needle in ready["message"], ready["message"]


def test_nodeset_scaling_in_counts_only_the_pods_it_keeps(client):
    pods = nodeset_pods(client, slurm=("Allocated",))
    ready = nodeset_ready(client, pods, replicas=1)
    assert (ready["status"], ready["reason"]) == ("True", "NodesReady"), ready
    assert ready["message"] == "1/1 pods ready and usable in Slurm"


def test_nodeset_without_its_controller_or_being_deleted_is_not_ready(client):
    pods = nodeset_pods(client)
    orphan = nodeset_ready(client, pods, controller=None)
    assert (orphan["status"], orphan["reason"]) == ("False", "ControllerNotFound")
    assert orphan["message"].startswith("ControllerResolved: Controller slurm/slurm not found"), orphan["message"]
    parent = nodeset.nodeset(replicas=2)
    deleting = nodeset.post(client, "/nodeset/finalize", nodeset.request(parent, pods=pods, finalizing=True))
    ready = wait_for_ready(parent, deleting)
    assert (ready["status"], ready["reason"]) == ("False", "Deleting") and "DeletionBlocked" in ready["message"]


def test_nodeset_with_an_invalid_spec_is_not_ready(client):
    pods = nodeset_pods(client)
    good = nodeset.nodeset(replicas=2)
    applied = nodeset.sync(client, nodeset.request(good, pods=pods))
    assert wait_for_ready(good, applied)["status"] == "True"
    bad = nodeset.nodeset(status=applied["status"], replicas=2, scalingMode="Deployment")
    resp = nodeset.post(client, "/nodeset/sync", nodeset.request(bad, pods=pods), good)
    ready = wait_for_ready(good, resp)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "spec.scalingMode" in ready["message"]
