"""The project's import graph, read from the source with `ast` (nothing is imported).

Each edge says where the import sits: at module level (it runs when the module is imported:
what makes a cycle), inside a function (lazy), or under `if TYPE_CHECKING:` (never runs).
Layer rules judge every edge, lazy ones included: a lazy import still points the wrong way.
Cycles are judged on module-level edges only, since only those can deadlock an import.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "engine")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    where: str  # "module", "function" or "type-checking"


def module_name(path: Path) -> str:
    """The name a module is imported by: app/ and engine/ live inside the `ppodeck` package."""
    parts = ["ppodeck", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob(
        "*.py"))}


@functools.cache
def parsed(module: str) -> ast.Module:
    """A module's syntax tree, parsed once per test session (the contract tests share it)."""
    path = project_modules()[module]
    return ast.parse(path.read_text(), str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, where: str = "module") -> Iterator[tuple[ast.stmt, str]]:
    """Every import statement with where it runs; class bodies run at import time."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, where
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _imports(node, "function")
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), "type-checking")
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), where)
        else:
            yield from _imports(node, where)


def _targets(node: ast.stmt, source: str, is_package: bool,
             modules: dict[str, Path]) -> Iterator[str]:
    """The project modules an import statement loads (`from pkg import mod` names mod)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        anchor = source.split(".") if is_package else source.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in modules else base


def import_edges() -> list[Edge]:
    modules = project_modules()
    edges = []
    for source, path in modules.items():
        tree = parsed(source)
        is_package = path.name == "__init__.py"
        for node, where in _imports(tree):
            for target in _targets(node, source, is_package, modules):
                owner = _owning_module(target, modules)
                if owner is not None and owner != source:
                    edges.append(Edge(source, owner, node.lineno, where))
    return edges


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    """The project module a dotted name lives in (a name may point inside a module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)
