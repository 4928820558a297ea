"""Children of a NodeSet, built from scratch: slurmd worker pods, their PVCs, the sshd ConfigMap.

The pod is Slinky's worker pod: configless dynamic slurmd (`-Z --conf-server`) registering with
the NodeSet's feature, privileged, reachable by its short hostname through the cluster's shared
headless Service, and customised by the user's `template`, `slurmd` and `logfile` overrides.
The merged template is computed once per sync; each pod then only gets its identity.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import orjson

from hooks import cluster, logfile
from hooks.controller.model import Controller
from hooks.nodeset.spec import NodeSetSpec
from hooks.objects import child_metadata, content_hash
from hooks.podtemplate import apply_pod_template, merge_container
from slinky_common import names, wellknown
from slinky_common.fields import KeyRef
from slinky_common.nodesetconf import node_conf, ordinal_hostname, parse_extra_conf
from slinky_common.wellknown import component_labels, selector_labels

JSON = dict[str, Any]

SSH_CONFIG_KEY = "sshd_config"
BOOT_TIME_ENV = "SLURMD_BOOT_TIME"  # read by `slurmd -b` (src/slurmd/slurmd/slurmd.c), Slurm's own name
PRESTOP_COMMAND = "scontrol update nodename=$(hostname) state=down reason='slurm-operator: Pod is terminating';"
# The slurmd image adds `Topology=<value>` to the --conf word when this env var is not empty (Slinky's
# images 25.11 and later); the kubelet resolves it from the pod's topology annotation at container start.
POD_TOPOLOGY_ENV = "POD_TOPOLOGY"
TOPOLOGY_WAIT_CONTAINER = "topology-wait"
TOPOLOGY_VOLUME = "pod-topology"
TOPOLOGY_DIR = "/run/slinky/pod-topology"
TOPOLOGY_FILE = "topology"
# Waits until the downwardAPI file is non-empty or WAIT_SECONDS have passed; either way slurmd may start.
TOPOLOGY_WAIT_SCRIPT = """\
end=$(( $(date +%s) + WAIT_SECONDS ))
until [ -s "$TOPOLOGY_FILE" ]; do
  if [ "$(date +%s)" -ge "$end" ]; then
    echo "no topology on this pod after ${WAIT_SECONDS}s: slurmd starts without it, slurm_sync sets it later"
    exit 0
  fi
  sleep 1
done
echo "topology: $(cat "$TOPOLOGY_FILE")"
"""
_REVISION_FIELDS = ("template", "ordinalPadding", "oversubscribeNode", "slurmd", "extraConf", "logfile", "ssh")


@dataclass(frozen=True)
class PodSlot:
    """The identity of one worker pod: its name, Slurm hostname, and where it belongs."""

    name: str
    hostname: str
    ordinal: int | None = None
    node: str | None = None
    pin_node: str | None = None


def revision_hash(parent: JSON) -> str:
    """Hash of the pod-shaping spec fields (Slinky's revision data); 10 hex digits, label-safe."""
    spec = parent.get("spec") or {}
    data = {key: spec.get(key) for key in _REVISION_FIELDS}
    wait = ((parent.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_TOPOLOGY_WAIT)
    if wait:  # only when set, so the revision of every NodeSet without it stays as it was
        data[names.ANNOTATION_TOPOLOGY_WAIT] = wait
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]


def registration_hash(pod_spec: JSON) -> str:
    """Hash of what slurmd registers its dynamic node with: its command, args (the `--conf`), env (POD_CPUS,
    POD_MEMORY) and the container's and pod's resources. The image and everything else are left out: a pod
    replaced for them keeps its Slurm node record (and any state an administrator gave it)."""
    slurmd: JSON = next((c for c in pod_spec.get("containers", []) if c.get("name") == "slurmd"), {})
    data = {key: slurmd.get(key) for key in ("command", "args", "env", "resources")}
    data["podResources"] = pod_spec.get("resources")
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]


def slurmd_args(spec: NodeSetSpec, conf_server: str) -> list[str]:
    """A dynamic node (`-Z`) registering with the NodeSet's `--conf`. An elastic NodeSet's nodes are in slurm.conf
    instead (docs/architecture.md §4.9; slurmd dies on a `--conf` for a node slurm.conf names: "Duplicated
    NodeName"), and their slurmd reports its own start as the node's boot time (`-b`): a container's is the host's,
    older than Slurm's resume request, and slurmctld ignores a powering-up node's registration that booted before.
    The always-on ordinals drop it again (WorkerPodBuilder.build)."""
    if spec.elastic is not None:
        return ["-b", "--conf-server", conf_server]
    return ["-Z", "--conf-server", conf_server, "--conf", conf_argument(spec)]


