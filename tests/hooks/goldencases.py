"""The golden cases: representative CRs whose slurm.conf and slurmdbd.conf are pinned byte for byte in
tests/hooks/golden/ (test_golden.py) and whose whole responses are recorded (test_responses.py)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hooks.app import create_app
from tests.support.hooks import by_kind, cr, related, request, secret

GOLDEN = Path(__file__).parent / "golden"


KEYS = {"slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"}, "jwtKeyRef": {"name": "jwt-key", "key": "jwt.key"}}


DBD_SPEC: dict[str, Any] = {
    **KEYS,
    "storageConfig": {"host": "mariadb", "username": "slurm", "passwordKeyRef": {"name": "mariadb", "key": "password"}},
}


def key_secrets() -> list[dict]:
    return [secret("slurm-key", {"slurm.key": b"s" * 32}), secret("jwt-key", {"jwt.key": b"j" * 32})]


def configmap(name: str, keys: list[str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "slurm"},
        "data": dict.fromkeys(keys, "#!/bin/sh\n"),
    }


def nodeset(name: str, **spec) -> dict:
    return cr("NodeSet", name, {"controllerRef": {"name": "slurm"}, **spec})


def deleting(obj: dict) -> dict:
    """`obj` after `kubectl delete` while its finalizer holds it."""
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return obj


@dataclass(frozen=True)
class Case:
    """A hook request (`route`, `body`) and the config text a user gets from its response (`extract`)."""

    route: str
    body: Callable[[], dict]
    extract: Callable[[dict], str]

    def __call__(self) -> str:
        resp = create_app().test_client().post(self.route, json=self.body())
        assert resp.status_code == 200, resp.get_json()
        return self.extract(resp.get_json())


def slurm_conf(spec: dict, *objects: dict) -> Case:
    def body() -> dict:
        return request(cr("Controller", "slurm", {**KEYS, **spec}), rel=related(*key_secrets(), *objects))

    return Case("/controller/sync", body, lambda resp: by_kind(resp)["ConfigMap/slurm-config"]["data"]["slurm.conf"])


def slurmdbd_conf(spec: dict) -> Case:
    def body() -> dict:
        rel = related(*key_secrets(), secret("mariadb", {"password": b"s3cr3t #pass"}))
        return request(cr("Accounting", "slurm", {**DBD_SPEC, **spec}), rel=rel)

    def extract(resp: dict) -> str:
        return base64.b64decode(by_kind(resp)["Secret/slurm-accounting"]["data"]["slurmdbd.conf"]).decode()

    return Case("/accounting/sync", body, extract)


CASES: dict[str, Case] = {
    "slurm.conf.plain": slurm_conf({}),
    "slurm.conf.ha": slurm_conf({"ha": {"enabled": True, "backups": 2}, "persistence": {"existingClaim": "statesave"}}),
    "slurm.conf.accounting": slurm_conf(
        {"accountingRef": {"name": "acct"}, "metrics": {"enabled": True}}, cr("Accounting", "acct", DBD_SPEC)
    ),
    "slurm.conf.external": slurm_conf(
        {
            "external": True,
            "externalConfig": {"host": "slurmctld.example.com", "port": 6817},
            "clusterName": "site",
            "accountingRef": {"name": "acct"},
        },
        cr("Accounting", "acct", {"external": True, "externalConfig": {"host": "slurmdbd.example.com", "port": 6819}}),
    ),
    "slurm.conf.scripts": slurm_conf(
        {
            "prologScriptRefs": [{"name": "prolog"}],
            "epilogScriptRefs": [{"name": "epilog"}],
            "prologSlurmctldScriptRefs": [{"name": "ctld"}],
            "epilogSlurmctldScriptRefs": [{"name": "ctld"}],
        },
        configmap("prolog", ["10-mounts.sh", "00-env.sh"]),
        configmap("epilog", ["cleanup.sh"]),
        configmap("ctld", ["audit.sh"]),
    ),
    "slurm.conf.merged": slurm_conf(
        {
            "jwksKeyRef": {"name": "jwks", "key": "jwks.json"},
            "extraConf": "SchedulerParameters=bf_continue\nslurmctldparameters=enable_stepmgr # ours stay\n"
            "AuthAltParameters=disable_token_creation\nAuthInfo=cred_expire=70\n",
        },
        configmap("jwks", ["jwks.json"]),
    ),
    "slurm.conf.nodesets": slurm_conf(
        {},
        nodeset("gpu", partition={"enabled": True, "config": "MaxTime=UNLIMITED State=UP"}),
        nodeset("cpu"),
        nodeset("login-like", template={"spec": {"hostname": "big-"}}, partition={"enabled": True}),
        nodeset("debug", partition={"enabled": False, "config": "Default=YES"}),
        nodeset("elsewhere", controllerRef={"name": "another"}),
    ),
    # Deleting NodeSets keep their lines, and their partitions refuse new jobs whatever State= they asked for.
    "slurm.conf.deleting": slurm_conf(
        {},
        deleting(nodeset("gpu", partition={"enabled": True, "config": "MaxTime=UNLIMITED state=UP Default=YES"})),
        deleting(nodeset("cpu", partition={"enabled": True})),
        deleting(nodeset("old")),
        nodeset("debug", partition={"enabled": True, "config": "State=UP"}),
    ),
    # GPUs given to slurmd, or a NodeSet's own extraConf Gres=, put their names in GresTypes (merged with the user's).
    "slurm.conf.gres": slurm_conf(
        {"extraConf": "GresTypes=mps\n"},
        nodeset("nvidia", slurmd={"resources": {"limits": {"nvidia.com/gpu": 4}}}),
        nodeset(
            "amd",
            template={"spec": {"containers": [{"name": "slurmd", "resources": {"requests": {"amd.com/gpu": "2"}}}]}},
        ),
        nodeset("typed", extraConf="Gres=gpu:h100:8,shard:16", slurmd={"resources": {"limits": {"nvidia.com/gpu": 8}}}),
        nodeset("cpu", partition={"enabled": True}),
    ),
    # Elastic NodeSets (docs/architecture.md §4.9): every possible node powered down in slurm.conf with the options
    # its pod's slurmd registers with, the partition's ResumeTimeout, and power saving whose programs do nothing.
    "slurm.conf.elastic": slurm_conf(
        {},
        nodeset(
            "gpu",
            elastic={"maxReplicas": 4},
            extraConf="CPUs=4 RealMemory=500 Features=fast",
            slurmd={"resources": {"limits": {"nvidia.com/gpu": 2}}},
            partition={"enabled": True, "config": "MaxTime=UNLIMITED"},
        ),
        nodeset(
            "burst",
            elastic={"minReplicas": 1, "maxReplicas": 12, "suspendTime": 120, "resumeTimeout": 900},
            extraConf="cpus=64 RealMemory=256000 Sockets=2",
            template={"spec": {"hostname": "b"}},
            ordinalPadding=3,
            partition={"enabled": True},
        ),
        nodeset("cpu", partition={"enabled": True}),
    ),
    "slurmdbd.conf.plain": slurmdbd_conf({}),
    "slurmdbd.conf.merged": slurmdbd_conf(
        {
            "jwksKeyRef": {"name": "jwks", "key": "jwks.json"},
            "extraConf": "CommitDelay=1\nAuthInfo=cred_expire=70",
            "storageConfig": {**DBD_SPEC["storageConfig"], "port": 3307, "database": "acct"},
        }
    ),
}
