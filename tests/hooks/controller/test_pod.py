"""The slurmctld StatefulSet built from a parsed Controller spec (hooks/controller/pod.py): identity and selector,
the pod's containers and /etc/slurm projection, StateSave storage, HA, the pinned immutable fields and the
anti-affinity no user template can drop."""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest

from hooks.controller import pod
from hooks.controller.spec import parse_spec
from slinky_common import names
from slinky_common.jsontypes import JSON

SELECTOR = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: "slurm"}
OUR_TERM = {"labelSelector": {"matchLabels": SELECTOR}, "topologyKey": "kubernetes.io/hostname"}
SHARED = {"enabled": True, "existingClaim": "rwx"}


def controller(**spec: object) -> JSON:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Controller",
        "metadata": {"name": "slurm", "namespace": "hpc", "labels": {"team": "hpc"}},
        "spec": spec,
    }


def build(parent: JSON, pod_annotations: dict[str, str] | None = None, observed: JSON | None = None) -> JSON:
    return pod.statefulset(parent, parse_spec(parent), pod_annotations or {}, observed)


def pod_spec(sts: JSON) -> JSON:
    return sts["spec"]["template"]["spec"]


def probe(path: str) -> JSON:
    return {"httpGet": {"path": path, "port": "slurmctld"}, "failureThreshold": 6, "periodSeconds": 10}


def volumes(sts: JSON) -> dict[str, JSON]:
    return {v["name"]: v for v in pod_spec(sts)["volumes"]}


def test_identity_selector_and_pod_metadata() -> None:
    sts = build(controller(), {"hash": "abc"})
    labels = {**SELECTOR, names.LABEL_COMPONENT: "controller"}
    assert (sts["apiVersion"], sts["kind"]) == ("apps/v1", "StatefulSet")
    assert sts["metadata"] == {"name": "slurm-controller", "labels": {"team": "hpc", **labels}}
    spec = sts["spec"]
    assert (spec["replicas"], spec["revisionHistoryLimit"], spec["serviceName"]) == (1, 0, "slurm-controller-internal")
    assert spec["selector"] == {"matchLabels": SELECTOR}
    assert spec["template"]["metadata"] == {
        "labels": labels,
        "annotations": {names.ANNOTATION_DEFAULT_CONTAINER: "slurmctld", "hash": "abc"},
    }
    assert "podManagementPolicy" not in spec


def test_the_user_template_adds_metadata_but_ours_wins() -> None:
    template = {
        "metadata": {
            "labels": {"extra": "x", names.LABEL_COMPONENT: "mine"},
            "annotations": {"note": "n", "hash": "user"},
        },
        "spec": {"nodeSelector": {"pool": "ctl"}},
    }
    sts = build(controller(template=template), {"hash": "ours"})
    assert sts["metadata"]["labels"] == {"team": "hpc", "extra": "x", **SELECTOR, names.LABEL_COMPONENT: "controller"}
    assert sts["metadata"]["annotations"] == {"note": "n", "hash": "user"}  # the StatefulSet keeps the user's own
    tmeta = sts["spec"]["template"]["metadata"]
    assert tmeta["labels"][names.LABEL_COMPONENT] == "controller" and tmeta["labels"]["extra"] == "x"
    assert tmeta["annotations"] == {"note": "n", "hash": "ours", names.ANNOTATION_DEFAULT_CONTAINER: "slurmctld"}
    assert pod_spec(sts)["nodeSelector"] == {"pool": "ctl"}


