"""The bridge's Slurm token and partition in the documented layout (docs/operations.md "Install": charts/slurm in
namespace slurm, the operator in slinky, the bridge in slurm-bridge-system), rendered by the real helm and carried
through the hooks that act on them:

* the bridge chart renders a Token CR beside the Slurm cluster's JWT key (the key never leaves its namespace),
  for SlurmUser, writing the Secret and key slurm_sync is told to read through the API;
* in Slinky's layout (the Secret in the bridge's own namespace) the Secret is mounted as a file, as before;
* charts/slurm with examples/values/slurm-bridge-partition.yaml gives slurm.conf the partition the bridge's jobs
  ask for, made of the nodes the bridge registers for Kubernetes Nodes (their feature).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml

from hooks import token as token_hook
from hooks.app import create_app
from hooks.bridge import node as node_hook
from slinky_common import names
from slurm_sync import __main__ as cli
from slurm_sync.bridge.token import SecretToken
from slurm_sync.kube import Kube
from tests.charts import helm
from tests.slurm_sync.kubefixtures import api_client, refused_url
from tests.support.hooks import by_kind, related, request, secret

Obj = dict[str, Any]
BRIDGE_NS = "slurm-bridge-system"
SLURM_NS = "slurm"
PARTITION_VALUES = Path(__file__).resolve().parents[2] / "examples" / "values" / "slurm-bridge-partition.yaml"


def bridge(values: Obj | None = None) -> list[Obj]:
    return helm.render("slurm-bridge", values or {}, BRIDGE_NS, release="slurm-bridge")


def slurm(values: Obj | None = None) -> list[Obj]:
    """charts/slurm as the page installs it: release slurm in namespace slurm."""
    return helm.render("slurm", values or {}, SLURM_NS, release="slurm")


def one(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    (doc,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def sync_container(docs: list[Obj]) -> tuple[Obj, dict[str, str]]:
    pod = one(docs, "Deployment", "slurm-bridge-slurm-sync")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_token_cr_signs_with_the_slurm_clusters_key_in_its_own_namespace() -> None:
    docs, cluster = bridge(), slurm()
    token = one(docs, "Token")
    controller = one(cluster, "Controller")
    assert token["apiVersion"] == names.API_VERSION
    assert token["metadata"]["namespace"] == controller["metadata"]["namespace"] == SLURM_NS
    assert token["spec"]["jwtKeyRef"] == controller["spec"]["jwtKeyRef"] == {"name": "slurm-auth-jwt", "key": "jwt.key"}
    key = one(cluster, "Secret", "slurm-auth-jwt")
    assert key["metadata"]["namespace"] == SLURM_NS and "jwt.key" in key["data"]
    assert token["spec"]["username"] == "slurm" and token["spec"]["refresh"] is True
    assert token["spec"]["secretRef"] == {"name": "slurm-bridge-token", "key": "auth-token"}
    # Nothing of the bridge's holds or copies the JWT key.
    assert not [d for d in docs if d["kind"] == "Secret" and "jwt.key" in (d.get("data") or {})]


def test_slurm_sync_reads_exactly_the_secret_the_token_cr_writes_through_the_api() -> None:
    docs = bridge()
    ref = one(docs, "Token")["spec"]["secretRef"]
    pod, env = sync_container(docs)
    assert env["SLURM_SYNC_TOKEN_SECRET"] == f"{SLURM_NS}/{ref['name']}"
    assert env["SLURM_SYNC_TOKEN_SECRET_KEY"] == ref["key"]
    assert "SLURM_SYNC_TOKEN_FILE" not in env
    assert not [v for v in pod["volumes"] if "secret" in v], "a pod cannot mount another namespace's Secret"
    args = cli.parse_args(["--" + k.removeprefix("SLURM_SYNC_").lower().replace("_", "-") + "=" + v
                           for k, v in env.items() if k.startswith("SLURM_SYNC_") and v])  # fmt: skip
    tokens = cli.bridge_tokens(args, Kube(api_client(refused_url())))
    assert isinstance(tokens, SecretToken)
    assert (tokens.namespace, tokens.name, tokens.key) == (SLURM_NS, ref["name"], ref["key"])


def test_the_token_hook_writes_a_token_for_slurmuser_where_slurm_sync_reads_it() -> None:
    """The rendered Token through the Token hook (as Metacontroller calls it) with charts/slurm's key Secret: a
    Secret named and keyed as slurm_sync reads it, holding a JWT for the SlurmUser of the cluster's slurm.conf."""
    token, cluster = one(bridge(), "Token"), slurm()
    key = os.urandom(32)
    parent = {**token, "metadata": {**token["metadata"], "uid": "uid-token", "generation": 1}}
    answer = (
        create_app()
        .test_client()
        .post("/token/sync", json=request(parent, rel=related(secret("slurm-auth-jwt", {"jwt.key": key}))))
    )
    assert answer.status_code == 200, answer.get_json()
    written = by_kind(answer.get_json())["Secret/slurm-bridge-token"]
    claims = jwt.decode(base64.b64decode(written["data"]["auth-token"]), key, algorithms=["HS256"])
    assert claims["sun"] == "slurm" and claims["exp"] - claims["iat"] == 15 * 60
    controller = one(cluster, "Controller")
    conf = controller_conf(controller)
    assert f"SlurmUser={claims['sun']}" in conf.splitlines()
    assert token_hook.DEFAULT_USERNAME != "slurm", "the chart must name the user: the CRD's default is not SlurmUser"


