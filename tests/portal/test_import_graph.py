"""The packages' import graph, read from the source (every import, at module top or inside
a function): no module reaches itself through its imports, the apps depend in the intended
directions only, nothing is imported by name, and sparksim stays free of Django."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("portal", "lanes", "jobs", "routing", "benchmarks", "metrics", "sparksim")
APPS = ("portal", "lanes", "jobs", "routing", "benchmarks", "metrics")
# (importer, imported): the packages an app must never import.
FORBIDDEN = {
    ("lanes", "jobs"), ("lanes", "routing"), ("routing", "jobs"), ("jobs", "routing"),
    ("sparksim", "portal"), ("sparksim", "lanes"), ("sparksim", "jobs"), ("sparksim", "routing"),
    ("sparksim", "benchmarks"), ("lanes", "benchmarks"), ("routing", "benchmarks"), ("portal", "benchmarks"),
    # metrics reads lanes, jobs (transports, job counts) and routing (the request log); none reads it.
    ("lanes", "metrics"), ("jobs", "metrics"), ("routing", "metrics"), ("sparksim", "metrics"),
    ("portal", "metrics"), ("metrics", "benchmarks"),
}
# The project's URL module mounts every app's API router on the one /api/ NinjaAPI: its one
# allowed edge into an app the rest of portal must not import.
ROUTER_MOUNTS = {("portal.urls", "benchmarks.api")}
# The demo's simulated cluster is the portal's one door into sparksim.
SPARKSIM_USERS = {"portal.demo_cluster"}
NAME_BASED = {"importlib", "__import__", "import_module", "import_string"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported name, absolute
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


MODULES = source_files()


def imports_of(module: str, path: Path) -> Iterator[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            yield Import(module, source, node.lineno)
            for alias in node.names:
                yield Import(module, f"{source}.{alias.name}", node.lineno)


def own_module(target: str) -> str | None:
    """The project module an imported name lives in (the most specific one), if any."""
    name = target
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


ALL_IMPORTS = [found for module, path in MODULES.items() for found in imports_of(module, path)]


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in ALL_IMPORTS:
        target = own_module(found.target)
        if target is not None and target != found.module:
            edges[found.module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_known_edges() -> None:
    edges = graph()
    assert "lanes.selectors" in edges["jobs.kinds.lane"]
    assert "lanes.api" in edges["portal.urls"] and "portal.api" in edges["lanes.api"]
    assert "sparksim.cluster" in edges["portal.demo_cluster"]


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize(("importer", "imported"), sorted(FORBIDDEN))
def test_the_apps_depend_in_the_intended_directions(importer: str, imported: str) -> None:
    wrong = [f"{found.module}:{found.line} imports {found.target}" for found in ALL_IMPORTS
             if found.module.split(".")[0] == importer and found.target.split(".")[0] == imported
             and (found.module, own_module(found.target)) not in ROUTER_MOUNTS]
    assert wrong == []


def test_sparksim_imports_no_django() -> None:
    wrong = [f"{found.module}:{found.line}" for found in ALL_IMPORTS
             if found.module.split(".")[0] == "sparksim" and found.target.split(".")[0] in ("django", "channels", "ninja")]
    assert wrong == []


def test_only_the_demo_cluster_module_uses_sparksim() -> None:
    users = {found.module for found in ALL_IMPORTS
             if found.module.split(".")[0] in APPS and found.target.split(".")[0] == "sparksim"}
    assert users == SPARKSIM_USERS


def test_the_apps_import_nothing_by_name() -> None:
    wrong = []
    for module, path in MODULES.items():
        if module.split(".")[0] not in APPS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
            elif isinstance(node, ast.Call):
                func = node.func
                names = [func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""]
            wrong += [f"{module}:{node.lineno} {name}" for name in names if name.split(".")[0] in NAME_BASED]
    assert wrong == []
