"""Bad input to slurm_sync is one clear line naming the setting and the file (or Secret), and readiness
names it; never a traceback every pass (issue 22, points 5 and 6). Against the real API server and Slurm.

* An empty ``jwt.key`` in the Controller's JWT key Secret: one error line naming the Secret and the key,
  said once while it lasts, ``/readyz`` naming it; the cluster syncs as soon as the key is right.
* A missing ``--token-file`` on the bridge side: the setting and the file in the pass's line and in
  ``/readyz``, no traceback.
* slurmrestd refusing a token: a wrong key (a current token) and an expired token say different things.
"""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path

import jwt
import pytest
from kubernetes import client

from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop, token_file
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.discovery import TokenSource
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmRejected
from tests.fixtures.slurm import SlurmLab
from tests.kube.kubeapi import create_cr
from tests.slurm_sync.apiserverrig import cluster_objects


def secret(key: bytes) -> dict:
    return {"metadata": {"name": "slurm-jwt"}, "data": {"jwt.key": base64.b64encode(key).decode()}}


def test_an_empty_jwt_key_is_one_line_naming_the_secret_and_readiness_names_it(
    slurm_lab: SlurmLab, kube_api: client.ApiClient, kube_namespace: str, installed_crds: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token) as slurm:
        slurm.ping()
        cluster_name = str(slurm.cluster)
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(kube_namespace, secret(b""))
    for obj in cluster_objects(kube_namespace, "slurm", cluster_name):
        create_cr(kube_api, obj, kube_namespace)
    config = Config(namespaces=(kube_namespace,), slurm_url=slurm_lab.rest_url, token_user="slurm")
    service = Service(config, Kube(kube_api), Metrics())
    why = f"JWT key Secret {kube_namespace}/slurm-jwt: key 'jwt.key' is empty"
    try:
        with caplog.at_level(logging.DEBUG, logger="slurm_sync"):
            for _ in range(3):
                assert not service.run_pass()
        ready, text = service.health.ready()
        assert not ready and f"{kube_namespace}/slurm: {why}" in text, text
        said = [r for r in caplog.records if why in r.getMessage()]
        assert [r.levelno for r in said] == [logging.ERROR, logging.DEBUG, logging.DEBUG], said
        assert not any(r.exc_info for r in caplog.records), "a traceback"
        core.replace_namespaced_secret("slurm-jwt", kube_namespace, secret(slurm_lab.jwt_key_file.read_bytes()))
        assert service.run_pass()
        assert service.health.ready() == (True, "ok")
    finally:
        service.close()


def test_a_missing_token_file_is_named_by_the_pass_and_readiness(
    slurm_lab: SlurmLab, kube_api: client.ApiClient, kube_namespace: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    missing = tmp_path / "token"
    kube, metrics = Kube(kube_api), Metrics()
    slurm = SlurmClient(slurm_lab.rest_url, token_file(str(missing)), token_origin=f"--token-file {missing}")
    bridge = BridgeLoop(slurm, BridgeKube(kube), metrics, [kube_namespace])
    service = Service(Config(mode="bridge"), kube, metrics, bridge)
    why = f"--token-file {missing}: cannot read it: No such file or directory"
    try:
        with caplog.at_level(logging.INFO, logger="slurm_sync"):
            assert not service.run_pass()
        ready, text = service.health.ready()
        assert not ready and why in text, text
        assert any(why in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        assert not any(r.exc_info for r in caplog.records), "a traceback"
        missing.write_text(slurm_lab.token)
        assert service.run_pass()
        assert service.health.ready() == (True, "ok")
    finally:
        service.close()


def test_a_wrong_key_and_an_expired_token_say_different_things(slurm_lab: SlurmLab, tmp_path: Path) -> None:
    wrong = TokenSource("slurm", 300)
    wrong.set_key(b"w" * 32, "1")
    origin = "JWT key Secret ns/slurm-jwt"
    with SlurmClient(slurm_lab.rest_url, wrong, token_origin=origin) as slurm, pytest.raises(SlurmRejected) as refused:
        slurm.list_nodes()
    assert "slurmrestd refused the token from JWT key Secret ns/slurm-jwt (user 'slurm', valid until" in str(
        refused.value
    ) and str(refused.value).endswith("wrong key or user?")
    expired = tmp_path / "token"
    now = int(time.time())
    claims = {"iat": now - 900, "exp": now - 600, "sun": "slurm"}
    expired.write_text(jwt.encode(claims, slurm_lab.jwt_key_file.read_bytes(), algorithm="HS256"))
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 600))
    reading = token_file(str(expired))
    with (
        SlurmClient(slurm_lab.rest_url, reading, token_origin=f"--token-file {expired}") as slurm,
        pytest.raises(SlurmRejected) as refused,
    ):
        slurm.list_nodes()
    assert str(refused.value).endswith(f"the token from --token-file {expired} expired at {at}"), refused.value