def padded_ordinal(spec: NodeSetSpec, ordinal: int) -> str:
    return str(ordinal).zfill(spec.ordinal_padding)


def statefulset_slot(spec: NodeSetSpec, ordinal: int, pin_node: str | None = None) -> PodSlot:
    """`<nodeset>-<padded ordinal>`; the hostname uses the template hostname as prefix if set."""
    name = f"{spec.name}-{padded_ordinal(spec, ordinal)}"
    hostname = ordinal_hostname(spec.name, spec.template_spec.get("hostname"), spec.ordinal_padding, ordinal)
    return PodSlot(name=name, hostname=hostname, ordinal=ordinal, pin_node=pin_node)


def daemonset_slot(spec: NodeSetSpec, node: str, hostname: str) -> PodSlot:
    """Metacontroller has no generateName, so the name is derived from the node's hostname."""
    return PodSlot(name=f"{spec.name}-{hostname}", hostname=hostname, node=node, pin_node=node)


def slurm_nodeset_name(spec: NodeSetSpec) -> str:
    """The Slurm NodeSet/feature name: the template hostname without dashes at its ends, else the name."""
    hostname = spec.template_spec.get("hostname")
    return hostname.strip("-") if hostname else spec.name


def conf_argument(spec: NodeSetSpec) -> str:
    """The slurmd `--conf` value, one single-quoted shell word: features, gres and the user's extraConf, sorted.

    Slinky's slurmd images split the args into words, strip every quote from the `--conf` word and quote it
    again to add CoreSpecCount, MemSpecLimit and the pod's topology (POD_TOPOLOGY) before a shell evaluates
    them, so the word holds no quote or expansion of its own: a spliced `'"$VAR"'` came out of that with an
    unmatched quote and slurmd never started. No key is ever rendered without a value either: slurmd takes
    the next key as the value of an empty one (`Topology= Weight=7` left the node INVALID_REG).
    """
    conf = node_conf(
        slurm_nodeset_name(spec), spec.extra_conf, spec.slurmd, spec.template_spec, f"NodeSet {spec.name!r}"
    )
    return "'" + " ".join(f"{key}={value}" for key, value in sorted(conf.items())) + "'"


def sshd_config(spec: NodeSetSpec) -> str:
    lines = [
        "#",
        "### GENERAL ###",
        "Include /etc/ssh/sshd_config.d/*.conf",
        "UsePAM yes",
        "Subsystem sftp internal-sftp",
        "AuthenticationMethods publickey password",
        "#",
        "### EXTRA CONFIG ###",
        spec.extra_sshd_config,
    ]
    return "\n".join(lines) + "\n"


def ssh_config_name(spec: NodeSetSpec) -> str:
    return f"{spec.name}-ssh-config"


def ssh_config_map(parent: JSON, spec: NodeSetSpec) -> JSON:
    labels = component_labels("slurmd", spec.name, "worker")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(parent, ssh_config_name(spec), labels),
        "data": {SSH_CONFIG_KEY: sshd_config(spec)},
    }


def claim_name(claim: str, pod_name: str) -> str:
    """`<claim>-<nodeset>-<padded ordinal>` (StatefulSet) or `<claim>-<nodeset>-<hostname>` (DaemonSet)."""
    return f"{claim}-{pod_name}"


def claims_for(parent: JSON, spec: NodeSetSpec, pod_name: str) -> list[JSON]:
    """The pod's PVCs from volumeClaimTemplates, labelled with the worker selector labels."""
    result = []
    for template in spec.volume_claim_templates:
        meta = template["metadata"]
        labels = {**(meta.get("labels") or {}), **selector_labels("slurmd", spec.name)}
        result.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": child_metadata(parent, claim_name(meta["name"], pod_name), labels, meta.get("annotations")),
                "spec": template["spec"],
            }
        )
    return result