def test_the_pod_runs_as_slurm_with_one_slurmctld_and_the_logfile_sidecar() -> None:
    spec = pod_spec(build(controller()))
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401, "fsGroup": 401}
    assert [c["name"] for c in spec["initContainers"]] == ["logfile"]
    assert spec["initContainers"][0]["env"] == [{"name": "SOCKET", "value": "/var/log/slurm/slurmctld.log"}]
    (ctld,) = spec["containers"]
    assert (ctld["name"], ctld["image"]) == ("slurmctld", pod.DEFAULT_SLURMCTLD_IMAGE)
    assert ctld["securityContext"] == {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401}
    assert [ctld[p] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == [
        probe("/livez"),
        probe("/livez"),
        probe("/readyz"),
    ]
    assert {m["name"]: m["mountPath"] for m in ctld["volumeMounts"]}["statesave"] == "/var/spool/slurmctld/hpc_slurm"


def test_a_container_override_merges_and_appends_args() -> None:
    ctld = pod_spec(build(controller(slurmctld={"image": "my/slurmctld:1", "args": ["-vvv"]})))["containers"][0]
    assert (ctld["name"], ctld["image"], ctld["args"]) == ("slurmctld", "my/slurmctld:1", ["-vvv"])


def test_etc_slurm_projects_config_keys_referenced_configmaps_sorted_once_and_jwks() -> None:
    parent = controller(
        slurmKeyRef={"name": "sk", "key": "k1"},
        jwtKeyRef={"name": "jk", "key": "k2"},
        jwksKeyRef={"name": "jw", "key": "k3"},
        configFileRefs=[{"name": "b"}, {"name": "a"}],
        prologScriptRefs=[{"name": "c"}, {"name": "a"}],
    )
    assert volumes(build(parent))["slurm-etc"] == {
        "name": "slurm-etc",
        "projected": {
            "defaultMode": 0o610,
            "sources": [
                {"configMap": {"name": "slurm-config"}},
                {"secret": {"name": "sk", "items": [{"key": "k1", "path": "slurm.key"}]}},
                {"secret": {"name": "jk", "items": [{"key": "k2", "path": "jwt.key"}]}},
                {"configMap": {"name": "a"}},
                {"configMap": {"name": "b"}},
                {"configMap": {"name": "c"}},
                {"configMap": {"name": "jw", "items": [{"key": "k3", "path": "jwks.json"}]}},
            ],
        },
    }


def test_without_references_etc_slurm_holds_only_the_config() -> None:
    sources = volumes(build(controller()))["slurm-etc"]["projected"]["sources"]
    assert sources == [{"configMap": {"name": "slurm-config"}}]


# --- StateSave storage --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persistence", "volume", "claims"),
    [
        pytest.param({"enabled": False}, {"name": "statesave", "emptyDir": {}}, False, id="disabled"),
        pytest.param(
            {"enabled": False, "existingClaim": "ignored"},
            {"name": "statesave", "emptyDir": {}},
            False,
            id="disabled-ignores-the-claim",
        ),
        pytest.param(
            {"existingClaim": "state"},
            {"name": "statesave", "persistentVolumeClaim": {"claimName": "state"}},
            False,
            id="existing-claim",
        ),
        pytest.param({}, None, True, id="claim-template"),
    ],
)
def test_state_save_storage(persistence: JSON, volume: JSON | None, claims: bool) -> None:
    sts = build(controller(persistence=persistence))
    assert volumes(sts).get("statesave") == volume
    assert ("volumeClaimTemplates" in sts["spec"]) is claims


def test_a_new_claim_template_is_written_as_the_server_stores_it() -> None:
    storage = {"storageClassName": "fast", "resources": {"requests": {"storage": "9Gi"}}}
    (claim,) = build(controller(persistence=storage))["spec"]["volumeClaimTemplates"]
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "statesave"},
        "spec": {
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "9Gi"}},
            "storageClassName": "fast",
        },
        "status": {"phase": "Pending"},
    }


