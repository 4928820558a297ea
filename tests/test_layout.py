"""The layout shows the architecture: packages per resource and loop, no prefixed siblings, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("hooks", "slurm_sync")


def modules() -> dict[str, Path]:
    """Every module of our packages by dotted name (a package by its own name, via __init__)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def runtime_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules `name` imports when it runs (imports under `if TYPE_CHECKING:` only annotate)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            out.update(submodules)
            if base in known and len(submodules) < len(node.names):  # a name defined by `base` itself
                out.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return out - {name} - ancestors  # a package is always initialised before its modules


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: runtime_imports(path, name, known) for name, path in mods.items()}


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_hooks_never_import_slurm_sync() -> None:
    graph = import_graph()
    offenders = {
        name: sorted(t for t in targets if t.startswith("slurm_sync"))
        for name, targets in graph.items()
        if name.startswith("hooks")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("folder", sorted({p.parent for package in PACKAGES for p in (REPO / package).rglob("*.py")}))
def test_no_module_is_named_with_a_sibling_prefix(folder: Path) -> None:
    """`nodeset_spec.py` beside `nodeset.py` means a package is missing (hooks/nodeset/spec.py)."""
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").exists()
    }
    prefixed = sorted(n for n in names for other in names if n != other and n.startswith(other + "_"))
    assert prefixed == [], f"{folder.relative_to(REPO)}: {prefixed}"


def test_each_resource_with_several_modules_and_each_loop_is_a_package() -> None:
    for package in (
        "hooks/nodeset",
        "hooks/controller",
        "hooks/bridge",
        "slurm_sync/slurm",
        "slurm_sync/operator",
        "slurm_sync/bridge",
    ):
        assert (REPO / package / "__init__.py").exists(), package
