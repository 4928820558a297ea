"""The real-Slurm harness itself: hack/slurm/up.sh gives the suite what it promises.

Every test talks to the real slurmrestd; none of them can pass against a dead or
misconfigured lab.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import httpx
import jwt
import pytest

from tests.fixtures.slurm import SlurmLab, parse_version, wait_for

pytestmark = pytest.mark.slurm

NODES = {"n1", "n2", "n3", "n4"}
SUPPORTED_API = {"v0.0.43", "v0.0.44", "v0.0.45"}  # docs/architecture.md §5: Slurm 25.05 and newer


@pytest.fixture(scope="module")
def rest(slurm_lab: SlurmLab) -> Iterator[httpx.Client]:
    with slurm_lab.client() as client:
        yield client


def _nodes(rest: httpx.Client, lab: SlurmLab) -> dict[str, dict]:
    resp = rest.get(lab.path("nodes"))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["errors"] == [], body["errors"]
    return {node["name"]: node for node in body["nodes"]}


def _node(rest: httpx.Client, lab: SlurmLab, name: str) -> dict:
    resp = rest.get(lab.path(f"node/{name}"))
    assert resp.status_code == 200, resp.text
    (node,) = resp.json()["nodes"]
    return node


def test_openapi_lists_data_parsers_with_a_supported_version(rest: httpx.Client) -> None:
    resp = rest.get("/openapi/v3")
    assert resp.status_code == 200, resp.text
    spec = resp.json()
    parsers = {p["plugin"] for p in spec["info"]["x-slurm"]["data_parsers"]}
    served = {m.group(1) for path in spec["paths"] if (m := re.match(r"^/slurm/(v0\.0\.\d+)/", path))}
    print(f"slurmrestd data parsers: {sorted(parsers)}; /slurm/ path versions: {sorted(served)}")
    assert parsers & SUPPORTED_API, f"none of {sorted(SUPPORTED_API)} in {sorted(parsers)}"
    # every advertised parser really serves the endpoints the project uses
    paths = {path.rstrip("/") for path in spec["paths"]}  # collections are listed as "/nodes/"
    for version in parsers:
        for what in ("ping", "nodes", "node/{node_name}", "job/submit"):
            assert f"/slurm/{version}/{what}" in paths, f"{version} lacks {what}"


def test_slurm_is_26_05_or_newer(rest: httpx.Client, slurm_lab: SlurmLab, record_property) -> None:
    resp = rest.get(slurm_lab.path("ping"))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["errors"] == []
    assert body["pings"] and all(p["responding"] for p in body["pings"]), body["pings"]
    slurm = body["meta"]["slurm"]
    release = slurm["release"]
    numbers = tuple(int(slurm["version"][k]) for k in ("major", "minor", "micro"))
    record_property("slurm_version", release)
    print(f"Slurm version reported by slurmrestd: {release} (REST {slurm_lab.api_version})")
    assert numbers >= (26, 5), release
    assert parse_version(release) == numbers
    assert release == slurm_lab.version, "up.sh recorded a different SLURM_VERSION in .slurm-lab/env"


def test_four_nodes_exist_and_reach_idle(rest: httpx.Client, slurm_lab: SlurmLab) -> None:
    nodes = wait_for(
        lambda: _nodes(rest, slurm_lab),
        lambda ns: set(ns) == NODES and all(n["state"] == ["IDLE"] for n in ns.values()),
        what="n1..n4 IDLE",
    )
    for name, node in nodes.items():
        assert node["features"] == [name], "each node's feature is its own name (lets jobs pin a node)"
        assert "debug" in node["partitions"]


def test_nodes_have_typed_fake_gpus_a_job_gets_by_index(rest: httpx.Client, slurm_lab: SlurmLab) -> None:
    """The bridge's DRA tests need GRES Slurm tracks per device: one GPU type per node, named after the
    DRA device class."""
    gres = {name: node["gres"] for name, node in _nodes(rest, slurm_lab).items()}
    assert gres == {"n1": "gpu:gpu.nvidia.com:4", "n2": "gpu:gpu.nvidia.com:4", "n3": "gpu:gpu.example.com:2",
                    "n4": "gpu:gpu.example.com:2"}  # fmt: skip
    out = slurm_lab.run("srun", "-w", "n4", "--gres=gpu:gpu.example.com:2", "-t", "1", "sh", "-c", "echo gres-ok")
    assert "gres-ok" in out.stdout, out.stdout + out.stderr
    refused = slurm_lab.run("srun", "-w", "n4", "--gres=gpu:gpu.example.com:3", "-t", "1", "true")
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr


@pytest.mark.parametrize("user", ["root", "slurm"])
def test_pyjwt_token_from_key_file_is_accepted(slurm_lab: SlurmLab, user: str) -> None:
    key = slurm_lab.jwt_key_file.read_bytes()
    now = int(time.time())
    claims = {"iat": now, "exp": now + 300, "sun": user}
    good = jwt.encode(claims, key, algorithm="HS256")
    forged = jwt.encode(claims, bytes(b ^ 0xFF for b in key), algorithm="HS256")
    url = slurm_lab.rest_url + slurm_lab.path("nodes")

    ok = httpx.get(url, headers={"X-SLURM-USER-TOKEN": good}, timeout=30)
    assert ok.status_code == 200, ok.text
    assert ok.json()["errors"] == []
    assert {n["name"] for n in ok.json()["nodes"]} == NODES

    # control: slurmctld really checks the signature, so the 200 above proves the key
    bad = httpx.get(url, headers={"X-SLURM-USER-TOKEN": forged}, timeout=30)
    assert bad.status_code != 200, bad.text
    assert any("authentication" in e.get("error", "").lower() for e in bad.json()["errors"]), bad.text


def test_admin_drain_is_visible_over_rest_then_resumed(rest: httpx.Client, slurm_lab: SlurmLab) -> None:
    reason = f"harness test {uuid.uuid4().hex[:8]}"
    try:
        drain = slurm_lab.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={reason}")
        assert drain.returncode == 0, drain.stderr
        node = wait_for(
            lambda: _node(rest, slurm_lab, "n2"),
            lambda n: "DRAIN" in n["state"] and n["reason"] == reason,
            what="n2 drained over REST",
        )
        assert node["reason_set_by_user"] == "root"
    finally:
        resume = slurm_lab.run("scontrol", "update", "nodename=n2", "state=resume")
    assert resume.returncode == 0, resume.stderr
    # right after RESUME the node is IDLE+NOT_RESPONDING until slurmctld pings it
    wait_for(
        lambda: _node(rest, slurm_lab, "n2"),
        lambda n: n["state"] == ["IDLE"] and not n["reason"],
        what="n2 resumed to plain IDLE",
    )
