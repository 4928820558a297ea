"""The slurmd worker pod, its PVCs and the sshd ConfigMap, as the NodeSet hook emits them."""

from __future__ import annotations

import base64
import os
import subprocess

import pytest

from hooks.nodeset.pods import conf_argument, parse_quantity, pod_limits
from hooks.nodeset.spec import parse_nodeset
from slinky_common import names
from tests.hooks.nodeset.builders import (
    children,
    condition,
    controller_cr,
    draining,
    node,
    nodeset,
    observed,
    post,
    reported,
    request,
    slurmd,
    sync,
)

CLAIM = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_worker_pod_carries_slinky_identity_and_wiring(client):
    parent = nodeset(replicas=1)
    parent["metadata"]["labels"] = {"team": "hpc"}
    pod = children(sync(client, request(parent)))["gpu-0"]
    labels = pod["metadata"]["labels"]
    assert labels[names.LABEL_NAME] == "slurmd" and labels[names.LABEL_INSTANCE] == "gpu"
    assert labels[names.LABEL_COMPONENT] == "worker" and labels[names.LABEL_CLUSTER] == "slurm"
    assert labels[names.LABEL_NODESET_POD_NAME] == "gpu-0" and labels[names.LABEL_NODESET_POD_HOSTNAME] == "gpu-0"
    assert labels["team"] == "hpc"
    assert pod["metadata"]["annotations"][names.ANNOTATION_DEFAULT_CONTAINER] == "slurmd"
    spec = pod["spec"]
    assert spec["subdomain"] == "slurm-workers-slurm"
    assert spec["dnsConfig"]["searches"] == ["slurm-workers-slurm.slurm.svc.cluster.local"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    container = slurmd(pod)
    assert container["args"] == [
        "-Z",
        "--conf-server",
        "slurm-controller.slurm:6817",
        "--conf",
        "'Features=gpu'",
    ]
    assert container["ports"] == [{"name": "slurmd", "containerPort": 6818, "protocol": "TCP"}]
    assert container["securityContext"]["privileged"] is True
    assert "slurm-operator: Pod is terminating" in container["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "slurmd"}
    etc = next(v for v in spec["volumes"] if v["name"] == "slurm-etc")
    assert etc["projected"]["sources"] == [
        {"secret": {"name": "slurm-key", "items": [{"key": "slurm.key", "path": "slurm.key"}]}}
    ]
    logfile = spec["initContainers"][0]
    assert logfile["name"] == "logfile" and logfile["restartPolicy"] == "Always"
    assert env(logfile) == {"SOCKET": "/var/log/slurm/slurmd.log"}
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def test_oversubscribe_drops_the_anti_affinity_and_external_controller_sets_conf_server(client):
    external = controller_cr(external=True, externalConfig={"host": "ctld.example.com", "port": 7817})
    pod = children(sync(client, request(nodeset(replicas=1, oversubscribeNode=True), controller=external)))["gpu-0"]
    assert "affinity" not in pod["spec"]
    assert slurmd(pod)["args"][2] == "ctld.example.com:7817"


def test_user_template_and_overrides_merge_without_losing_ours(client):
    spec = {
        "replicas": 1,
        "slurmd": {"image": "slurmd:test", "args": ["-vvv"], "env": [{"name": "EXTRA", "value": "1"}]},
        "logfile": {"image": "busybox:1"},
        "extraConf": "Weight=10 feature=a",
        "template": {
            "metadata": {"labels": {"tier": "gpu"}},
            "spec": {
                "hostname": "slinky-",
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "dnsConfig": {"searches": ["example.com"]},
                "priorityClassName": "hpc",
            },
        },
    }
    pod = children(sync(client, request(nodeset(**spec))))["gpu-0"]
    container = slurmd(pod)
    assert container["image"] == "slurmd:test"
    assert container["args"][-1] == "-vvv" and container["args"][:2] == ["-Z", "--conf-server"]
    assert container["args"][4] == "'Features=a,slinky Weight=10'"
    assert env(container)["EXTRA"] == "1" and "POD_CPUS" in env(container)
    assert pod["spec"]["initContainers"][0]["image"] == "busybox:1"
    assert pod["spec"]["hostname"] == "slinky-0" and pod["spec"]["priorityClassName"] == "hpc"
    assert pod["metadata"]["labels"]["tier"] == "gpu"
    assert {"key": names.TAINT_NODESET_WORKER, "operator": "Equal", "effect": "NoExecute"} in pod["spec"]["tolerations"]
    assert {"key": "gpu", "operator": "Exists"} in pod["spec"]["tolerations"]
    assert "slurm-workers-slurm.slurm.svc.cluster.local" in pod["spec"]["dnsConfig"]["searches"]


@pytest.mark.parametrize(
    ("pod_limits_", "container_limits", "expected"),
    [
        ({}, {}, (0, 0)),
        ({"cpu": "1"}, {}, (1, 0)),
        ({"memory": "1Gi"}, {}, (0, 1024)),
        ({}, {"cpu": "4", "memory": "2Gi"}, (4, 2048)),
        ({"cpu": "4", "memory": "2Gi"}, {"cpu": "1", "memory": "1Gi"}, (1, 1024)),
        ({}, {"cpu": "500m", "memory": "1500M"}, (1, 1430)),
    ],
)
def test_pod_cpus_and_memory_come_from_the_limits(pod_limits_, container_limits, expected):
    spec = {"controllerRef": {"name": "slurm"}, "template": {"spec": {"resources": {"limits": pod_limits_}}}}
    spec["slurmd"] = {"resources": {"limits": container_limits}}
    parent = {"metadata": {"name": "gpu", "namespace": "slurm"}, "spec": spec}
    assert pod_limits(parse_nodeset(parent)) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("", "'Features=gpu'"),
        ("Features=a100,nvlink", "'Features=a100,gpu,nvlink'"),
        ("Topology=switch-topo:s1", "'Features=gpu Topology=switch-topo:s1'"),
        ("Weight10", "'Features=gpu'"),
    ],
)
def test_conf_argument(extra, expected):
    parent = {
        "metadata": {"name": "gpu", "namespace": "slurm"},
        "spec": {"controllerRef": {"name": "slurm"}, "extraConf": extra},
    }
    assert conf_argument(parse_nodeset(parent)) == expected