def test_an_existing_statefulsets_claim_templates_are_echoed_and_malformed_entries_dropped() -> None:
    stored: JSON = {"metadata": {"name": "statesave"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    observed = {"spec": {"volumeClaimTemplates": [stored, "junk", {"spec": {}}, {"metadata": None}]}}
    sts = build(controller(persistence={"resources": {"requests": {"storage": "100Gi"}}}), observed=observed)
    assert sts["spec"]["volumeClaimTemplates"] == [stored]
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] = {}
    assert stored["spec"]["resources"] == {"requests": {"storage": "1Gi"}}  # a copy, not the observed object
    assert "statesave" not in volumes(sts)


def test_an_existing_statefulset_without_claim_templates_never_gains_one() -> None:
    sts = build(controller(), observed={"spec": {}})
    assert "volumeClaimTemplates" not in sts["spec"]
    assert volumes(sts)["statesave"] == {"name": "statesave", "emptyDir": {}}


# --- HA -------------------------------------------------------------------------------------------------------------


def test_ha_runs_every_slurmctld_at_once_and_ready_means_alive() -> None:
    sts = build(controller(ha={"enabled": True, "backups": 2}, persistence=SHARED))
    assert (sts["spec"]["replicas"], sts["spec"]["podManagementPolicy"]) == (3, "Parallel")
    assert pod_spec(sts)["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/livez"


@pytest.mark.parametrize(
    ("ha", "stored", "policy"),
    [
        pytest.param(True, "Parallel", "Parallel", id="ha-parallel-kept"),
        pytest.param(True, "OrderedReady", None, id="ha-ordered-ready-kept"),
        pytest.param(True, None, None, id="ha-server-default-kept"),
        pytest.param(False, "Parallel", "Parallel", id="no-ha-parallel-kept"),
        pytest.param(False, None, None, id="no-ha-default"),
    ],
)
def test_an_existing_statefulset_keeps_its_pod_management_policy(
    ha: bool, stored: str | None, policy: str | None
) -> None:
    parent = controller(ha={"enabled": True}, persistence=SHARED) if ha else controller()
    observed: JSON = {"spec": {} if stored is None else {"podManagementPolicy": stored}}
    assert build(parent, observed=observed)["spec"].get("podManagementPolicy") == policy


# --- reconfigure sidecar --------------------------------------------------------------------------------------------


def test_inplace_reconfigure_adds_a_sidecar_before_the_logfile_one_with_slurmctlds_image() -> None:
    parent = controller(inplaceReconfigure=True, slurmctld={"image": "my/slurmctld:1"}, reconfigure={"args": ["x"]})
    init = pod_spec(build(parent))["initContainers"]
    assert [c["name"] for c in init] == ["reconfigure", "logfile"]
    reconfigure = init[0]
    assert (reconfigure["image"], reconfigure["restartPolicy"]) == ("my/slurmctld:1", "Always")
    assert reconfigure["command"] == ["tini", "-g", "--", "bash", "-c", pod.RECONFIGURE_SCRIPT]
    assert reconfigure["args"] == ["x"]
    assert reconfigure["volumeMounts"] == [
        {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True},
        {"name": "slurm-authsocket", "mountPath": "/run/slurmctld", "readOnly": True},
    ]
    default = pod_spec(build(controller(inplaceReconfigure=True)))["initContainers"][0]
    assert default["image"] == pod.DEFAULT_SLURMCTLD_IMAGE


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_reconfigure_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", "-c", pod.RECONFIGURE_SCRIPT], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# --- anti-affinity --------------------------------------------------------------------------------------------------


def test_anti_affinity_keeps_the_users_terms_adds_ours_once_and_leaves_the_spec_alone() -> None:
    theirs = {"labelSelector": {"matchLabels": {"x": "y"}}, "topologyKey": "zone"}
    template = {"spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [theirs]}}}}
    parent = controller(template=template)
    spec = parse_spec(parent)
    before = copy.deepcopy(spec.template)
    first = pod.statefulset(parent, spec, {}, None)
    assert pod.statefulset(parent, spec, {}, None) == first
    assert spec.template == before
    terms = pod_spec(first)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [theirs, OUR_TERM]


def test_a_user_term_equal_to_ours_is_not_repeated() -> None:
    template = {
        "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [OUR_TERM]}}}
    }
    sts = build(controller(template=template))
    assert pod_spec(sts)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [OUR_TERM]
