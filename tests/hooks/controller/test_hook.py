"""Controller → slurmctld (hooks/controller/hook.py), through HTTP: children, slurm.conf, hashes, status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hooks.app import create_app
from slinky_common import names
from tests.hooks.kinds.controller import STS, controller, keys, pod_template, post, sync
from tests.support.hooks import NS, as_observed, assert_invalid_spec, by_kind, condition_of, cr, related, secret
from tests.support.kube import validate_builtin, validate_cr

REPO = Path(__file__).resolve().parents[3]
CONFIG = "ConfigMap/slurm-config"
NODESET_KEY = f"NodeSet.{names.API_VERSION}"
MONITOR_RULE = {
    "apiVersion": "monitoring.coreos.com/v1",
    "resource": "servicemonitors",
    "updateStrategy": {"method": "InPlace"},
}


def nodeset(name: str, ctrl: str = "slurm", **spec) -> dict:
    return cr("NodeSet", name, {"controllerRef": {"name": ctrl}, **spec})


def configmap(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "data": data,
    }


@pytest.fixture()
def client():
    return create_app().test_client()


def assert_status_valid(parent: dict, resp: dict) -> None:
    """The status the hook returns must pass our CRD's status schema (else Metacontroller cannot write it)."""
    assert validate_cr({**parent, "status": resp["status"]}) == []


def slurm_conf(resp: dict) -> str:
    return by_kind(resp)[CONFIG]["data"]["slurm.conf"]


# --- slurm.conf ----------------------------------------------------------------------------------


def test_two_nodesets_and_accounting_give_slinkys_lines(client):
    rel = related(
        *keys(),
        nodeset("gpu", partition={"enabled": True, "config": "MaxTime=UNLIMITED State=UP"}),
        nodeset("cpu"),
        nodeset("other-cluster", ctrl="another"),
        cr("Accounting", "acct", {"storageConfig": {"host": "db"}}),
    )
    foreign = nodeset("foreign")
    foreign["metadata"]["namespace"] = "elsewhere"
    rel[f"NodeSet.{names.API_VERSION}"]["elsewhere/foreign"] = foreign
    conf = slurm_conf(sync(client, controller(accountingRef={"name": "acct"}), rel=rel))
    lines = conf.splitlines()
    assert lines[:3] == ["#", "### GENERAL ###", "ClusterName=slurm_slurm"]
    for line in (
        "SlurmctldHost=slurm-controller-0(slurm-controller-0.slurm-controller-internal.slurm)",
        "AuthType=auth/slurm",
        "AuthAltTypes=auth/jwt",
        "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        "SlurmctldParameters=enable_configless,reconfig_on_restart",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=acct-accounting.slurm",
        "AccountingStoragePort=6819",
    ):
        assert line in lines
    assert conf.endswith(
        "### NODESET & PARTITION ###\n"
        "NodeSet=cpu Feature=cpu\n"
        "NodeSet=gpu Feature=gpu\n"
        "PartitionName=gpu Nodes=gpu MaxTime=UNLIMITED State=UP\n"
    )
    assert "other-cluster" not in conf and "foreign" not in conf


def test_output_does_not_depend_on_the_order_objects_arrive_in(client):
    parent = controller(accountingRef={"name": "acct"})
    objects = [*keys(), nodeset("a"), nodeset("b", partition={"enabled": True}), cr("Accounting", "acct", {})]
    forward = post(client, "/controller/sync", {"parent": parent, "related": related(*objects)}).data
    backward = post(client, "/controller/sync", {"parent": parent, "related": related(*reversed(objects))}).data
    assert forward == backward


def test_external_accounting_and_custom_service_port(client):
    external = cr("Accounting", "acct", {"external": True, "externalConfig": {"host": "dbd.example.com", "port": 7000}})
    conf = slurm_conf(sync(client, controller(accountingRef={"name": "acct"}), rel=related(*keys(), external)))
    assert "AccountingStorageHost=dbd.example.com\nAccountingStoragePort=7000\n" in conf
    in_cluster = cr("Accounting", "acct", {"service": {"port": 16819}})
    conf = slurm_conf(sync(client, controller(accountingRef={"name": "acct"}), rel=related(*keys(), in_cluster)))
    assert "AccountingStorageHost=acct-accounting.slurm\nAccountingStoragePort=16819\n" in conf


