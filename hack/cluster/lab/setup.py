"""What `make cluster-up` applies before anything runs: the cluster's CRs, and CRDs and CompositeControllers
when the operator chart does not install them.

- Metacontroller's CRDs (hack/cluster/metacontroller-crds.yaml), as its install would.
- By default hack/cluster/up.sh installs charts/slurm-operator with helm, which brings the project's CRDs and
  CompositeControllers; this module then only waits for the CRDs. With a hooks URL (the developer's switch
  CLUSTER_LAB_OPERATOR=worktree), it applies the project's CRDs (crds/) and CompositeControllers
  (compositecontrollers/) itself, each `webhook.service` replaced by `url: <hooks URL><path>`, so the stand-in
  and a real Metacontroller call the work tree's hook server alike.
- What a user brings to the Slurm cluster: namespace slurm, the MariaDB the Accounting names
  (hack/cluster/mariadb.yaml) with a random password in its Secret, and the lab's ssh key pair for the login
  pod. By default hack/cluster/up.sh then installs the cluster itself with `helm install` of charts/slurm
  (hack/cluster/slurm-values.yaml). With `cluster="examples"` (CLUSTER_LAB_CLUSTER=examples) this module
  applies the same cluster from examples/crs/ instead: real random keys in place of the example Secrets'
  placeholders, and what a user on a host without a cgroup v2 hierarchy must set (hack/cluster/lab-patches.yaml).
"""

from __future__ import annotations

import base64
import copy
import secrets
import time
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from lab import kube

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent.parent
CRDS = kube.Resource("apiextensions.k8s.io/v1", "customresourcedefinitions")
COMPOSITE = kube.Resource("metacontroller.k8s.io/v1alpha1", "compositecontrollers")
NAMESPACE = "slurm"
CLUSTERS = ("chart", "examples")
DATABASE_SECRET = "mariadb-password"  # the Secret hack/cluster/mariadb.yaml and the Accounting read


