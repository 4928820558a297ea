"""The layout shows the architecture: packages per resource and loop, no prefixed siblings, no import cycles,
and the two halves (hooks, slurm_sync) sharing only slinky_common."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("hooks", "slinky_common", "slurm_sync")
# Which top-level packages each may import; TYPE_CHECKING imports count (an annotation is a dependency too).
ALLOWED = {
    "hooks": {"hooks", "slinky_common"},
    "slurm_sync": {"slurm_sync", "slinky_common"},
    "slinky_common": {"slinky_common"},
}


def modules() -> dict[str, Path]:
    """Every module of our packages by dotted name (a package by its own name, via __init__)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def project_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules `name` imports, those under `if TYPE_CHECKING:` included: a module that annotates with
    another's types depends on it as much as one that calls it."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
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
    return {name: project_imports(path, name, known) for name, path in mods.items()}


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_halves_share_only_slinky_common() -> None:
    """hooks and slurm_sync never import each other; slinky_common imports neither (docs/architecture.md §1)."""
    graph = import_graph()
    offenders = {
        name: sorted(t for t in targets if t.split(".")[0] not in ALLOWED[name.split(".")[0]])
        for name, targets in graph.items()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_import_reader_sees_annotation_only_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hooks.names import GROUP\n")
    assert project_imports(module, "slinky_common.m", {"hooks.names"}) == {"hooks.names"}


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


def test_starting_slurm_sync_loads_no_hook_module() -> None:
    """What slurm_sync needs of the hooks' vocabulary comes from slinky_common, not from loading the hook server."""
    code = "import slurm_sync.__main__, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'hooks'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def mirrored_test(module: Path) -> Path:
    """Where the tests of `a/b/c.py` live: `tests/a/b/test_c.py` (`__main__.py`: `test_main.py`). Tests of a
    package's behaviour as a whole sit beside them in `tests/a/b/`."""
    parts = module.relative_to(REPO).with_suffix("").parts
    return REPO / "tests" / Path(*parts[:-1]) / f"test_{parts[-1].strip('_')}.py"


def test_each_modules_tests_are_at_its_mirrored_path() -> None:
    missing = [
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path.name != "__init__.py" and not mirrored_test(path).exists()
    ]
    assert missing == []


# Test files beside the mirrored ones that test a package's behaviour as a whole, not one module.
PACKAGE_BEHAVIOUR = frozenset(
    {
        "tests/hooks/bridge/test_slurm_bounds.py",
        "tests/hooks/nodeset/test_busy.py",
        "tests/hooks/nodeset/test_properties.py",
        "tests/hooks/nodeset/test_registration.py",
        "tests/hooks/nodeset/test_topology.py",
        "tests/hooks/test_apply_fixed_point.py",
        "tests/hooks/test_golden.py",
        "tests/hooks/test_init_scripts.py",
        "tests/hooks/test_nesting.py",
        "tests/hooks/test_ready.py",
        "tests/hooks/test_responses.py",
        "tests/hooks/test_spec_limits.py",
    }
)


def names_a_module_beside_it(test_file: Path) -> bool:
    """`tests/a/b/test_c.py` or `tests/a/b/test_c_<aspect>.py` for a module `a/b/c.py`."""
    package = REPO / test_file.parent.relative_to(REPO / "tests")
    modules = {path.stem.strip("_") for path in package.glob("*.py") if path.name != "__init__.py"}
    subject = test_file.stem.removeprefix("test_")
    return any(subject == m or subject.startswith(f"{m}_") for m in modules)


def test_every_test_file_of_a_package_names_its_module_or_is_a_package_behaviour() -> None:
    stray = [
        str(path.relative_to(REPO))
        for package in PACKAGES
        for path in sorted((REPO / "tests" / package).rglob("test_*.py"))
        if not names_a_module_beside_it(path) and str(path.relative_to(REPO)) not in PACKAGE_BEHAVIOUR
    ]
    assert stray == []
    assert sorted(f for f in PACKAGE_BEHAVIOUR if not (REPO / f).exists()) == []


def test_no_test_file_names_its_real_peer() -> None:
    """Which peer is real is a marker (slurm, kube, cluster, gunicorn), not a suffix of the file's name."""
    suffixes = ("_real", "_on_apiserver", "_apiserver", "_on_slurm", "_kube")
    named = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests").rglob("test_*.py"))
        if any(path.stem.endswith(s) and path.stem != f"test{s}" for s in suffixes)  # test_kube.py: kube.py's tests
    ]
    assert named == []


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (`test_*.py`) a file imports: helpers a test shares belong in a helper module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests"):
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [m for m in modules if m.rsplit(".", 1)[-1].startswith("test_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("tests") and ".test_" in a.name]
    return found


def test_no_test_file_imports_another() -> None:
    importing = {
        str(path.relative_to(REPO)): found
        for path in sorted((REPO / "tests").rglob("*.py"))
        if (found := imported_test_modules(path))
    }
    assert importing == {}


def test_a_test_file_names_a_module_by_its_stem_or_an_aspect_of_it() -> None:
    assert names_a_module_beside_it(REPO / "tests/slurm_sync/operator/test_loop_findings.py")
    assert names_a_module_beside_it(REPO / "tests/slurm_sync/test_main_bad_input.py")
    assert not names_a_module_beside_it(REPO / "tests/slurm_sync/test_operator_real.py")
    assert not names_a_module_beside_it(REPO / "tests/hooks/test_nodesetpods.py")


def test_the_mirrored_path_of_a_nested_module_and_of_main() -> None:
    assert mirrored_test(REPO / "hooks/nodeset/spec.py") == REPO / "tests/hooks/nodeset/test_spec.py"
    assert mirrored_test(REPO / "slurm_sync/__main__.py") == REPO / "tests/slurm_sync/test_main.py"


def test_an_import_of_a_test_module_is_found_in_either_form(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from tests.hooks import test_golden\nfrom tests.hooks.test_routes import post\n"
        "import tests.hooks.test_app\nfrom tests.hooks import goldencases\n"
    )
    assert imported_test_modules(source) == [
        "tests.hooks.test_golden",
        "tests.hooks.test_routes",
        "tests.hooks.test_app",
    ]