def test_cluster_name_scripts_extra_conf_and_metrics(client):
    parent = controller(
        clusterName="hpc",
        prologScriptRefs=[{"name": "prolog"}],
        epilogSlurmctldScriptRefs=[{"name": "epilog-ctld"}],
        extraConf="SlurmctldParameters=enable_stepmgr",
        metrics={"enabled": True},
    )
    rel = related(
        *keys(), configmap("prolog", {"b.sh": "#!/bin/sh", "a.sh": "#!/bin/sh"}), configmap("epilog-ctld", {"e.sh": ""})
    )
    conf = slurm_conf(sync(client, parent, rel=rel))
    assert "ClusterName=hpc\n" in conf and "StateSaveLocation=/var/spool/slurmctld/hpc\n" in conf
    assert "EpilogSlurmctld=/etc/slurm/e.sh\n" in conf
    assert "Prolog=a.sh\nProlog=b.sh\n" in conf
    assert "MetricsType=metrics/openmetrics\n" in conf
    assert conf.endswith(
        "### EXTRA CONFIG ###\nSlurmctldParameters=enable_stepmgr\n"
        "#\n### MERGED CONFIG ###\nSlurmctldParameters=enable_configless,enable_stepmgr,reconfig_on_restart\n"
    )


def test_user_cgroup_conf_replaces_ours(client):
    ours = by_kind(sync(client, controller(), rel=related(*keys())))[CONFIG]["data"]
    assert ours["cgroup.conf"] == "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"
    parent = controller(configFileRefs=[{"name": "extra"}])
    data = by_kind(sync(client, parent, rel=related(*keys(), configmap("extra", {"cgroup.conf": "x"}))))[CONFIG]["data"]
    assert sorted(data) == ["slurm.conf"]


@pytest.mark.parametrize(
    ("parent", "rel", "field"),
    [
        (
            controller(),
            related(nodeset("n", partition={"enabled": True, "config": "A=1\nPartitionName=x Nodes=ALL"})),
            "NodeSet 'n' spec.partition.config",
        ),
        (
            controller(),
            related(nodeset("n", template={"spec": {"hostname": "bad host-"}})),
            "NodeSet 'n' spec.template.spec.hostname",
        ),
        (controller(extraConf="A=1 \\"), None, "spec.extraConf"),
        (controller(extraConf="A=1\r\nB=2"), None, "spec.extraConf"),
        (controller(clusterName="a b"), None, "spec.clusterName"),
        (controller(external=True, externalConfig={"host": "h\nX=1", "port": 6817}), None, "spec.externalConfig.host"),
        (
            controller(accountingRef={"name": "a"}),
            related(cr("Accounting", "a", {"external": True, "externalConfig": {"host": "h h", "port": 1}})),
            "Accounting 'a' spec.externalConfig.host",
        ),
        (controller(ha={"enabled": True, "backups": 1}), None, "spec.persistence.existingClaim"),
        (controller(ha={"enabled": True, "backups": 0}, persistence={"existingClaim": "c"}), None, "spec.ha.backups"),
        (controller(prologScriptRefs="p"), None, "spec.prologScriptRefs"),
    ],
)
def test_input_that_could_inject_lines_or_cannot_be_built_is_a_condition_and_changes_nothing(
    client, parent, rel, field
):
    rel = related(*keys()) | (rel or {})
    assert_invalid_spec(client, "controller", controller(), parent, rel, field, good_rel=related(*keys()))


# --- children ------------------------------------------------------------------------------------