def test_parse_quantity():
    assert parse_quantity("2Gi") == 2 * 2**30 and parse_quantity("1e3") == 1000 and parse_quantity("bogus") == 0


def test_pvcs_follow_the_claim_templates_and_the_scale_retention_policy(client):
    spec = {"replicas": 2, "volumeClaimTemplates": [CLAIM]}
    resp = sync(client, request(nodeset(**spec)))
    claims = children(resp, "PersistentVolumeClaim")
    assert sorted(claims) == ["data-gpu-0", "data-gpu-1"]
    assert claims["data-gpu-0"]["metadata"]["labels"][names.LABEL_INSTANCE] == "gpu"
    volume = next(v for v in children(resp)["gpu-1"]["spec"]["volumes"] if v["name"] == "data")
    assert volume == {"name": "data", "persistentVolumeClaim": {"claimName": "data-gpu-1"}}

    pods = [observed(p) for p in children(resp).values()]
    pvcs = [observed(c) for c in claims.values()]
    gone = [pods[0]]
    retained = sync(client, request(nodeset(replicas=1, volumeClaimTemplates=[CLAIM]), pods=gone, pvcs=pvcs))
    assert sorted(children(retained, "PersistentVolumeClaim")) == ["data-gpu-0", "data-gpu-1"]
    delete = {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Delete"}}
    # The PVC stays while its pod is still there (draining) and goes with it.
    draining_pvc = sync(
        client, request(nodeset(replicas=1, volumeClaimTemplates=[CLAIM], **delete), pods=pods, pvcs=pvcs)
    )
    assert sorted(children(draining_pvc, "PersistentVolumeClaim")) == ["data-gpu-0", "data-gpu-1"]
    dropped = sync(client, request(nodeset(replicas=1, volumeClaimTemplates=[CLAIM], **delete), pods=gone, pvcs=pvcs))
    assert sorted(children(dropped, "PersistentVolumeClaim")) == ["data-gpu-0"]
    # An ordinal below replicas keeps its PVC while its pod is replaced.
    replaced = sync(client, request(nodeset(replicas=2, volumeClaimTemplates=[CLAIM], **delete), pods=gone, pvcs=pvcs))
    assert sorted(children(replaced, "PersistentVolumeClaim")) == ["data-gpu-0", "data-gpu-1"]


def test_finalize_drops_pvcs_with_their_pods_only_when_when_deleted_is_delete(client):
    spec = {"replicas": 1, "volumeClaimTemplates": [CLAIM]}
    resp = sync(client, request(nodeset(**spec)))
    pvcs = [observed(c) for c in children(resp, "PersistentVolumeClaim").values()]
    retained = post(client, "/nodeset/finalize", request(nodeset(**spec), pvcs=pvcs, finalizing=True))
    assert sorted(children(retained, "PersistentVolumeClaim")) == ["data-gpu-0"]
    # Omitting it would delete it, and finalizing would let garbage collection delete it: both wait
    # until slurm_sync has removed the NodeSet's ownerReference (then Metacontroller no longer observes it).
    assert retained["finalized"] is False and retained["resyncAfterSeconds"] == 10
    assert condition(retained, names.CONDITION_RETAINED_CLAIMS)["status"] == "True"
    orphaned = post(client, "/nodeset/finalize", request(reported(nodeset(**spec)), finalizing=True))
    assert orphaned["finalized"] is True and orphaned["children"] == []
    assert condition(orphaned, names.CONDITION_RETAINED_CLAIMS)["status"] == "False"
    # Without a Controller the pods go at once, but the retained PVCs still wait.
    pod0 = observed(children(resp)["gpu-0"])
    gone = post(
        client, "/nodeset/finalize", request(nodeset(**spec), pods=[pod0], pvcs=pvcs, controller=None, finalizing=True)
    )
    assert (
        children(gone) == {}
        and sorted(children(gone, "PersistentVolumeClaim")) == ["data-gpu-0"]
        and gone["finalized"] is False
    )
    delete = {**spec, "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}}
    dropped = post(client, "/nodeset/finalize", request(reported(nodeset(**delete)), pvcs=pvcs, finalizing=True))
    assert dropped["children"] == [] and dropped["finalized"] is True
    # Deleting never creates: a pod whose PVC is missing does not get one back.
    pod = observed(children(resp)["gpu-0"])
    kept = post(client, "/nodeset/finalize", request(nodeset(**delete), pods=[pod], finalizing=True))
    assert children(kept, "PersistentVolumeClaim") == {} and list(children(kept)) == ["gpu-0"]
    kept = post(client, "/nodeset/finalize", request(nodeset(**delete), pods=[pod], pvcs=pvcs, finalizing=True))
    assert list(children(kept, "PersistentVolumeClaim")) == ["data-gpu-0"]


def test_ssh_adds_the_config_map_mounts_and_hashes(client):
    ssh = {"enabled": True, "extraSshdConfig": "MaxSessions 4", "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sssd", "namespace": "slurm"},
        "data": {"sssd.conf": base64.b64encode(b"[sssd]\n").decode()},
    }
    body = request(nodeset(replicas=1, ssh=ssh))
    body["related"]["Secret.v1"] = {"slurm/sssd": secret}
    resp = sync(client, body)
    config = children(resp, "ConfigMap")["gpu-ssh-config"]
    assert config["data"]["sshd_config"].endswith("### EXTRA CONFIG ###\nMaxSessions 4\n")
    pod = children(resp)["gpu-0"]
    mounts = {m["mountPath"]: m for m in slurmd(pod)["volumeMounts"]}
    assert (
        mounts["/etc/ssh/sshd_config"]["subPath"] == "sshd_config"
        and mounts["/etc/sssd/sssd.conf"]["subPath"] == "sssd.conf"
    )
    assert {"name": "ssh", "containerPort": 22, "protocol": "TCP"} in slurmd(pod)["ports"]
    annotations = pod["metadata"]["annotations"]
    assert (
        len(annotations[names.ANNOTATION_SSHD_CONF_HASH]) == 64
        and len(annotations[names.ANNOTATION_SSSD_CONF_HASH]) == 64
    )
    # Turning ssh off keeps the ConfigMap while an old pod still mounts it.
    off = sync(client, request(nodeset(replicas=1, updateStrategy={"type": "OnDelete"}), pods=[observed(pod)]))
    assert "gpu-ssh-config" in children(off, "ConfigMap")
    assert children(sync(client, request(nodeset(replicas=1))), "ConfigMap") == {}


def test_pin_to_node_remembers_where_an_ordinal_ran(client):
    fleet = [node("node-a"), node("node-b")]
    pods = children(sync(client, request(nodeset(replicas=2, pinToNode=True), nodes=fleet)))
    state = [observed(pods["gpu-0"], node_name="node-b"), observed(pods["gpu-1"], node_name="node-a")]
    first = sync(client, request(nodeset(replicas=2, pinToNode=True), pods=state, nodes=fleet))
    assert first["status"]["ordinalToNode"] == {"0": "node-b", "1": "node-a"}
    # gpu-0 was replaced: its new pod must go back to node-b.
    again = sync(
        client, request(nodeset(status=first["status"], replicas=2, pinToNode=True), pods=state[1:], nodes=fleet)
    )
    terms = children(again)["gpu-0"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]
    # A node that left is not pinned to.
    gone = sync(
        client, request(nodeset(status=first["status"], replicas=2, pinToNode=True), pods=state[1:], nodes=fleet[:1])
    )
    assert "nodeAffinity" not in children(gone)["gpu-0"]["spec"]["affinity"]


def test_customize_asks_for_the_controller_nodes_and_sssd_secret(client):
    resp = post(client, "/nodeset/customize", {"controller": {}, "parent": nodeset(replicas=1)})
    assert resp["relatedResources"] == [
        {"apiVersion": names.API_VERSION, "resource": "controllers", "namespace": "slurm", "names": ["slurm"]}
    ]
    ds = nodeset(
        scalingMode="DaemonSet",
        template={"spec": {"nodeSelector": {"slurm": "yes"}}},
        ssh={"enabled": True, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}},
    )
    rules = post(client, "/nodeset/customize", {"controller": {}, "parent": ds})["relatedResources"]
    assert {"apiVersion": "v1", "resource": "nodes", "labelSelector": {"matchLabels": {"slurm": "yes"}}} in rules
    assert {"apiVersion": "v1", "resource": "secrets", "namespace": "slurm", "names": ["sssd"]} in rules