class WorkerPodBuilder:
    """Builds worker pods for one sync: the merged template once, then one identity per pod.

    The template is merged on first use only: a steady-state StatefulSet-mode sync creates no pod
    and never needs it (the merge was a third of a 10-pod sync).
    """

    def __init__(
        self,
        parent: JSON,
        spec: NodeSetSpec,
        controller: Controller,
        revision: str,
        sssd_data: bytes | None,
        boot_times: Mapping[int, int] | None = None,
    ):
        self.spec = spec
        self.parent = parent
        self.revision = revision
        self._controller = controller
        self._sssd_data = sssd_data
        self._boot_times = boot_times or {}  # an elastic NodeSet's on-demand ordinals: their node's upSince

    @cached_property
    def _template(self) -> JSON:
        base = _base_template(self.parent, self.spec, self._controller, self._sssd_data)
        template = _finish_template(self.spec, self._controller, apply_pod_template(base, self.spec.template))
        template["metadata"].setdefault("annotations", {})[names.ANNOTATION_REGISTRATION_HASH] = registration_hash(
            template["spec"]
        )
        return template

    @property
    def registration(self) -> str:
        """The registration hash of the pods this sync builds."""
        return str(self._template["metadata"]["annotations"][names.ANNOTATION_REGISTRATION_HASH])

    @cached_property
    def _template_bytes(self) -> bytes:
        return orjson.dumps(self._template)

    @property
    def template(self) -> JSON:
        """The merged pod template (`{metadata, spec}`) every pod of this sync is built from; not to be changed."""
        return self._template

    @property
    def template_bytes(self) -> bytes:
        """`template` as JSON."""
        return self._template_bytes

    @property
    def scheduling_spec(self) -> JSON:
        """The merged pod spec, for checking which nodes it fits."""
        return self._template["spec"]

    def build(self, slot: PodSlot) -> JSON:
        template = orjson.loads(self._template_bytes)
        labels = {
            **template["metadata"]["labels"],
            names.LABEL_NODESET_POD_NAME: slot.name,
            names.LABEL_NODESET_POD_HOSTNAME: slot.hostname,
            names.LABEL_NODESET_SCALING_MODE: self.spec.scaling_mode,
            names.LABEL_NODESET_REVISION: self.revision,
        }
        if slot.ordinal is not None:
            labels[names.LABEL_NODESET_POD_INDEX] = padded_ordinal(self.spec, slot.ordinal)
        pod_spec = template["spec"]
        pod_spec["hostname"] = slot.hostname
        pod_spec["volumes"] = [*pod_spec.get("volumes", []), *self._claim_volumes(slot, pod_spec)]
        if slot.pin_node:
            _pin_to_node(pod_spec, slot.pin_node)
        if self.spec.elastic is not None and slot.ordinal is not None and slot.ordinal < self.spec.elastic.min_replicas:
            _always_on(pod_spec)
        elif slot.ordinal is not None and slot.ordinal in self._boot_times:
            _boot_time(pod_spec, self._boot_times[slot.ordinal])
        metadata: JSON = {"name": slot.name, "labels": labels}
        if template["metadata"].get("annotations"):
            metadata["annotations"] = template["metadata"]["annotations"]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}

    def _claim_volumes(self, slot: PodSlot, pod_spec: JSON) -> list[JSON]:
        taken = {v.get("name") for v in pod_spec.get("volumes", [])}
        return [
            {
                "name": c["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": claim_name(c["metadata"]["name"], slot.name)},
            }
            for c in self.spec.volume_claim_templates
            if c["metadata"]["name"] not in taken
        ]


def _always_on(pod_spec: JSON) -> None:
    """An elastic NodeSet's always-on node is never powered up, so its slurmd keeps the container's boot time
    (no `-b`): a restarted slurmd is then not taken for an unexpected reboot, which sets the node DOWN."""
    for container in pod_spec["containers"]:
        if container["name"] == "slurmd":
            container["args"] = [arg for arg in container["args"] if arg != "-b"]


def _boot_time(pod_spec: JSON, second: int) -> None:
    """An on-demand node's slurmd reports the second slurm_sync first saw Slurm power it up as its boot time
    (`-b` reads SLURMD_BOOT_TIME): after the resume request, as slurmctld needs, and a second or more before the
    node registers, so that slurmctld, which derives boot times in whole seconds, never takes a later registration
    for a reboot (slinky_common/powerreport.py). A restarted slurmd keeps it, like any worker's slurmd."""
    for container in pod_spec["containers"]:
        if container["name"] == "slurmd":
            env = [e for e in container.get("env", []) if e.get("name") != BOOT_TIME_ENV]
            container["env"] = [*env, {"name": BOOT_TIME_ENV, "value": str(second)}]