def allowed_child_types() -> set[tuple[str, str]]:
    manifest = yaml.safe_load((REPO / "compositecontrollers" / "controller.yaml").read_text())
    kinds = {
        "services": "Service",
        "configmaps": "ConfigMap",
        "statefulsets": "StatefulSet",
        "poddisruptionbudgets": "PodDisruptionBudget",
    }
    return {(rule["apiVersion"], kinds[rule["resource"]]) for rule in manifest["spec"]["childResources"]}


def full_request_objects() -> tuple[dict, dict]:
    parent = controller(
        accountingRef={"name": "acct"},
        configFileRefs=[{"name": "gres"}],
        jwksKeyRef={"name": "jwks", "key": "jwks.json"},
        slurmctld={"resources": {"limits": {"cpu": "2"}}, "args": ["-vvv"]},
        logfile={"image": "busybox:1"},
        template={
            "metadata": {"labels": {"pod": "label"}},
            "spec": {"nodeSelector": {"pool": "ctl"}, "priorityClassName": "high"},
        },
        service={"nodePort": 30817, "spec": {"type": "NodePort", "externalIPs": ["1.2.3.4"]}},
    )
    rel = related(
        *keys(),
        nodeset("cpu", partition={"enabled": True}),
        cr("Accounting", "acct", {}),
        configmap("gres", {"gres.conf": "AutoDetect=off"}),
        configmap("jwks", {"jwks.json": "{}"}),
    )
    return parent, rel


def test_children_validate_strictly_match_the_manifest_and_carry_parent_labels(client):
    parent, rel = full_request_objects()
    resp = sync(client, parent, rel=rel)
    assert sorted(by_kind(resp)) == [
        CONFIG,
        "PodDisruptionBudget/slurm-workers-pdb-slurm",
        "Service/slurm-controller",
        "Service/slurm-controller-internal",
        "Service/slurm-workers-slurm",
        STS,
    ]
    allowed = allowed_child_types()
    for child in resp["children"]:
        assert validate_builtin(child) == [], child["metadata"]["name"]
        assert (child["apiVersion"], child["kind"]) in allowed
        meta = child["metadata"]
        assert meta["labels"]["team"] == "hpc" and meta["annotations"]["note"] == "n"
        assert "namespace" not in meta and "uid" not in meta and "status" not in child


def test_pod_spec_security_probes_mounts_and_projection(client):
    parent, rel = full_request_objects()
    template = pod_template(sync(client, parent, rel=rel))
    spec = template["spec"]
    assert template["metadata"]["labels"]["pod"] == "label"
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401, "fsGroup": 401}
    assert spec["automountServiceAccountToken"] is False and spec["nodeSelector"] == {"pool": "ctl"}
    ctld = spec["containers"][0]
    assert ctld["name"] == "slurmctld" and ctld["ports"] == [
        {"name": "slurmctld", "containerPort": 6817, "protocol": "TCP"}
    ]
    assert ctld["args"] == ["-vvv"] and ctld["resources"] == {"limits": {"cpu": "2"}}
    assert (
        ctld["readinessProbe"]["httpGet"]["path"] == "/readyz" and ctld["livenessProbe"]["httpGet"]["path"] == "/livez"
    )
    assert {m["mountPath"]: m["name"] for m in ctld["volumeMounts"]} == {
        "/etc/slurm": "slurm-etc",
        "/run": "run",
        "/var/spool/slurmctld/slurm_slurm": "statesave",
        "/run/slurmctld": "slurm-authsocket",
        "/var/log/slurm": "slurm-logfile",
    }
    assert [(c["name"], c["restartPolicy"], c["image"]) for c in spec["initContainers"]] == [
        ("logfile", "Always", "busybox:1")
    ]
    etc = next(v for v in spec["volumes"] if v["name"] == "slurm-etc")["projected"]
    assert etc["defaultMode"] == 0o610
    assert etc["sources"] == [
        {"configMap": {"name": "slurm-config"}},
        {"secret": {"name": "slurm-key", "items": [{"key": "slurm.key", "path": "slurm.key"}]}},
        {"secret": {"name": "jwt-key", "items": [{"key": "jwt.key", "path": "jwt.key"}]}},
        {"configMap": {"name": "gres"}},
        {"configMap": {"name": "jwks", "items": [{"key": "jwks.json", "path": "jwks.json"}]}},
    ]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [
        {
            "labelSelector": {"matchLabels": {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: "slurm"}},
            "topologyKey": "kubernetes.io/hostname",
        }
    ]


