"""A Slinky helm/slurm user's values work unchanged: charts/slurm, rendered by real helm from a values
file in Slinky's documented forms (tests/charts/slinky_forms.yaml), gives CRs on which each key took
effect, and the hooks turn those CRs into the pods the user asked for. Our defaults give the cluster
Slinky's defaults give (tests/charts/slinky_defaults.yaml), apart from what the README's "Moving from
Slinky" table explains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts import helm
from tests.charts.rendered import (
    NS,
    Obj,
    hook_children,
    render,
)
from tests.charts.validation import validate

HERE = Path(__file__).parent
SLINKY_FORMS: Obj = yaml.safe_load((HERE / "slinky_forms.yaml").read_text())
SLINKY_DEFAULTS: Obj = yaml.safe_load((HERE / "slinky_defaults.yaml").read_text())
# Where our defaults differ from Slinky's, and the README row that says why.
DOCUMENTED_DIFFERENCES = {
    # "partitions.all.enabled: false | default true here, so a default install has a usable partition"
    ("Controller/slurm", "extraConf"): "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP",
}


def forms() -> dict[str, Obj]:
    return render(SLINKY_FORMS)


def spec(values: Obj, key: str) -> Obj:
    return render(values)[key]["spec"]


def names_of(docs: dict[str, Obj], kind: str) -> set[str]:
    return {key.split("/", 1)[1] for key in docs if key.startswith(f"{kind}/")}


# --- the hooks, fed the rendered CRs ---------------------------------------------------------------


def containers(workload: Obj) -> dict[str, Obj]:
    pod = workload["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def controller_children() -> dict[str, Obj]:
    docs = forms()
    return hook_children("controller", docs["Controller/slurm"], docs["Accounting/slurm"])


# --- the values file in Slinky's forms ----------------------------------------------------------------


def test_every_rendered_object_validates():
    problems = {key: errors for key, doc in forms().items() if (errors := validate(doc))}
    assert problems == {}


def test_cluster_name_is_left_to_the_operator_unless_set():
    """Finding 2: a chart default would give a migrated cluster a new identity."""
    for values in ({}, SLINKY_FORMS):
        assert "clusterName" not in spec(values, "Controller/slurm")
    children = hook_children("controller", render({})["Controller/slurm"])
    conf = children["ConfigMap/slurm-config"]["data"]["slurm.conf"]
    assert "ClusterName=slurm_slurm" in conf.splitlines()  # Slinky's operator: <namespace>_<name>
    assert spec({"clusterName": "hpc1"}, "Controller/slurm")["clusterName"] == "hpc1"


def test_only_the_nodesets_and_loginsets_the_values_name():
    """Finding 3: Helm merges maps, so a default entry would be added to every user's file."""
    assert names_of(render({}), "NodeSet") == set() and names_of(render({}), "LoginSet") == set()
    assert names_of(forms(), "NodeSet") == {"slurm-worker-cpu", "slurm-worker-gpu"}
    assert names_of(forms(), "LoginSet") == {"slurm-login-users"}


def test_script_refs_as_objects_in_slinkys_order():
    ctrl = forms()["Controller/slurm"]["spec"]
    assert ctrl["prologScriptRefs"] == [{"name": "slurm-prolog-scripts"}, {"name": "site-prolog"}]
    assert ctrl["epilogScriptRefs"] == [{"name": "site-epilog"}, {"name": "slurm-epilog-scripts"}]
    assert ctrl["prologSlurmctldScriptRefs"] == [{"name": "site-prolog-slurmctld"}]
    assert ctrl["epilogSlurmctldScriptRefs"] == [{"name": "site-epilog-slurmctld"}]
    plain = spec({"prologScriptRefs": ["plain-name"]}, "Controller/slurm")  # our earlier form still works
    assert plain["prologScriptRefs"] == [{"name": "plain-name"}]


def test_images_given_as_strings():
    docs = forms()
    images = {
        ("Controller/slurm", "slurmctld"): "registry.example.com/slurm/slurmctld:26.05-site",
        ("Controller/slurm", "reconfigure"): "registry.example.com/slurm/slurmctld:26.05-site",
        ("Controller/slurm", "logfile"): "registry.example.com/alpine:3.22",
        ("RestApi/slurm", "slurmrestd"): "registry.example.com/slurm/slurmrestd:26.05-site",
        ("Accounting/slurm", "slurmdbd"): "registry.example.com/slurm/slurmdbd:26.05-site",
        ("LoginSet/slurm-login-users", "login"): "registry.example.com/slurm/login:26.05-site",
        ("LoginSet/slurm-login-users", "initconf"): "registry.example.com/busybox:1.37",
        ("NodeSet/slurm-worker-cpu", "slurmd"): "registry.example.com/slurm/slurmd:26.05-site",
        ("NodeSet/slurm-worker-gpu", "slurmd"): "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04",  # the object form
    }
    assert {key: docs[key[0]]["spec"][key[1]]["image"] for key in images} == images


