"""Make a `helm template` output a bundle `kubectl apply` can take on an empty cluster: prepend a
Namespace for every namespace its objects live in (the release's first) that the chart does not
create itself, so nothing fails for a namespace that does not exist yet. Namespaces named after
`--existing` belong to something else (the bridge's Token lives in the Slurm cluster's): the bundle
uses them but never makes them, or `kubectl delete -f` of the bundle would delete them and all in
them. Reads stdin, writes stdout; every namespace the bundle uses goes to stderr, one a line.

    hack/bundle.py <release namespace> [--existing <namespace>]...
"""

from __future__ import annotations

import sys

import yaml


def namespaces(rendered: str, release_namespace: str) -> list[str]:
    """The release namespace, then every other namespace an object names, sorted."""
    used = {
        doc["metadata"]["namespace"]
        for doc in yaml.safe_load_all(rendered)
        if doc and doc.get("metadata", {}).get("namespace")
    }
    return [release_namespace, *sorted(used - {release_namespace})]


def created(rendered: str) -> set[str]:
    """Namespaces the chart renders itself (the bridge chart's managed namespaces)."""
    return {doc["metadata"]["name"] for doc in yaml.safe_load_all(rendered) if doc and doc.get("kind") == "Namespace"}


def namespace_documents(names: list[str]) -> str:
    return "".join(f"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n" for name in names)


def main() -> None:
    release, *rest = sys.argv[1:]
    existing = {rest[i + 1] for i, word in enumerate(rest[:-1]) if word == "--existing"}
    rendered = sys.stdin.read()
    names = namespaces(rendered, release)
    made = [n for n in names if n not in created(rendered) and n not in existing]
    sys.stdout.write(namespace_documents(made) + rendered)
    sys.stderr.write("".join(name + "\n" for name in names))


if __name__ == "__main__":
    main()