def load(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resource_of(obj: Obj) -> kube.Resource:
    """The plural of the kinds the lab applies."""
    kind = obj["kind"]
    plural = {"PersistentVolumeClaim": "persistentvolumeclaims", "Deployment": "deployments",
              "StatefulSet": "statefulsets", "ConfigMap": "configmaps", "Secret": "secrets",
              "Service": "services", "Namespace": "namespaces", "RestApi": "restapis",
              "CustomResourceDefinition": "customresourcedefinitions",
              "CompositeController": "compositecontrollers", "DecoratorController": "decoratorcontrollers"}  # fmt: skip
    return kube.Resource(obj["apiVersion"], plural.get(kind, kind.lower() + "s"))


def apply(client: kube.Client, obj: Obj) -> None:
    """Create, or replace the spec/data of what exists (keeping its resourceVersion)."""
    res = resource_of(obj)
    meta = obj["metadata"]
    current = client.get(res, meta.get("namespace"), meta["name"])
    if current is None:
        client.create(res, obj)
        return
    merged = {**current, **{k: v for k, v in obj.items() if k not in ("metadata", "status")}}
    merged["metadata"] = {**current["metadata"], **{k: v for k, v in meta.items() if k in ("labels", "annotations")}}
    if merged != current:
        client.update(res, merged)


def with_url_webhooks(cc: Obj, hooks_url: str) -> Obj:
    out = copy.deepcopy(cc)
    for hook in (out["spec"].get("hooks") or {}).values():
        webhook = hook.get("webhook") or {}
        if "service" in webhook:
            del webhook["service"]
            webhook["url"] = hooks_url.rstrip("/") + webhook.pop("path")
    return out


def wait_established(client: kube.Client, names: list[str], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    for name in names:
        while True:
            crd = client.get(CRDS, None, name) or {}
            conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
            if conditions.get("Established") == "True":
                break
            if time.time() > deadline:
                raise TimeoutError(f"CRD {name} not Established within {timeout:.0f} s")
            time.sleep(0.2)


def lab_secrets(examples: list[Obj]) -> list[Obj]:
    """The example Secrets with real random values (auth/slurm and JWT keys, the database password)."""
    values = {"slurm.key": base64.b64encode(secrets.token_bytes(1024)).decode(), "jwt.key": secrets.token_hex(32),
              "password": secrets.token_hex(16)}  # fmt: skip
    out = []
    for secret in (d for d in examples if d["kind"] == "Secret"):
        secret = copy.deepcopy(secret)
        for key in secret.get("stringData", {}):
            if key in values:
                secret["stringData"][key] = values[key]
        out.append(secret)
    return out


def patched(obj: Obj, patches: list[Obj]) -> Obj:
    """An example CR with the lab's patches (merge by kind/name) applied."""
    out = copy.deepcopy(obj)
    for patch in patches:
        if patch["kind"] == obj["kind"] and patch["metadata"]["name"] == obj["metadata"]["name"]:
            _merge(out, patch)
    return out


def _merge(base: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def login_key(lab_dir: Path) -> str:
    """The lab's ssh key pair (lab_dir/ssh/id_ed25519), made once; returns the public key line."""
    private = lab_dir / "ssh" / "id_ed25519"
    if not private.exists():
        key = ed25519.Ed25519PrivateKey.generate()
        private.parent.mkdir(parents=True, exist_ok=True)
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()))  # fmt: skip
        private.chmod(0o600)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        private.with_suffix(".pub").write_text(public.decode() + " cluster-lab\n")
    return private.with_suffix(".pub").read_text()


def metacontroller_crds(client: kube.Client) -> None:
    """Metacontroller's own CRDs, which its install brings (docs/getting-started.md, step 2)."""
    crds = load(HERE / "metacontroller-crds.yaml")
    for crd in crds:
        apply(client, crd)
    wait_established(client, [c["metadata"]["name"] for c in crds])


def examples() -> list[Obj]:
    return [d for p in sorted((REPO / "examples" / "crs").glob("*.yaml")) for d in load(p)]


def setup(client: kube.Client, hooks_url: str | None, lab_dir: Path, with_composite: bool = True,
          cluster: str = "chart") -> None:  # fmt: skip
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster {cluster!r}: want one of {', '.join(CLUSTERS)}")
    crds = [d for p in sorted((REPO / "crds").glob("*.yaml")) for d in load(p)]
    if hooks_url is not None:
        metacontroller_crds(client)
        for crd in crds:
            apply(client, crd)
    wait_established(client, [c["metadata"]["name"] for c in crds])  # the chart's, else these
    if hooks_url is not None and with_composite:
        for path in sorted((REPO / "compositecontrollers").glob("*.yaml")):
            for cc in load(path):
                if cc["kind"] == "CompositeController":
                    apply(client, with_url_webhooks(cc, hooks_url))
    apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    crs = examples()
    key = login_key(lab_dir)  # the chart gets it with --set-file (up.sh)
    for secret in lab_secrets(crs):
        if cluster == "chart" and secret["metadata"]["name"] != DATABASE_SECRET:
            continue  # the chart makes its own keys
        if client.get(kube.SECRETS, NAMESPACE, secret["metadata"]["name"]) is None:  # keys never rotate under a cluster
            client.create(kube.SECRETS, secret)
    for obj in load(HERE / "mariadb.yaml"):
        apply(client, obj)
    if cluster == "examples":
        apply_examples(client, crs, key)


def apply_examples(client: kube.Client, crs: list[Obj], login_public_key: str) -> None:
    """examples/crs/ with the lab's patches; the example's placeholder login key replaced by the lab's, so tests
    can log in as a user would."""
    patches = load(HERE / "lab-patches.yaml")
    patches.append({"kind": "LoginSet", "metadata": {"name": "slurm-login-slinky"},
                    "spec": {"rootSshAuthorizedKeys": login_public_key}})  # fmt: skip
    for obj in [p for p in patches if p["kind"] == "ConfigMap"]:
        apply(client, obj)
    for obj in crs:
        if obj["kind"] != "Secret":
            apply(client, patched(obj, patches))