def test_image_pull_policy_global_and_per_container_reach_the_pods():
    docs = forms()
    ctrl = docs["Controller/slurm"]["spec"]
    policies = {name: ctrl[name]["imagePullPolicy"] for name in ("slurmctld", "reconfigure", "logfile")}
    assert policies == {"slurmctld": "IfNotPresent", "reconfigure": "Always", "logfile": "Never"}
    for key in ("RestApi/slurm", "Accounting/slurm", "LoginSet/slurm-login-users", "NodeSet/slurm-worker-cpu"):
        pulled = {n: c["imagePullPolicy"] for n, c in docs[key]["spec"].items() if isinstance(c, dict) and "image" in c}
        assert pulled and set(pulled.values()) == {"Always"}, key
    pod = containers(controller_children()["StatefulSet/slurm-controller"])
    assert {name: c["imagePullPolicy"] for name, c in pod.items()} == policies


def test_resources_of_the_reconfigure_logfile_and_initconf_containers_reach_the_pods():
    docs = forms()
    ctrl = containers(controller_children()["StatefulSet/slurm-controller"])
    assert ctrl["reconfigure"]["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"}}
    assert ctrl["logfile"]["resources"] == {"limits": {"cpu": "100m", "memory": "32Mi"}}
    login = hook_children("loginset", docs["LoginSet/slurm-login-users"], docs["Controller/slurm"])
    initconf = containers(login["Deployment/slurm-login-users"])["initconf"]
    assert initconf["resources"] == {"limits": {"cpu": "200m", "memory": "64Mi"}}
    assert docs["NodeSet/slurm-worker-cpu"]["spec"]["logfile"]["resources"] == {"requests": {"cpu": "10m"}}


@pytest.mark.parametrize(("value", "expected"), [("-", ""), ("", ""), (None, None), ("fast-ssd", "fast-ssd")])
def test_storage_class_name_as_slinky_reads_it(value, expected):
    persistence = spec({"controller": {"persistence": {"storageClassName": value}}}, "Controller/slurm")["persistence"]
    assert persistence.get("storageClassName") == expected


def test_storage_class_dash_reaches_the_claim_template_as_no_class():
    claims = controller_children()["StatefulSet/slurm-controller"]["spec"]["volumeClaimTemplates"]
    assert [c["spec"]["storageClassName"] for c in claims] == [""]


def test_the_raw_extra_conf_wins_over_its_map_form():
    docs = forms()
    partition = "PartitionName=all Nodes=cpu,gpu State=UP"  # config wins over configMap, members sorted
    assert docs["Controller/slurm"]["spec"]["extraConf"].splitlines() == ["SlurmctldDebug=debug2", partition]
    assert docs["Accounting/slurm"]["spec"]["extraConf"] == "DebugLevel=verbose"
    cpu = docs["NodeSet/slurm-worker-cpu"]["spec"]
    assert cpu["extraConf"] == "Weight=10 Features=cpu"
    assert cpu["partition"] == {"enabled": True, "config": "MaxTime=1-00:00:00"}
    assert docs["NodeSet/slurm-worker-gpu"]["spec"]["extraConf"] == "Features=gpu,a100"  # lists joined, empty left out
    conf = controller_children()["ConfigMap/slurm-config"]["data"]["slurm.conf"].splitlines()
    assert "SlurmctldDebug=debug2" in conf and "SlurmctldDebug=info" not in conf


def test_map_form_alone_is_used_with_lists_joined():
    conf_map = {"SlurmctldParameters": ["enable_stepmgr", "idle_on_node_suspend"], "DebugFlags": []}
    lines = spec({"controller": {"extraConfMap": conf_map}}, "Controller/slurm")["extraConf"].splitlines()
    assert lines[0] == "SlurmctldParameters=enable_stepmgr,idle_on_node_suspend"
    assert not any(line.startswith("DebugFlags") for line in lines)


