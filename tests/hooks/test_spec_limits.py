"""CRD-valid specs the hooks cannot serve in size: an InvalidSpec condition with every child kept, never a hang.

The CRDs allow any int32 (NodeSet replicas, Controller ha.backups), but one NodeSet sync builds
every pod in one response and one Controller renders one SlurmctldHost line per controller.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from hooks.app import create_app
from hooks.controller.model import MAX_BACKUPS
from hooks.nodeset.spec import MAX_REPLICAS
from slinky_common import names

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"


def sample(kind: str, **spec) -> dict:
    body = orjson.loads((EXAMPLES / f"{kind}-sync.json").read_bytes())
    body["parent"]["spec"].update(spec)
    return body


def sync(kind: str, body: dict) -> dict:
    resp = create_app().test_client().post(f"/{kind}/sync", data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def invalid(resp: dict) -> str:
    (cond,) = [c for c in resp["status"]["conditions"] if c["type"] == names.CONDITION_INVALID_SPEC]
    assert cond["status"] == "True"
    return cond["message"]


def kept(body: dict) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for group in body["children"].values() for o in group.values())


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("nodeset", {"replicas": 5_000_000}, "spec.replicas"),
        ("nodeset", {"replicas": 2**31 - 1}, "spec.replicas"),
        (
            "controller",
            {"ha": {"enabled": True, "backups": 10**9}, "persistence": {"existingClaim": "s"}},
            "spec.ha.backups",
        ),
        ("loginset", {"replicas": 2**31}, "spec.replicas"),
        ("restapi", {"replicas": 2**40}, "spec.replicas"),
    ],
)
def test_a_size_the_hook_cannot_serve_is_invalid_spec_with_children_kept(kind, spec, field):
    body = sample(kind, **spec)
    resp = sync(kind, body)
    assert field in invalid(resp)
    assert sorted((c["kind"], c["metadata"]["name"]) for c in resp["children"]) == kept(body)


def test_the_limits_themselves_are_served():
    resp = sync("nodeset", sample("nodeset", replicas=MAX_REPLICAS))
    assert sum(1 for c in resp["children"] if c["kind"] == "Pod") == MAX_REPLICAS
    ha = {"ha": {"enabled": True, "backups": MAX_BACKUPS}, "persistence": {"existingClaim": "state"}}
    conf = next(c for c in sync("controller", sample("controller", **ha))["children"] if c["kind"] == "ConfigMap")
    assert conf["data"]["slurm.conf"].count("SlurmctldHost=") == MAX_BACKUPS + 1