def test_services_and_the_shared_worker_objects(client):
    parent, rel = full_request_objects()
    children = by_kind(sync(client, parent, rel=rel))
    selector = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: "slurm"}
    internal = children["Service/slurm-controller-internal"]["spec"]
    assert internal == {
        "selector": selector,
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "ports": [{"name": "slurmctld", "port": 6817, "targetPort": "slurmctld", "protocol": "TCP"}],
    }
    main = children["Service/slurm-controller"]["spec"]
    assert main["selector"] == selector and main["type"] == "NodePort" and "externalIPs" not in main
    assert main["ports"] == [
        {"name": "slurmctld", "port": 6817, "targetPort": "slurmctld", "protocol": "TCP", "nodePort": 30817}
    ]
    workers = children["Service/slurm-workers-slurm"]["spec"]
    assert workers["selector"] == {names.LABEL_NAME: "slurmd", names.LABEL_CLUSTER: "slurm"}
    assert workers["clusterIP"] == "None" and workers["publishNotReadyAddresses"] is True
    assert workers["ports"] == [{"name": "slurmd", "port": 6818, "targetPort": "slurmd", "protocol": "TCP"}]
    pdb = children["PodDisruptionBudget/slurm-workers-pdb-slurm"]["spec"]
    assert pdb == {
        "maxUnavailable": 0,
        "selector": {"matchLabels": {names.LABEL_POD_PROTECT: "true", names.LABEL_CLUSTER: "slurm"}},
    }


def test_same_request_same_bytes_and_desired_fed_back_is_a_fixed_point(client):
    parent, rel = full_request_objects()
    body = {"controller": {}, "parent": parent, "children": {}, "related": rel, "finalizing": False}
    first = post(client, "/controller/sync", body)
    assert first.data == post(client, "/controller/sync", body).data
    desired = first.get_json()["children"]
    observed = as_observed(
        desired, status={"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    )
    again = sync(client, parent, children=observed, rel=rel)
    assert again["children"] == desired
    text = json.dumps(again["children"])
    assert "uid-" not in text and "resourceVersion" not in text and names.ANNOTATION_LAST_APPLIED not in text


def test_the_example_request_is_answered(client):
    resp = client.post(
        "/controller/sync",
        data=(REPO / "examples/requests/controller-sync.json").read_bytes(),
        content_type="application/json",
    )
    assert resp.status_code == 200
    assert all(validate_builtin(c) == [] for c in resp.get_json()["children"])


# --- persistence and HA --------------------------------------------------------------------------


def test_state_save_storage_modes(client):
    default = by_kind(sync(client, controller(), rel=related(*keys())))[STS]["spec"]
    assert default["volumeClaimTemplates"] == [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "statesave"},
            "status": {"phase": "Pending"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "4Gi"}},
                "volumeMode": "Filesystem",
            },
        }
    ]
    claim = by_kind(sync(client, controller(persistence={"existingClaim": "state"}), rel=related(*keys())))[STS]["spec"]
    assert "volumeClaimTemplates" not in claim
    assert {"name": "statesave", "persistentVolumeClaim": {"claimName": "state"}} in claim["template"]["spec"][
        "volumes"
    ]
    off = by_kind(sync(client, controller(persistence={"enabled": False}), rel=related(*keys())))[STS]["spec"]
    assert {"name": "statesave", "emptyDir": {}} in off["template"]["spec"][
        "volumes"
    ] and "volumeClaimTemplates" not in off


