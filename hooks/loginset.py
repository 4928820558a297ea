"""LoginSet → login nodes: SSH host-key Secret, sshd ConfigMap, Service (22) and a Deployment.

Login pods run sackd, which fetches slurm.conf from slurmctld (`--conf-server`), and sshd with
sssd for users. Host keys are what users' known_hosts pin, so they are generated once and then
read back from the observed Secret forever (it is immutable). Generating keys is random by
nature: the first sync of a LoginSet is the one answer that differs between calls; once the
Secret is observed every answer is byte-stable.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from hooks import cluster, contract, invalidspec, references
from hooks.applied import Child, kept
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.controller.model import Controller, controller_ref_name, controller_rule, find_controller
from hooks.objects import child_metadata, content_hash, service
from hooks.podtemplate import apply_pod_template, merge_container
from hooks.references import Missing
from hooks.status import available_condition, workload_ready
from slinky_common import fields, names
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef
from slinky_common.jsontypes import JSON
from slinky_common.wellknown import component_labels, selector_labels

APP = "login"
COMPONENT = "login"
DEPLOYMENT_TYPE = contract.TYPE_DEPLOYMENT
SECRET_TYPE = contract.TYPE_SECRET
HOST_KEY_TYPES = ("rsa", "ed25519", "ecdsa")
HOST_KEY_FILES = tuple(f"ssh_host_{t}_key{ext}" for t in HOST_KEY_TYPES for ext in ("", ".pub"))
# Copies the slurm.key into the writable /etc/slurm with the owner and modes Slurm demands. The owner
# is numeric: the init image (alpine by default) has no `slurm` account to resolve a name with.
INITCONF_SCRIPT = """\
set -eu
for f in /mnt/slurm/*.conf /mnt/slurm/*.key; do
  [ -e "$f" ] || continue
  cp "$f" /mnt/etc/slurm/
done
chown -R "$SLURM_UID:$SLURM_UID" /mnt/etc/slurm
find /mnt/etc/slurm -name '*.conf' -exec chmod 644 {} +
find /mnt/etc/slurm -name '*.key' -exec chmod 600 {} +
"""


@dataclass(frozen=True)
class LoginSetSpec:
    name: str
    namespace: str
    controller: str
    replicas: int
    login: JSON
    initconf: JSON
    template: JSON
    service: JSON
    strategy: JSON
    sssd: KeyRef
    authorized_keys: str
    extra_sshd_config: str

    @property
    def host_keys_secret(self) -> str:
        return f"{self.name}-ssh-host-keys"

    @property
    def ssh_config_map(self) -> str:
        return f"{self.name}-ssh-config"


def parse(parent: JSON) -> LoginSetSpec:
    spec = fields.spec_of(parent)
    sssd = _sssd_ref(spec)
    return LoginSetSpec(
        name=parent["metadata"]["name"],
        namespace=fields.namespace_of(parent),
        controller=controller_ref_name(spec),
        replicas=fields.opt_int(spec, "replicas", 1),
        login=fields.container_override(spec, "login"),
        initconf=fields.container_override(spec, "initconf"),
        template=fields.opt_obj(spec, "template"),
        service=fields.service_override(spec),
        strategy=fields.opt_obj(spec, "strategy"),
        sssd=sssd,
        authorized_keys=fields.opt_str(spec, "rootSshAuthorizedKeys"),
        extra_sshd_config=fields.opt_str(spec, "extraSshdConfig"),
    )


def _sssd_ref(spec: JSON) -> KeyRef:
    sssd = fields.key_ref(spec, "sssdConfRef")
    if sssd is None:
        raise InvalidSpec("spec.sssdConfRef is required")
    return sssd


def customize(req: CustomizeRequest) -> JSON:
    """The Controller (conf server, slurm.key, worker domain) and the sssd.conf Secret."""
    ns, spec = fields.namespace_of(req.parent), fields.spec_of(req.parent)
    return {
        "relatedResources": invalidspec.derivable(
            lambda: [controller_rule(ns, controller_ref_name(spec))],
            lambda: [references.secret_rule(ns, [_sssd_ref(spec).name])],
        )
    }


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse(req.parent)
    host_keys = _host_keys(req, spec)
    ssh_config = build_ssh_config(req.parent, spec)
    children: list[Child] = [host_keys, ssh_config, build_service(req.parent, spec)]
    controller = find_controller(req, spec.namespace, spec.controller)
    sssd = references.secret_value(req, spec.namespace, spec.sssd)
    missing = [m for m in (sssd,) if isinstance(m, Missing)]
    if controller is None:
        missing.insert(0, Missing("ControllerNotFound", f"Controller {spec.controller!r} does not exist"))
    observed = references.observed(req, DEPLOYMENT_TYPE, spec.name)
    if controller is not None and isinstance(sssd, bytes):
        hashes = {
            names.ANNOTATION_SSH_HOST_KEYS_HASH: content_hash(_decoded(host_keys)),
            names.ANNOTATION_SSHD_CONF_HASH: content_hash(ssh_config["data"]),
            names.ANNOTATION_SSSD_CONF_HASH: content_hash({spec.sssd.key: sssd}),
        }
        children.append(build_deployment(req.parent, spec, controller, hashes))
    elif observed is not None:
        children.append(kept(observed))
    response: JSON = {"status": _status(req.parent, spec, observed, missing), "children": children}
    if missing:
        response["resyncAfterSeconds"] = references.MISSING_REFERENCE_RESYNC_SECONDS
    return response


def _status(parent: JSON, spec: LoginSetSpec, deployment: JSON | None, missing: list[Missing]) -> JSON:
    """`replicas` and `selector` feed the scale subresource (and so `kubectl scale` and HPAs)."""
    replicas = ((deployment or {}).get("status") or {}).get("replicas") or 0
    selector = ((deployment or {}).get("spec") or {}).get("selector") or {}
    match = selector.get("matchLabels") or selector_labels(APP, spec.name)
    resolved = references.references_condition(parent, missing)
    return {
        "replicas": replicas,
        "selector": ",".join(f"{k}={v}" for k, v in sorted(match.items())),
        "conditions": [
            workload_ready(parent, resolved, deployment, "Deployment", spec.name, spec.replicas, "login"),
            resolved,
            available_condition(parent, deployment, spec.replicas),
        ],
    }


# --- host keys -------------------------------------------------------------------------------------


def generate_host_keys() -> dict[str, bytes]:
    """Fresh OpenSSH host keys of the three types sshd offers by default."""
    keys: dict[str, rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey] = {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=4096),
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ecdsa": ec.generate_private_key(ec.SECP256R1()),
    }
    files: dict[str, bytes] = {}
    for kind, key in keys.items():
        files[f"ssh_host_{kind}_key"] = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        files[f"ssh_host_{kind}_key.pub"] = (
            key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n"
        )
    return files


def _host_keys(req: CompositeRequest, spec: LoginSetSpec) -> JSON:
    """The observed host-key Secret's data, or new keys when there is none yet.

    An observed Secret is kept even without usable data: it is immutable, so new keys could not be
    applied anyway, and answering fresh random keys each sync would roll the Deployment's hash."""
    observed = references.observed(req, SECRET_TYPE, spec.host_keys_secret)
    data = (observed or {}).get("data")
    if observed is not None:
        encoded = {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}
    else:
        encoded = {k: base64.b64encode(v).decode() for k, v in generate_host_keys().items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(req.parent, spec.host_keys_secret, component_labels(APP, spec.name, COMPONENT)),
        "type": "Opaque",
        "immutable": True,
        "data": dict(sorted(encoded.items())),
    }


def _decoded(secret: JSON) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


# --- the other children ----------------------------------------------------------------------------


def sshd_config(extra: str) -> str:
    return (
        "#\n### GENERAL ###\nInclude /etc/ssh/sshd_config.d/*.conf\nUsePAM yes\nX11Forwarding yes\n"
        f"Subsystem sftp internal-sftp\n#\n### EXTRA CONFIG ###\n{extra}\n"
    )


def build_ssh_config(parent: JSON, spec: LoginSetSpec) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(parent, spec.ssh_config_map, component_labels(APP, spec.name, COMPONENT)),
        "data": {
            "authorized_keys": f"#\n### ROOT AUTHORIZED KEYS ###\n{spec.authorized_keys}\n",
            "sshd_config": sshd_config(spec.extra_sshd_config),
        },
    }


def build_service(parent: JSON, spec: LoginSetSpec) -> JSON:
    return service(
        parent,
        spec.name,
        component_labels(APP, spec.name, COMPONENT),
        selector_labels(APP, spec.name),
        APP,
        cluster.SSH_PORT,
        spec.service,
    )


def _ssh_port(spec: LoginSetSpec) -> int:
    """22, or the containerPort of a user port named `login` (e.g. sshd on another port with hostNetwork)."""
    for port in spec.login.get("ports") or []:
        if isinstance(port, dict) and port.get("name") == APP and isinstance(port.get("containerPort"), int):
            return port["containerPort"]
    return cluster.SSH_PORT


def build_deployment(parent: JSON, spec: LoginSetSpec, controller: Controller, hashes: dict[str, str]) -> JSON:
    labels = component_labels(APP, spec.name, COMPONENT)
    key_mounts = [
        {"name": "ssh-host-keys", "mountPath": f"/etc/ssh/{f}", "subPath": f, "readOnly": True} for f in HOST_KEY_FILES
    ]
    login = merge_container(
        {
            "name": APP,
            "image": cluster.default_image(APP),
            "env": [{"name": "SACKD_OPTIONS", "value": f"--conf-server {controller.conf_server}"}],
            "ports": [{"name": APP, "containerPort": _ssh_port(spec), "protocol": "TCP"}],
            "readinessProbe": {"exec": {"command": ["test", "-S", "/run/slurm/sack.socket"]}},
            "volumeMounts": [
                {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True},
                {"name": "sackd-dir", "mountPath": "/run/slurm"},
                *key_mounts,
                {"name": "ssh-config", "mountPath": "/etc/ssh/sshd_config", "subPath": "sshd_config", "readOnly": True},
                {
                    "name": "ssh-config",
                    "mountPath": "/root/.ssh/authorized_keys",
                    "subPath": "authorized_keys",
                    "readOnly": True,
                },
                {"name": "sssd-conf", "mountPath": "/etc/sssd/sssd.conf", "subPath": "sssd.conf", "readOnly": True},
            ],
        },
        spec.login,
    )
    initconf = merge_container(
        {
            "name": "initconf",
            "image": cluster.default_image(APP),
            "command": ["sh", "-c", INITCONF_SCRIPT],
            "env": [{"name": "SLURM_UID", "value": str(cluster.SLURM_UID)}],
            "volumeMounts": [
                {"name": "slurm-config", "mountPath": "/mnt/slurm", "readOnly": True},
                {"name": "slurm-etc", "mountPath": "/mnt/etc/slurm"},
            ],
        },
        spec.initconf,
    )
    key_sources = (
        [
            {
                "secret": {
                    "name": controller.slurm_key.name,
                    "items": [{"key": controller.slurm_key.key, "path": "slurm.key"}],
                }
            }
        ]
        if controller.slurm_key is not None
        else []
    )
    host_key_items = [{"key": f, "path": f, "mode": 0o644 if f.endswith(".pub") else 0o600} for f in HOST_KEY_FILES]
    pod = {
        "metadata": {"labels": labels, "annotations": {**hashes, names.ANNOTATION_DEFAULT_CONTAINER: APP}},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "dnsConfig": {"searches": [controller.worker_dns_search]},
            "initContainers": [initconf],
            "containers": [login],
            "volumes": [
                {"name": "slurm-etc", "emptyDir": {"medium": "Memory"}},
                {"name": "sackd-dir", "emptyDir": {"medium": "Memory"}},
                {"name": "slurm-config", "projected": {"defaultMode": 0o600, "sources": key_sources}},
                {"name": "ssh-host-keys", "secret": {"secretName": spec.host_keys_secret, "items": host_key_items}},
                {"name": "ssh-config", "configMap": {"name": spec.ssh_config_map, "defaultMode": 0o600}},
                {
                    "name": "sssd-conf",
                    "secret": {
                        "secretName": spec.sssd.name,
                        "defaultMode": 0o600,
                        "items": [{"key": spec.sssd.key, "path": "sssd.conf"}],
                    },
                },
            ],
        },
    }
    user_meta = spec.template.get("metadata") or {}
    deployment_spec: JSON = {
        "replicas": spec.replicas,
        "revisionHistoryLimit": 0,
        "selector": {"matchLabels": selector_labels(APP, spec.name)},
        "template": apply_pod_template(pod, spec.template),
    }
    if spec.strategy:
        deployment_spec["strategy"] = spec.strategy
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(
            parent, spec.name, {**(user_meta.get("labels") or {}), **labels}, user_meta.get("annotations")
        ),
        "spec": deployment_spec,
    }