def _base_template(parent: JSON, spec: NodeSetSpec, controller: Controller, sssd_data: bytes | None) -> JSON:
    labels = {**component_labels("slurmd", spec.name, "worker"), names.LABEL_CLUSTER: spec.controller_name}
    annotations = {
        names.ANNOTATION_DEFAULT_CONTAINER: "slurmd",
        names.ANNOTATION_SSHD_CONF_HASH: content_hash(
            {SSH_CONFIG_KEY: sshd_config(spec)} if spec.ssh_enabled else None
        ),
        names.ANNOTATION_SSSD_CONF_HASH: content_hash({"sssd.conf": sssd_data} if sssd_data is not None else None),
    }
    metadata = child_metadata(parent, spec.name, labels, annotations)
    pod_spec: JSON = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "subdomain": controller.worker_service,
        "dnsConfig": {"searches": [controller.worker_dns_search]},
        "tolerations": [_worker_toleration()],
        "containers": [_slurmd_container(spec, controller)],
        "initContainers": [_logfile_container(spec)],
        "volumes": _volumes(spec, controller),
    }
    if waits_for_topology(spec):
        pod_spec["initContainers"].append(_topology_wait_container(spec, pod_spec["containers"][0]["image"]))
        pod_spec["volumes"].append(_topology_volume())
    return {
        "metadata": {"labels": metadata["labels"], "annotations": metadata.get("annotations", {})},
        "spec": pod_spec,
    }


def _finish_template(spec: NodeSetSpec, controller: Controller, template: JSON) -> JSON:
    """What the user's template must not take away: worker toleration, DNS search, anti-affinity."""
    pod_spec = template["spec"]
    pod_spec.pop("hostname", None)  # set per pod
    if _worker_toleration() not in pod_spec.setdefault("tolerations", []):
        pod_spec["tolerations"].append(_worker_toleration())
    searches = pod_spec.setdefault("dnsConfig", {}).setdefault("searches", [])
    if controller.worker_dns_search not in searches:
        searches.insert(0, controller.worker_dns_search)
    if not spec.oversubscribe_node:
        anti = pod_spec.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
            {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {
                    "matchExpressions": [{"key": names.LABEL_NAME, "operator": "In", "values": ["slurmd"]}]
                },
            }
        )
    return template


def _pin_to_node(pod_spec: JSON, node: str) -> None:
    """Require `metadata.name == node` in every node selector term (terms are ORed, so each needs it)."""
    requirement = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = [*term.get("matchFields", []), requirement]
    required["nodeSelectorTerms"] = terms


def _worker_toleration() -> JSON:
    return {"key": names.TAINT_NODESET_WORKER, "operator": "Equal", "effect": "NoExecute"}


def _slurmd_container(spec: NodeSetSpec, controller: Controller) -> JSON:
    cpus, memory_mib = pod_limits(spec)
    ports = [{"name": "slurmd", "containerPort": wellknown.SLURMD_PORT, "protocol": "TCP"}]
    mounts = [
        {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True},
        {"name": "slurm-logfile", "mountPath": logfile.LOG_DIR},
    ]
    if spec.ssh_enabled:
        ports.append({"name": "ssh", "containerPort": cluster.SSH_PORT, "protocol": "TCP"})
        mounts += [
            {"name": "ssh-config", "mountPath": "/etc/ssh/sshd_config", "subPath": SSH_CONFIG_KEY, "readOnly": True},
            {"name": "sssd-conf", "mountPath": "/etc/sssd/sssd.conf", "subPath": "sssd.conf", "readOnly": True},
        ]
    base = {
        "name": "slurmd",
        "image": cluster.default_image("slurmd"),
        "args": slurmd_args(spec, controller.conf_server),
        "env": [
            *topology_env(spec),
            {"name": "POD_CPUS", "value": str(cpus)},
            {"name": "POD_MEMORY", "value": str(memory_mib)},
        ],
        "ports": ports,
        "startupProbe": _http_probe("/livez", failure_threshold=6, period=10),
        "livenessProbe": _http_probe("/livez", failure_threshold=6, period=10),
        "readinessProbe": _http_probe("/readyz"),
        "securityContext": {"privileged": True, "capabilities": {"add": ["BPF", "NET_ADMIN", "SYS_ADMIN", "SYS_NICE"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["/usr/bin/sh", "-c", PRESTOP_COMMAND]}}},
        "volumeMounts": mounts,
    }
    return merge_container(base, spec.slurmd)


def topology_env(spec: NodeSetSpec) -> list[JSON]:
    """The pod's topology annotation as POD_TOPOLOGY (what the image reads) and SLINKY_TOPOLOGY (Slinky's name
    for it, kept for scripts written against Slinky); none when extraConf sets `Topology=` itself, which wins."""
    if "Topology" in parse_extra_conf(spec.extra_conf):
        return []
    ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{names.ANNOTATION_TOPOLOGY_SPEC}']"}}
    return [{"name": name, "valueFrom": ref} for name in (POD_TOPOLOGY_ENV, "SLINKY_TOPOLOGY")]