def test_claim_templates_of_an_existing_statefulset_are_kept(client):
    """volumeClaimTemplates are immutable; a spec edit must not make every InPlace update fail."""
    first = sync(client, controller(), rel=related(*keys()))
    edited = controller(persistence={"enabled": True, "resources": {"requests": {"storage": "100Gi"}}})
    again = by_kind(sync(client, edited, children=as_observed(first["children"]), rel=related(*keys())))[STS]
    assert again["spec"]["volumeClaimTemplates"] == by_kind(first)[STS]["spec"]["volumeClaimTemplates"]
    fresh = by_kind(sync(client, edited, rel=related(*keys())))[STS]
    assert fresh["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] == {"requests": {"storage": "100Gi"}}


def test_ha_runs_backups_on_a_shared_claim_and_routes_to_the_active_controller(client):
    parent = controller(ha={"enabled": True, "backups": 2}, persistence={"enabled": True, "existingClaim": "rwx"})
    resp = sync(client, parent, rel=related(*keys()))
    children = by_kind(resp)
    sts = children[STS]["spec"]
    assert sts["replicas"] == 3 and "volumeClaimTemplates" not in sts
    assert {"name": "statesave", "persistentVolumeClaim": {"claimName": "rwx"}} in sts["template"]["spec"]["volumes"]
    assert sts["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/livez"
    assert children["Service/slurm-controller"]["spec"]["selector"][names.LABEL_ACTIVE_CONTROLLER] == "true"
    assert names.LABEL_ACTIVE_CONTROLLER not in children["Service/slurm-controller-internal"]["spec"]["selector"]
    hosts = [line for line in slurm_conf(resp).splitlines() if line.startswith("SlurmctldHost=")]
    assert hosts == [
        f"SlurmctldHost=slurm-controller-{i}(slurm-controller-{i}.slurm-controller-internal.slurm)" for i in range(3)
    ]
    assert all(validate_builtin(c) == [] for c in resp["children"])


def test_ha_starts_every_slurmctld_at_once_and_an_existing_statefulset_keeps_its_policy(client):
    """Each slurmctld resolves every SlurmctldHost at start: under OrderedReady the first waited forever for
    the name of a pod made only once it is Ready (cluster lab). The field is immutable, so it is pinned."""
    parent = controller(ha={"enabled": True, "backups": 1}, persistence={"enabled": True, "existingClaim": "rwx"})
    first = sync(client, parent, rel=related(*keys()))
    assert by_kind(first)[STS]["spec"]["podManagementPolicy"] == "Parallel"
    assert "podManagementPolicy" not in by_kind(sync(client, controller(), rel=related(*keys())))[STS]["spec"]
    observed = as_observed(first["children"])
    observed["StatefulSet.apps/v1"][f"{NS}/slurm-controller"]["spec"]["podManagementPolicy"] = "OrderedReady"
    again = by_kind(sync(client, parent, children=observed, rel=related(*keys())))[STS]
    assert "podManagementPolicy" not in again["spec"]  # the server's default, OrderedReady, stays


# --- reconfigure ---------------------------------------------------------------------------------


def test_config_change_rolls_the_pod_through_the_config_hash(client):
    before = pod_template(sync(client, controller(), rel=related(*keys(), nodeset("a"))))
    after = pod_template(sync(client, controller(), rel=related(*keys(), nodeset("a"), nodeset("b"))))
    hash_key = names.ANNOTATION_SLURM_CONFIG_HASH
    assert before["metadata"]["annotations"][hash_key] != after["metadata"]["annotations"][hash_key]
    assert [c["name"] for c in before["spec"]["initContainers"]] == ["logfile"]


def test_referenced_config_file_changes_roll_the_pod_too(client):
    parent = controller(configFileRefs=[{"name": "gres"}])
    one = pod_template(sync(client, parent, rel=related(*keys(), configmap("gres", {"gres.conf": "a"}))))
    two = pod_template(sync(client, parent, rel=related(*keys(), configmap("gres", {"gres.conf": "b"}))))
    assert one["metadata"]["annotations"] != two["metadata"]["annotations"]


def test_inplace_reconfigure_keeps_the_template_and_adds_the_sidecar(client):
    parent = controller(inplaceReconfigure=True, slurmctld={"image": "ctld:1"})
    before = sync(client, parent, rel=related(*keys(), nodeset("a")))
    after = sync(client, parent, rel=related(*keys(), nodeset("a"), nodeset("b")))
    assert slurm_conf(before) != slurm_conf(after)
    assert pod_template(before) == pod_template(after)
    annotations = pod_template(before)["metadata"]["annotations"]
    assert names.ANNOTATION_SLURM_CONFIG_HASH not in annotations
    assert {names.ANNOTATION_SLURM_KEY_HASH, names.ANNOTATION_JWT_KEY_HASH} <= annotations.keys()
    sidecar, logfile = pod_template(before)["spec"]["initContainers"]
    assert (sidecar["name"], sidecar["restartPolicy"], sidecar["image"]) == ("reconfigure", "Always", "ctld:1")
    assert "scontrol reconfigure" in sidecar["command"][-1] and logfile["name"] == "logfile"
    assert {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True} in sidecar["volumeMounts"]


def test_key_rotation_changes_only_that_keys_hash(client):
    one = pod_template(sync(client, controller(), rel=related(*keys())))["metadata"]["annotations"]
    two = pod_template(sync(client, controller(), rel=related(*keys(jwt_key=b"k" * 32))))["metadata"]["annotations"]
    assert one[names.ANNOTATION_JWT_KEY_HASH] != two[names.ANNOTATION_JWT_KEY_HASH]
    assert one[names.ANNOTATION_SLURM_KEY_HASH] == two[names.ANNOTATION_SLURM_KEY_HASH]
    assert one[names.ANNOTATION_SLURM_CONFIG_HASH] == two[names.ANNOTATION_SLURM_CONFIG_HASH]


# --- missing references ----------------------------------------------------------------------------


def test_missing_key_secret_keeps_the_statefulset_and_its_hashes(client):
    first = sync(client, controller(), rel=related(*keys()))
    observed = as_observed(first["children"])
    resp = sync(client, controller(), children=observed, rel=related(keys()[1]))
    assert pod_template(resp) == pod_template(first)
    assert resp["children"] == first["children"]
    cond = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert cond["status"] == "False" and "slurm-key" in cond["message"]
    assert resp["resyncAfterSeconds"] > 0
    assert_status_valid(controller(), resp)


def test_missing_accounting_keeps_the_written_slurm_conf(client):
    parent = controller(accountingRef={"name": "acct"})
    external = cr("Accounting", "acct", {"external": True, "externalConfig": {"host": "dbd.example.com", "port": 6819}})
    first = sync(client, parent, rel=related(*keys(), external))
    resp = sync(client, parent, children=as_observed(first["children"]), rel=related(*keys(), nodeset("new")))
    assert by_kind(resp)[CONFIG] == by_kind(first)[CONFIG]
    assert pod_template(resp) == pod_template(first)
    cond = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert cond["status"] == "False" and "'acct'" in cond["message"] and "slurm.conf is kept" in cond["message"]


def test_missing_referenced_configmap_keeps_config_and_its_hash(client):
    parent = controller(configFileRefs=[{"name": "gres"}], prologScriptRefs=[{"name": "prolog"}])
    rel = related(*keys(), configmap("gres", {"gres.conf": "a"}), configmap("prolog", {"p.sh": ""}))
    first = sync(client, parent, rel=rel)
    gone = related(*keys(), configmap("prolog", {"p.sh": ""}), nodeset("new"))
    resp = sync(client, parent, children=as_observed(first["children"]), rel=gone)
    assert by_kind(resp)[CONFIG] == by_kind(first)[CONFIG] and pod_template(resp) == pod_template(first)
    assert "'gres'" in condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)["message"]


def test_missing_accounting_on_first_sync_assumes_the_in_cluster_service(client):
    resp = sync(client, controller(accountingRef={"name": "acct"}), rel=related(*keys()))
    assert "AccountingStorageHost=acct-accounting.slurm\nAccountingStoragePort=6819\n" in slurm_conf(resp)
    assert STS in by_kind(resp)


# --- external mode ---------------------------------------------------------------------------------


def test_external_controller_has_only_client_config_and_worker_objects(client):
    parent = cr("Controller", "slurm", {"external": True, "externalConfig": {"host": "ctld.example.com", "port": 6817}})
    resp = sync(client, parent, rel=related(nodeset("cpu", partition={"enabled": True})))
    assert sorted(by_kind(resp)) == [
        CONFIG,
        "PodDisruptionBudget/slurm-workers-pdb-slurm",
        "Service/slurm-workers-slurm",
    ]
    assert by_kind(resp)[CONFIG]["data"] == {
        "slurm.conf": (
            "#\n### GENERAL ###\nC"
            "lusterName=slurm_slurm\nSlurmUser=slurm\nSlurmctldHost=ctld.example.com\nSlurmctldPort=6817\n"
            "#\n### PLUGINS & PARAMETERS ###\nAuthType=auth/slurm\nCredType=cred/slurm\nAuthAltTypes=auth/jwt\n"
            "#\n### ACCOUNTING ###\nAccountingStorageType=accounting_storage/none\n"
        )
    }
    external = condition_of(resp, names.CONDITION_EXTERNAL)
    assert external["status"] == "True" and "ctld.example.com:6817" in external["message"]
    assert condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)["status"] == "True"
    assert all(validate_builtin(c) == [] for c in resp["children"])
    assert_status_valid(parent, resp)