def test_priority_class_is_used_but_not_created_unless_asked():
    docs = forms()
    assert names_of(docs, "PriorityClass") == set()
    templates = {key: doc["spec"]["template"]["spec"] for key, doc in docs.items() if "template" in doc.get("spec", {})}
    classes = {key: template.get("priorityClassName") for key, template in templates.items()}
    assert classes.pop("RestApi/slurm") == "restapi-priority"  # a podSpec's own class wins
    assert set(classes.values()) == {"slurm-system-critical"}
    created = render({"priorityClass": {"enabled": True, "create": True}})
    assert names_of(created, "PriorityClass") == {"slurm-system-critical"}


def test_component_metadata_goes_on_the_cr_and_its_pod_template():
    restapi = forms()["RestApi/slurm"]
    for meta in (restapi["metadata"], restapi["spec"]["template"]["metadata"]):
        assert meta["labels"]["team"] == "hpc" and meta["annotations"] == {"owner": "platform"}
    assert restapi["metadata"]["labels"]["app.kubernetes.io/part-of"] == "slurm"


@pytest.mark.parametrize("which", ["controller", "accounting"])
def test_no_key_secrets_for_an_external_slurmctld_or_slurmdbd(which):
    docs = render({which: {"enabled": True, "external": True, "externalConfig": {"host": "slurm.example.com"}}})
    assert names_of(docs, "Secret") == set()


def test_image_pull_secrets_of_the_pod_spec_come_before_the_global_ones():
    template = forms()["Controller/slurm"]["spec"]["template"]["spec"]
    assert template["imagePullSecrets"] == [{"name": "controller-registry"}, {"name": "site-registry"}]


def test_service_monitor_endpoints_and_annotations_reach_the_service_monitor():
    sm = forms()["Controller/slurm"]["spec"]["metrics"]["serviceMonitor"]
    assert sm["annotations"] == {"team": "hpc"}
    assert sm["endpoints"] == [{"path": "/metrics/jobs-users-accts", "interval": "60s"}]
    monitor = controller_children()["ServiceMonitor/slurm-controller"]
    assert monitor["metadata"]["annotations"]["team"] == "hpc"
    endpoints = monitor["spec"]["endpoints"]
    assert [(e["path"], e["interval"]) for e in endpoints] == [("/metrics/jobs-users-accts", "60s")]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"vendor": {"nvidia": {"dcgm": {"enabled": True}}}}, "vendor.nvidia.dcgm is not supported: add your DCGM"),
        ({"vendor": {"google": {"a3ultra": [{"targetNodeSet": "gpu"}]}}}, "vendor.google.a3ultra is not supported"),
        ({"partitions": {"all": {"enabled": True, "nodesets": []}}}, "partitions.all.nodesets must name at least one"),
        (
            {"nodesets": {"gpu": {"enabled": False}}, "partitions": {"gpu": {"enabled": True, "nodesets": ["gpu"]}}},
            'NodeSet "gpu" is disabled',
        ),
    ],
)
def test_values_we_cannot_honour_are_refused_saying_what_to_write(values, needle):
    with pytest.raises(helm.HelmFailed, match=needle):
        render(values)


# --- our defaults against Slinky's ----------------------------------------------------------------


def _reduced(value: Any) -> Any:
    """The recorded form: empty values dropped, recursively."""
    if isinstance(value, dict):
        kept = {k: _reduced(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [], "", None)}
    if isinstance(value, list):
        return [_reduced(v) for v in value]
    return value


def _comparable(doc: Obj) -> Obj:
    """A rendered document in the recorded form: no labels, no Secret payload or annotations."""
    doc = yaml.safe_load(yaml.safe_dump(doc))
    meta = doc.pop("metadata")
    doc.pop("apiVersion")
    doc.pop("kind")
    doc.pop("data", None)
    if "template" in doc.get("spec", {}):
        doc["spec"]["template"].get("metadata", {}).pop("labels", None)
    assert set(meta) - {"labels", "annotations"} == {"name", "namespace"} and meta["namespace"] == NS
    return _reduced(doc)


def test_defaults_give_slinkys_objects_and_cluster_name_differing_only_where_documented():
    ours = {key: _comparable(doc) for key, doc in render({}).items()}
    assert set(ours) == set(SLINKY_DEFAULTS["objects"])
    for (key, field), value in DOCUMENTED_DIFFERENCES.items():
        assert ours[key]["spec"].pop(field) == value
    assert ours == SLINKY_DEFAULTS["objects"]


@pytest.mark.parametrize("field", ["partition", "ssh"])
def test_a_null_partition_or_ssh_is_none(field: str) -> None:
    """Slinky's chart renders `nodesets.<key>.partition: null`; ours failed with a nil pointer."""
    nodeset = spec({"nodesets": {"cpu": {field: None}}}, "NodeSet/slurm-worker-cpu")
    assert field not in nodeset