def test_status_counts_slurm_states_and_exposes_the_selector(client):
    pods = children(sync(client, request(nodeset(replicas=4))))
    state = [
        observed(pods["gpu-0"], slurm=("Idle",)),
        observed(pods["gpu-1"], slurm=("Mixed",)),
        observed(pods["gpu-2"], slurm=("Allocated", "Drain")),
        observed(pods["gpu-3"], slurm=("Down",), ready=False),
    ]
    status = sync(client, request(nodeset(replicas=4), pods=state))["status"]
    assert (status["slurmIdle"], status["slurmAllocated"], status["slurmDown"], status["slurmDrain"]) == (1, 2, 1, 1)
    assert (
        status["replicas"],
        status["readyReplicas"],
        status["availableReplicas"],
        status["unavailableReplicas"],
    ) == (4, 3, 3, 1)
    assert status["selector"] == "app.kubernetes.io/instance=gpu,app.kubernetes.io/name=slurmd"
    assert draining({"status": status}) == {}


def slurmd_conf_seen(extra: str) -> list[str]:
    """The `--conf` items slurmd receives when a shell evaluates the hook's word (as the image's supervisor does)."""
    parent = {"metadata": {"name": "gpu", "namespace": "slurm"}, "spec": {"controllerRef": {"name": "slurm"}}}
    parent["spec"]["extraConf"] = extra
    word = conf_argument(parse_nodeset(parent))
    # Slinky's images strip every quote from this word and quote it again to append their own items: only a
    # plain single-quoted word survives that unchanged.
    assert word.startswith("'") and word.endswith("'") and not set(word[1:-1]) & set("'\"$`\\"), word
    out = subprocess.run(["sh", "-c", f"printf %s {word}"], env={"PATH": os.environ["PATH"]}, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.split(" ")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("Weight=7", ["Features=gpu", "Weight=7"]),  # was "Topology= Weight=7": Weight=7 became the topology
        ("Weight= CPUs=2 Topology=", ["CPUs=2", "Features=gpu"]),
        ("Topology=topo-block:b1 Weight=7", ["Features=gpu", "Topology=topo-block:b1", "Weight=7"]),
    ],
)
def test_slurmd_conf_is_one_plain_word_with_no_key_without_a_value(extra, expected):
    assert slurmd_conf_seen(extra) == expected