# --- status ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ready", "available"),
    [
        ({"observedGeneration": 1, "replicas": 2, "readyReplicas": 1, "updatedReplicas": 2}, "False", "True"),
        ({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}, "True", "True"),
        ({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 1}, "False", "True"),
        ({}, "False", "False"),
    ],
)
def test_status_comes_from_the_observed_statefulset(client, status, ready, available):
    parent = controller(ha={"enabled": True, "backups": 1}, persistence={"existingClaim": "rwx"})
    first = sync(client, parent, rel=related(*keys()))
    resp = sync(client, parent, children=as_observed(first["children"], status=status), rel=related(*keys()))
    assert condition_of(resp, names.CONDITION_READY)["status"] == ready
    assert condition_of(resp, names.CONDITION_AVAILABLE)["status"] == available
    assert condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)["status"] == "True"
    assert "resyncAfterSeconds" not in resp
    assert_status_valid(parent, resp)


def test_status_before_the_statefulset_exists(client):
    resp = sync(client, controller(), rel=related(*keys()))
    cond = condition_of(resp, names.CONDITION_READY)
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "StatefulSetMissing", 1)


# --- metrics ---------------------------------------------------------------------------------------


def test_service_monitor_only_when_enabled_and_the_child_type_is_configured(client):
    parent = controller(
        metrics={"enabled": True, "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "prom"}}}
    )
    without = sync(client, parent, rel=related(*keys()))
    assert not any(c["kind"] == "ServiceMonitor" for c in without["children"])
    assert condition_of(without, names.CONDITION_SERVICE_MONITOR_CREATED)["reason"] == "ChildTypeNotConfigured"
    assert_status_valid(parent, without)
    with_rule = sync(client, parent, rel=related(*keys()), rules=[MONITOR_RULE])
    monitor = by_kind(with_rule)["ServiceMonitor/slurm-controller"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    assert [e["path"] for e in monitor["spec"]["endpoints"]] == [
        "/metrics/jobs",
        "/metrics/nodes",
        "/metrics/partitions",
        "/metrics/scheduler",
    ]
    assert all(e["port"] == "slurmctld" and e["interval"] == "30s" for e in monitor["spec"]["endpoints"])
    # It selects the main Service only: the internal one lacks the component label.
    services = {
        n: c["metadata"]["labels"] for n, c in by_kind(with_rule).items() if n.startswith("Service/slurm-controller")
    }
    matches = [
        n for n, labels in services.items() if monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert matches == ["Service/slurm-controller"]
    disabled = sync(
        client,
        controller(metrics={"enabled": False, "serviceMonitor": {"enabled": True}}),
        rel=related(*keys()),
        rules=[MONITOR_RULE],
    )
    assert not any(c["kind"] == "ServiceMonitor" for c in disabled["children"])


# --- customize -------------------------------------------------------------------------------------


def test_customize_asks_for_nodesets_accounting_keys_and_configmaps_by_name(client):
    parent = controller(
        accountingRef={"name": "acct"},
        configFileRefs=[{"name": "gres"}],
        prologScriptRefs=[{"name": "prolog"}, {"name": "gres"}],
        jwksKeyRef={"name": "jwks", "key": "jwks.json"},
    )
    resp = post(client, "/controller/customize", {"controller": {}, "parent": parent})
    assert resp.status_code == 200
    assert resp.get_json()["relatedResources"] == [
        {"apiVersion": names.API_VERSION, "resource": "accountings", "namespace": NS, "names": ["acct"]},
        {"apiVersion": names.API_VERSION, "resource": "nodesets", "namespace": NS},
        {"apiVersion": "v1", "resource": "secrets", "namespace": NS, "names": ["jwt-key", "slurm-key"]},
        {"apiVersion": "v1", "resource": "configmaps", "namespace": NS, "names": ["gres", "jwks", "prolog"]},
    ]


def test_customize_for_an_external_controller_needs_only_the_accounting(client):
    parent = cr(
        "Controller",
        "slurm",
        {"external": True, "externalConfig": {"host": "h", "port": 1}, "accountingRef": {"name": "a"}},
    )
    resp = post(client, "/controller/customize", {"controller": {}, "parent": parent})
    assert resp.get_json()["relatedResources"] == [
        {"apiVersion": names.API_VERSION, "resource": "accountings", "namespace": NS, "names": ["a"]},
    ]


def test_secret_with_wrong_key_is_reported_missing(client):
    rel = related(secret("slurm-key", {"other": b"x"}), keys()[1])
    resp = sync(client, controller(), rel=rel)
    assert STS in by_kind(resp)
    assert "'slurm.key'" in condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)["message"]
    assert pod_template(resp)["metadata"]["annotations"][names.ANNOTATION_SLURM_KEY_HASH] == ""


def test_customize_with_an_invalid_value_still_gives_every_rule_it_can_derive(client):
    fine = post(client, "/controller/customize", {"parent": controller(configFileRefs=[{"name": "gres"}])}).get_json()
    bad_name = post(
        client, "/controller/customize", {"parent": controller(configFileRefs=[{"name": "gres"}], clusterName="a b")}
    )
    assert bad_name.get_json() == fine  # clusterName shapes no rule
    bad_refs = post(client, "/controller/customize", {"parent": controller(prologScriptRefs="p")}).get_json()
    assert [r["resource"] for r in bad_refs["relatedResources"]] == ["nodesets", "secrets"]


def test_absent_nodeset_list_keeps_the_written_slurm_conf(client):
    """`related` lacks the NodeSet entry customize asked for (a failed list, an old customize answer):
    that is no evidence the NodeSets are gone, so their NodeSet/PartitionName lines stay."""
    parent = controller()
    first = sync(client, parent, rel=related(*keys(), nodeset("cpu", partition={"enabled": True})))
    assert "NodeSet=cpu" in slurm_conf(first)
    resp = sync(client, parent, children=as_observed(first["children"]), rel=related(*keys()))
    assert by_kind(resp)[CONFIG] == by_kind(first)[CONFIG] and pod_template(resp) == pod_template(first)
    cond = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert cond["status"] == "False" and "NodeSet" in cond["message"] and "slurm.conf is kept" in cond["message"]
    assert resp["resyncAfterSeconds"] > 0
    assert_status_valid(parent, resp)
    # An answered list that is empty is real: the last NodeSet went away, its lines go too.
    empty = sync(client, parent, children=as_observed(first["children"]), rel={**related(*keys()), NODESET_KEY: {}})
    assert "NodeSet=" not in slurm_conf(empty)
    assert condition_of(empty, names.CONDITION_REFERENCES_RESOLVED)["status"] == "True"
