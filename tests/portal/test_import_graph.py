"""The packages' import graph, read from the source (every import, at module top or inside
a function): no module reaches itself through its imports, no package reaches a floor above
it through any chain of imports (a path, not only an edge: docs/architecture.md), nothing is
imported by name, and sparksim reaches no Django."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The floors, bottom first. Each package may reach (through any chain of imports, at module
# top or inside a function) only the packages listed for it; the project package sits on top
# and reaches every app, and nothing reaches it. docs/architecture.md draws the same floors.
MAY_REACH: dict[str, set[str]] = {
    "sparksim": set(),  # the simulated Spark: no Django, no app
    "core": set(),  # the shared kernel: roles, audit, broadcast, API base, validators, ...
    "lanes": {"core", "sparksim"},  # sparksim only through lanes.demo_cluster
    "jobs": {"lanes", "core", "sparksim"},
    "routing": {"lanes", "core", "sparksim"},
    "gateway": {"routing", "lanes", "core", "sparksim"},
    "metrics": {"gateway", "routing", "jobs", "lanes", "core", "sparksim"},
    "benchmarks": {"metrics", "gateway", "routing", "jobs", "lanes", "core", "sparksim"},
    "guardian": {"metrics", "gateway", "routing", "jobs", "lanes", "core", "sparksim"},
    "portal": {"guardian", "benchmarks", "metrics", "gateway", "routing", "jobs", "lanes", "core", "sparksim"},
}
PACKAGES = tuple(MAY_REACH)
APPS = tuple(package for package in PACKAGES if package != "sparksim")
# The demo's simulated cluster is the apps' one door into sparksim.
SPARKSIM_USERS = {"lanes.demo_cluster"}
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
    assert "lanes.api" in edges["portal.urls"] and "core.api" in edges["lanes.api"]
    assert "sparksim.cluster" in edges["lanes.demo_cluster"]
    assert "routing.decision" in edges["gateway.route"]


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def package_of(module: str) -> str:
    return module.split(".")[0]


def path_between(edges: dict[str, set[str]], start: str, goal: Callable[[str], bool]) -> list[str] | None:
    """The shortest chain of imports from `start` to a module `goal` accepts (breadth first)."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if goal(node) and node != start:
            chain = [node]
            while (previous := came_from[chain[-1]]) is not None:
                chain.append(previous)
            return chain[::-1]
        for nxt in sorted(edges.get(node, ())):
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    return None


def forbidden_paths(edges: dict[str, set[str]], may_reach: dict[str, set[str]]) -> list[str]:
    """One chain per module that reaches a package its own package may not reach."""
    wrong = []
    for module in sorted(edges):
        package = package_of(module)
        allowed = may_reach[package] | {package}
        chain = path_between(edges, module, lambda node, allowed=allowed: package_of(node) not in allowed)
        if chain is not None:
            wrong.append(" -> ".join(chain))
    return wrong


def test_the_path_finder_finds_a_path_not_only_an_edge() -> None:
    edges = {"jobs.a": {"jobs.b"}, "jobs.b": {"lanes.c"}, "lanes.c": {"routing.d"}, "routing.d": set()}
    may_reach = {"jobs": {"lanes"}, "lanes": {"routing"}, "routing": set()}
    # No edge runs from jobs to routing, but a path does: jobs.a -> jobs.b -> lanes.c -> routing.d.
    assert forbidden_paths(edges, may_reach) == ["jobs.a -> jobs.b -> lanes.c -> routing.d",
                                                 "jobs.b -> lanes.c -> routing.d"]


def test_the_floors_are_a_ladder() -> None:
    """What a package may reach, its floors below may reach too (no floor skips back up)."""
    for package, below in MAY_REACH.items():
        assert package not in below
        for lower in below:
            assert MAY_REACH[lower] <= below, (package, lower)


def test_no_package_reaches_a_floor_above_it() -> None:
    assert forbidden_paths(graph(), MAY_REACH) == []


@pytest.mark.parametrize(("importer", "imported"), [
    ("jobs", "routing"), ("routing", "jobs"), ("routing", "gateway"), ("lanes", "jobs"), ("metrics", "benchmarks"),
    *((app, "portal") for app in APPS if app != "portal"), ("sparksim", "core"),
])
def test_the_named_paths_do_not_exist(importer: str, imported: str) -> None:
    edges = graph()
    found = [chain for module in sorted(edges) if package_of(module) == importer
             if (chain := path_between(edges, module, lambda node: package_of(node) == imported))]
    assert found == []


def test_sparksim_reaches_no_django() -> None:
    """Not directly, and not through any module of ours it imports."""
    django_users = {found.module for found in ALL_IMPORTS
                    if found.target.split(".")[0] in ("django", "channels", "ninja", "celery")}
    edges = graph()
    wrong = [" -> ".join(chain) for module in sorted(edges) if package_of(module) == "sparksim"
             if (chain := [module] if module in django_users else path_between(edges, module, django_users.__contains__))]
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