def waits_for_topology(spec: NodeSetSpec) -> bool:
    """A wait is asked for and slurmd takes its topology from the pod (not from an extraConf `Topology=`)."""
    return spec.topology_wait > 0 and "Topology" not in parse_extra_conf(spec.extra_conf)


def _topology_wait_container(spec: NodeSetSpec, image: str) -> JSON:
    """Holds slurmd back until the pod carries its Node's topology, for at most `spec.topology_wait` seconds.

    The kubelet resolves slurmd's POD_TOPOLOGY from the pod's annotations when it creates the slurmd
    container, after every init container has finished; this one watches the same annotation through a
    downwardAPI file, which the kubelet refreshes while the pod runs (docs/architecture.md §4.7). It always
    exits 0: after the bound slurmd starts without topology and slurm_sync sets it in Slurm afterwards.
    """
    return {
        "name": TOPOLOGY_WAIT_CONTAINER,
        "image": image,
        "command": ["sh", "-c", TOPOLOGY_WAIT_SCRIPT],
        "env": [
            {"name": "WAIT_SECONDS", "value": str(spec.topology_wait)},
            {"name": "TOPOLOGY_FILE", "value": f"{TOPOLOGY_DIR}/{TOPOLOGY_FILE}"},
        ],
        "volumeMounts": [{"name": TOPOLOGY_VOLUME, "mountPath": TOPOLOGY_DIR, "readOnly": True}],
    }


def _topology_volume() -> JSON:
    field = {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{names.ANNOTATION_TOPOLOGY_SPEC}']"}
    return {"name": TOPOLOGY_VOLUME, "downwardAPI": {"items": [{"path": TOPOLOGY_FILE, "fieldRef": field}]}}


def _logfile_container(spec: NodeSetSpec) -> JSON:
    return logfile.logfile_sidecar(f"{logfile.LOG_DIR}/slurmd.log", spec.logfile)


def _http_probe(path: str, failure_threshold: int | None = None, period: int | None = None) -> JSON:
    probe: JSON = {"httpGet": {"path": path, "port": "slurmd"}}
    if failure_threshold is not None:
        probe["failureThreshold"] = failure_threshold
    if period is not None:
        probe["periodSeconds"] = period
    return probe


def _volumes(spec: NodeSetSpec, controller: Controller) -> list[JSON]:
    sources = [_secret_projection(controller.slurm_key, "slurm.key")] if controller.slurm_key else []
    volumes: list[JSON] = [
        {"name": "slurm-etc", "projected": {"defaultMode": 0o600, "sources": sources}},
        {"name": "slurm-logfile", "emptyDir": {"medium": "Memory"}},
    ]
    if spec.ssh_enabled and spec.sssd_conf_ref:
        volumes += [
            {
                "name": "ssh-config",
                "configMap": {
                    "name": ssh_config_name(spec),
                    "items": [{"key": SSH_CONFIG_KEY, "path": SSH_CONFIG_KEY}],
                    "defaultMode": 0o600,
                },
            },
            {
                "name": "sssd-conf",
                "secret": {
                    "secretName": spec.sssd_conf_ref.name,
                    "items": [{"key": spec.sssd_conf_ref.key, "path": "sssd.conf"}],
                    "defaultMode": 0o600,
                },
            },
        ]
    return volumes


def _secret_projection(ref: KeyRef, path: str) -> JSON:
    return {"secret": {"name": ref.name, "items": [{"key": ref.key, "path": path}]}}


def pod_limits(spec: NodeSetSpec) -> tuple[int, int]:
    """(POD_CPUS, POD_MEMORY in MiB): the slurmd container's limit, else the pod-level limit, else 0."""
    container = ((spec.slurmd.get("resources") or {}).get("limits")) or {}
    pod = ((spec.template_spec.get("resources") or {}).get("limits")) or {}
    cpu = parse_quantity(container.get("cpu", pod.get("cpu")))
    memory = parse_quantity(container.get("memory", pod.get("memory")))
    return _ceil(cpu), _ceil(memory) // 2**20


_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)
_SUFFIXES = {
    None: Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15),
    "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity ('500m', '2Gi', '1e3', 4); 0 when absent or unreadable."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Fraction(value)
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if not match:
        return Fraction(0)
    number = Fraction(match.group(1))
    if match.group(2):
        return number * Fraction(10) ** int(match.group(2)[1:])
    return number * _SUFFIXES[match.group(3)]


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)
