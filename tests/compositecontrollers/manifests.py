"""Loading and reading the Metacontroller manifests in compositecontrollers/ (shared by the tests here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
MANIFEST_DIR = REPO / "compositecontrollers"
EXAMPLES_DIR = REPO / "examples" / "requests"
CRD_DIR = REPO / "crds"
SCHEMA_FILE = Path(__file__).with_name("metacontroller_schema.yaml")

# docs/architecture.md §3, the fixed hook HTTP contract: every POST route the hook server serves.
COMPOSITE_SEGMENTS = ("controller", "nodeset", "loginset", "restapi", "accounting", "token")
CONTRACT_ROUTES: frozenset[str] = frozenset(
    [f"/{segment}/{hook}" for segment in COMPOSITE_SEGMENTS for hook in ("sync", "customize", "finalize")]
    + ["/bridge/pod/sync", "/bridge/pod/customize", "/bridge/pod/finalize"]
    + ["/bridge/node/sync", "/bridge/node/finalize"]
    + ["/bridge/admission/mutate", "/bridge/admission/validate"]
)

# Kind of each resource a manifest names, to build Metacontroller's `Kind.apiVersion` map keys.
KIND_OF_RESOURCE: dict[tuple[str, str], str] = {
    ("v1", "pods"): "Pod",
    ("v1", "services"): "Service",
    ("v1", "configmaps"): "ConfigMap",
    ("v1", "secrets"): "Secret",
    ("v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("v1", "nodes"): "Node",
    ("apps/v1", "statefulsets"): "StatefulSet",
    ("apps/v1", "deployments"): "Deployment",
    ("policy/v1", "poddisruptionbudgets"): "PodDisruptionBudget",
    ("slinky.slurm.net/v1beta1", "controllers"): "Controller",
    ("slinky.slurm.net/v1beta1", "nodesets"): "NodeSet",
    ("slinky.slurm.net/v1beta1", "loginsets"): "LoginSet",
    ("slinky.slurm.net/v1beta1", "restapis"): "RestApi",
    ("slinky.slurm.net/v1beta1", "accountings"): "Accounting",
    ("slinky.slurm.net/v1beta1", "tokens"): "Token",
}


def load_schema() -> Obj:
    return yaml.safe_load(SCHEMA_FILE.read_text())


def manifest_paths() -> list[Path]:
    return sorted(MANIFEST_DIR.glob("*.yaml"))


def load_manifest(path: Path) -> Obj:
    """The single document of a manifest file (one controller per file)."""
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert len(docs) == 1, f"{path.name}: expected exactly one document, found {len(docs)}"
    return docs[0]


def manifests() -> dict[str, Obj]:
    """File name -> manifest."""
    return {path.name: load_manifest(path) for path in manifest_paths()}


def composites() -> dict[str, Obj]:
    """Parent resource plural (controllers, nodesets, ...) -> its CompositeController."""
    found: dict[str, Obj] = {}
    for doc in manifests().values():
        if doc["kind"] == "CompositeController":
            plural = doc["spec"]["parentResource"]["resource"]
            assert plural not in found, f"two CompositeControllers for {plural}"
            found[plural] = doc
    return found


def decorators() -> dict[str, Obj]:
    """DecoratorController name -> manifest."""
    return {doc["metadata"]["name"]: doc for doc in manifests().values() if doc["kind"] == "DecoratorController"}


def segment_of(plural: str) -> str:
    """`nodesets` -> `nodeset`: the URL segment of a parent kind (docs/architecture.md §3)."""
    return plural.removesuffix("s")


def type_key(api_version: str, resource: str) -> str:
    """Metacontroller's map key for a resource rule: `Kind.version` or `Kind.group/version`."""
    return f"{KIND_OF_RESOURCE[(api_version, resource)]}.{api_version}"


def hooks_of(doc: Obj) -> dict[str, Obj]:
    return doc["spec"].get("hooks", {})


def all_hooks() -> list[tuple[str, str, Obj]]:
    """(manifest name, hook name, hook) for every hook of every manifest."""
    return [
        (doc["metadata"]["name"], name, hook) for doc in manifests().values() for name, hook in hooks_of(doc).items()
    ]


def label_selector_keys(selector: Obj | None) -> set[str]:
    """Every label key a selector mentions."""
    if not selector:
        return set()
    return set(selector.get("matchLabels", {})) | {expr["key"] for expr in selector.get("matchExpressions", [])}


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (nil selects everything, terms are ANDed)."""
    if not selector:
        return True
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
    return True