def controller_conf(controller: Obj) -> str:
    """slurm.conf as the Controller hook renders it for charts/slurm's Controller and key Secrets."""
    parent = {**controller, "metadata": {**controller["metadata"], "uid": "uid-slurm", "generation": 1}}
    keys = related(
        secret("slurm-auth-slurm", {"slurm.key": os.urandom(32)}), secret("slurm-auth-jwt", {"jwt.key": os.urandom(32)})
    )
    answer = create_app().test_client().post("/controller/sync", json=request(parent, rel=keys))
    assert answer.status_code == 200, answer.get_json()
    return str(by_kind(answer.get_json())["ConfigMap/slurm-config"]["data"]["slurm.conf"])


@pytest.mark.parametrize("namespace", ["", BRIDGE_NS])
def test_slinkys_layout_mounts_the_secret_from_the_bridges_namespace(namespace: str) -> None:
    docs = bridge({"sharedConfig": {"slurmJwtSecretNamespace": namespace}, "token": {"create": False}})
    pod, env = sync_container(docs)
    assert env["SLURM_SYNC_TOKEN_FILE"] == "/var/run/secrets/slurm/auth-token"
    assert "SLURM_SYNC_TOKEN_SECRET" not in env
    assert {"name": "slurm-token", "secret": {"secretName": "slurm-bridge-token"}} in pod["volumes"]
    assert not [d for d in docs if d["kind"] == "Token" or d["metadata"].get("namespace") == SLURM_NS]


def test_a_token_cr_in_the_bridges_own_namespace_feeds_the_mounted_file() -> None:
    docs = bridge({"sharedConfig": {"slurmJwtSecretNamespace": BRIDGE_NS}, "token": {"jwtKeyRef": {"name": "my-key"}}})
    token = one(docs, "Token")
    assert token["metadata"]["namespace"] == BRIDGE_NS
    assert token["spec"]["jwtKeyRef"] == {"name": "my-key", "key": "jwt.key"}
    pod, env = sync_container(docs)
    assert env["SLURM_SYNC_TOKEN_FILE"].endswith("/auth-token")
    assert {"name": "slurm-token", "secret": {"secretName": "slurm-bridge-token"}} in pod["volumes"]


def test_a_secret_of_your_own_elsewhere_is_read_without_a_token_cr() -> None:
    values = {
        "sharedConfig": {"slurmJwtSecretNamespace": "hpc", "slurmJwtSecret": "bridge-jwt"},
        "token": {"create": False},
    }
    docs = bridge(values)
    assert not [d for d in docs if d["kind"] == "Token"]
    _, env = sync_container(docs)
    assert env["SLURM_SYNC_TOKEN_SECRET"] == "hpc/bridge-jwt"
    role = one(docs, "Role", "slurm-bridge-slurm-sync-token")
    assert role["metadata"]["namespace"] == "hpc" and role["rules"][0]["resourceNames"] == ["bridge-jwt"]


def test_no_slurm_sync_no_token_and_no_right() -> None:
    docs = bridge({"slurmSync": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "Token" or d["metadata"].get("namespace") == SLURM_NS]


@pytest.mark.parametrize(("values", "message"), [
    ({"token": {"username": ""}}, "token.username must name the Slurm user"),
    ({"token": {"jwtKeyRef": {"name": ""}}}, "token.jwtKeyRef.name must name the Slurm cluster's JWT key Secret"),
])  # fmt: skip
def test_a_token_without_user_or_key_is_refused_at_render(values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmFailed, match=message):
        bridge(values)


def test_the_notes_name_the_token_and_the_partition() -> None:
    notes = helm._run(
        ["install", "--dry-run=client", "slurm-bridge", str(helm.CHARTS / "slurm-bridge"), "-n", BRIDGE_NS]
    )
    text = notes.partition("NOTES:")[2]
    assert "Slurm must have partition slurm-bridge" in text
    assert "Secret slurm/slurm-bridge-token (key auth-token), kept by Token slurm/slurm-bridge (user slurm)" in text
    assert "kubectl wait --for=condition=Ready -n slurm token/slurm-bridge" in text


# --- the partition -------------------------------------------------------------------------------------------


def test_the_partition_values_give_slurm_the_bridges_partition_of_the_nodes_it_registers() -> None:
    values = yaml.safe_load(PARTITION_VALUES.read_text())
    conf = controller_conf(one(slurm(values), "Controller")).splitlines()
    partition = one(bridge(), "DecoratorController", "slurm-bridge-pod")["metadata"]["annotations"][
        names.ANNOTATION_SETTING_PARTITION
    ]
    assert partition == "slurm-bridge"
    (line,) = [line for line in conf if line.startswith(f"PartitionName={partition} ")]
    words = dict(word.split("=", 1) for word in line.split())
    assert words["State"] == "UP" and words["Default"] == "NO"
    (nodeset,) = [line for line in conf if line.startswith(f"NodeSet={words['Nodes']} ")]
    feature = nodeset.split("Feature=")[1]
    # A Kubernetes Node the bridge registers for that partition gets the NodeSet's feature.
    node = {
        "metadata": {
            "name": "k8s-node-1",
            "labels": {names.LABEL_EXTERNAL_NODE: "true"},
            "annotations": {names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: partition},
        },
        "status": {"capacity": {"cpu": "4", "memory": "8Gi"}},
    }
    registration = node_hook.registration(node)
    assert registration["features"] == [feature] and f"Feature={feature}" in registration["node_conf"].split()
    assert "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED State=UP" in conf, "the default one stays"


def test_without_the_partition_values_slurm_has_no_bridge_partition() -> None:
    conf = controller_conf(one(slurm(), "Controller"))
    assert "PartitionName=slurm-bridge" not in conf
