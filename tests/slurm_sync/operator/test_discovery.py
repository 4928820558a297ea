"""Which Controllers slurm_sync syncs, through which RestApi, under which Slurm cluster name, and the token it
mints for each (slurm_sync/operator/discovery.py)."""

from __future__ import annotations

import jwt
import pytest

from slurm_sync.operator.discovery import TokenSource, plan_clusters
from slurm_sync.slurm.errors import SlurmNoToken
from tests.slurm_sync.kubefixtures import NS, controller_cr, restapi_cr

KEY = b"k" * 32


def test_discovery_takes_the_oldest_restapi_and_either_key_ref() -> None:
    controllers = [
        controller_cr("a"),
        controller_cr("b", ref="jwtHs256KeyRef"),
        controller_cr("c"),
        {"metadata": {"name": "d", "namespace": NS}, "spec": {}},
    ]
    restapis = [
        restapi_cr("a-new", "a", "2026-02-01T00:00:00Z"),
        restapi_cr("a-old", "a", "2026-01-01T00:00:00Z"),
        restapi_cr("b", "b", "2026-01-01T00:00:00Z"),
        restapi_cr("c-elsewhere", "c", "2026-01-01T00:00:00Z", ns="other"),
    ]
    refs, problems = plan_clusters(controllers, restapis, None)
    assert [(r.controller, r.url, r.key_secret) for r in refs] == [
        ("a", f"http://a-old-restapi.{NS}:6820", "a-jwt"),
        ("b", f"http://b-restapi.{NS}:6820", "b-jwt"),
    ]
    assert [p.split(":")[0] for p in problems] == [f"Controller {NS}/c", f"Controller {NS}/d"]
    refs, _ = plan_clusters(controllers[2:3], [], "http://127.0.0.1:16820")
    assert refs[0].url == "http://127.0.0.1:16820"


def test_token_is_short_lived_refreshed_before_expiry_and_on_key_change() -> None:
    now = [1_000_000.0]
    tokens = TokenSource("slurm", 300, clock=lambda: now[0])
    with pytest.raises(SlurmNoToken, match="no JWT key loaded yet"):
        tokens()
    tokens.set_key(KEY, "1")
    first = tokens()
    claims = jwt.decode(first, KEY, algorithms=["HS256"], options={"verify_exp": False})
    assert claims == {"iat": 1_000_000, "exp": 1_000_300, "sun": "slurm"}
    now[0] += 239
    assert tokens() == first
    now[0] += 1  # four fifths of the lifetime
    second = tokens()
    assert second != first
    tokens.set_key(KEY, "1")
    assert tokens() == second
    tokens.set_key(b"n" * 32, "2")
    jwt.decode(tokens(), b"n" * 32, algorithms=["HS256"], options={"verify_exp": False})


def test_discovery_binds_each_cluster_to_its_slurm_cluster_name() -> None:
    named = controller_cr("a")
    named["spec"]["clusterName"] = "prod"
    refs, problems = plan_clusters(
        [
            named,
            controller_cr("b"),
            {
                **controller_cr("c"),
                "spec": {"clusterName": "bad name", "jwtKeyRef": {"name": "c-jwt", "key": "jwt.key"}},
            },
        ],
        [],
        "http://x",
    )
    assert [(r.controller, r.cluster_name) for r in refs] == [("a", "prod"), ("b", f"{NS}_b")]
    assert len(problems) == 1 and problems[0].startswith(f"Controller {NS}/c: cannot tell its Slurm cluster name")


def test_a_controller_with_an_invalid_unrelated_field_is_still_synced() -> None:
    """The hook refuses HA without persistence (InvalidSpec, children kept); the running cluster's pods still
    need pod-protect and drains, so slurm_sync reads only what it needs: the cluster name and the key."""
    ha = controller_cr("ha")
    ha["spec"]["ha"] = {"enabled": True}
    bad_key = {**controller_cr("k"), "spec": {"jwtKeyRef": {"name": "k-jwt"}}}
    refs, problems = plan_clusters([ha, bad_key], [], "http://x")
    assert [(r.controller, r.cluster_name, r.key_secret) for r in refs] == [("ha", f"{NS}_ha", "ha-jwt")]
    assert problems == [f"Controller {NS}/k: spec.jwtKeyRef.key must be a non-empty string; cannot mint a token"]
