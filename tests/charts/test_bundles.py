"""`make manifests`: the kubectl-apply bundles create every namespace their objects live in."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts import helm

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    dist = tmp_path_factory.mktemp("dist")
    helm.helm()
    out = subprocess.run(
        ["make", "--no-print-directory", "manifests", f"DIST={dist}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = {
        name: [d for d in yaml.safe_load_all((dist / name).read_text()) if d]
        for name in ("install.yaml", "install-bridge.yaml")
    }
    return out, docs


@pytest.mark.parametrize(
    ("bundle", "expected", "existing"),
    # The bridge's token: a Token CR and a Role in the Slurm cluster's namespace (the bridge chart's token values),
    # which the bundle uses but must never create: `kubectl delete -f` of it would delete the Slurm cluster.
    [("install.yaml", {"slinky"}, set()), ("install-bridge.yaml", {"slurm-bridge-system", "slurm-bridge"}, {"slurm"})],
)
def test_each_bundle_creates_every_namespace_it_owns_before_using_it(
    bundles, bundle: str, expected: set[str], existing: set[str]
) -> None:
    _, docs = bundles
    objects = docs[bundle]
    created = [d["metadata"]["name"] for d in objects if d["kind"] == "Namespace"]
    assert sorted(created) == sorted(expected), "each namespace exactly once"
    used = {d["metadata"]["namespace"] for d in objects if d["metadata"].get("namespace")}
    assert used == expected | existing
    for namespace in used - existing:
        first_use = next(i for i, d in enumerate(objects) if d["metadata"].get("namespace") == namespace)
        assert any(d["kind"] == "Namespace" and d["metadata"]["name"] == namespace for d in objects[:first_use]), (
            namespace
        )


def test_the_closing_message_names_both_bundles_and_their_namespaces(bundles) -> None:
    out, _ = bundles
    last = out.strip().splitlines()[-1]
    assert "install.yaml (namespace slinky)" in last
    bridge = "install-bridge.yaml (namespaces slurm-bridge-system,slurm,slurm-bridge; slurm, the Slurm cluster's, must"
    assert bridge in last


def test_bundles_use_the_projects_image(bundles) -> None:
    _, docs = bundles
    for objects in docs.values():
        images = {
            c["image"]
            for d in objects
            if d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]
        }
        assert images and all(i.startswith("ghcr.io/slinky-metacontroller/slinky-metacontroller:") for i in images)


def test_bundles_use_the_image_make_image_was_told_to_build(tmp_path: Path) -> None:
    """`make image IMAGE_REPOSITORY=... IMAGE_TAG=...` then `make manifests` with the same: the bundles run it."""
    helm.helm()
    subprocess.run(
        ["make", "--no-print-directory", "manifests", f"DIST={tmp_path}", "IMAGE_REPOSITORY=registry.example/slinky",
         "IMAGE_TAG=9.9"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    for name in ("install.yaml", "install-bridge.yaml"):
        images = {
            c["image"]
            for d in yaml.safe_load_all((tmp_path / name).read_text())
            if d and d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]
        }
        assert images == {"registry.example/slinky:9.9"}, (name, images)