def test_an_elastic_nodesets_on_demand_pods_report_their_slurmds_own_boot(client):
    """Its nodes are in slurm.conf, so slurmd registers no dynamic node (`-Z --conf` would name a node twice);
    `-b`: slurmctld ignores a powering-up node whose boot time is older than its resume request, and a container's
    boot time is the host's (docs/architecture.md §4.9)."""
    parent = nodeset(
        replicas=3,
        elastic={"minReplicas": 1, "maxReplicas": 4},
        partition={"enabled": True},
        extraConf="CPUs=2 RealMemory=100",
    )
    parent["metadata"]["annotations"] = {names.ANNOTATION_POWER_OBSERVED: '{"up":["gpu-2"]}'}
    pods = children(sync(client, request(parent)))
    assert sorted(pods) == ["gpu-0", "gpu-2"]
    assert slurmd(pods["gpu-2"])["args"] == ["-b", "--conf-server", "slurm-controller.slurm:6817"]
    # never powered up: a restarted slurmd must not look like a reboot (Slurm would set the node DOWN)
    assert slurmd(pods["gpu-0"])["args"] == ["--conf-server", "slurm-controller.slurm:6817"]


def test_an_on_demand_pod_reports_the_second_its_node_was_first_seen_powering_up_as_its_boot(client):
    """SLURMD_BOOT_TIME (read by `slurmd -b`): no earlier than Slurm's resume request and a second or more before the
    registration, so slurmctld, which derives boot times in whole seconds, never takes a later registration of the
    node for a reboot (slinky_common/powerreport.py); found on the cluster lab as two requeued jobs."""
    parent = nodeset(
        replicas=3,
        elastic={"minReplicas": 1, "maxReplicas": 4},
        partition={"enabled": True},
        extraConf="CPUs=2 RealMemory=100",
    )
    report = '{"up":["gpu-2"],"upSince":{"gpu-2":1795771000,"gpu-3":1795771001}}'
    parent["metadata"]["annotations"] = {names.ANNOTATION_POWER_OBSERVED: report}
    pods = children(sync(client, request(parent)))
    assert sorted(pods) == ["gpu-0", "gpu-2"], "gpu-3 is not listed up yet: no pod"
    assert {"name": "SLURMD_BOOT_TIME", "value": "1795771000"} in slurmd(pods["gpu-2"])["env"]
    assert "SLURMD_BOOT_TIME" not in {e["name"] for e in slurmd(pods["gpu-0"]).get("env", [])}  # always on
    revisions = {p["metadata"]["labels"][names.LABEL_NODESET_REVISION] for p in pods.values()}
    assert len(revisions) == 1, "the boot time is the pod's own, not the NodeSet's revision"
