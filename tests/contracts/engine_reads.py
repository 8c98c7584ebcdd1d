"""A static scan of which config keys the engine's run-time code reads from its args mapping.

The engine receives the resolved config as a dict named `args` (or `self.args`) and reads it
with `args["key"]`, `args.get("key")` or a local `get = args.get; get("key")`. Anything else
named args-like is not a config read. Light modules (config, presets, launch, rundir, events,
app) are outside the scan: they validate, they do not run.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIGHT = ("engine/config/", "engine/presets.py", "engine/launch/local.py", "engine/run/rundir.py",
         "engine/run/events.py", "engine/host/machine.py", "engine/host/tracking_support.py")
ARGS_NAMES = {"args", "cfg_args", "resolved"}


def engine_files() -> list[Path]:
    files = sorted((ROOT / "engine").rglob("*.py"))
    return [p for p in files if not str(p.relative_to(ROOT)).startswith(LIGHT)]


def _is_args(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ARGS_NAMES
    return isinstance(node, ast.Attribute) and node.attr == "args"


def _constants(node: ast.expr) -> list[str]:
    """The string keys an index expression can take: "k", or "a" if c else "b"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _constants(node.body) + _constants(node.orelse)
    return []


def _getter_names(tree: ast.AST) -> set[str]:
    """Local names bound to an args getter: `get = args.get`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "get" and _is_args(node.value.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _loop_keys(tree: ast.AST) -> dict[str, list[str]]:
    """Loop variables over a module-level tuple of keys: `for k in _KEYS` -> {"k": [...]}."""
    tuples = {}
    for node in getattr(tree, "body", ()):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
            items = [c for elt in node.value.elts for c in _constants(elt)]
            if items and len(items) == len(node.value.elts):
                tuples.update({t.id: items for t in node.targets if isinstance(t, ast.Name)})
    loops = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension | ast.For) and isinstance(node.iter, ast.Name) \
                and node.iter.id in tuples and isinstance(node.target, ast.Name):
            loops[node.target.id] = tuples[node.iter.id]
    return loops


def _keys_read(tree: ast.AST) -> list[str]:
    getters = _getter_names(tree)
    loops = _loop_keys(tree)

    def keys_of(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Name) and node.id in loops:
            return loops[node.id]
        return _constants(node)

    keys: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_args(node.value):
            keys += keys_of(node.slice)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            via_method = isinstance(func, ast.Attribute) and func.attr in ("get", "pop") and \
                _is_args(func.value)
            via_getter = isinstance(func, ast.Name) and func.id in getters
            if via_method or via_getter:
                keys += keys_of(node.args[0])
    return keys


def engine_reads() -> dict[str, set[str]]:
    """key -> the engine files (relative paths) that read it from the args mapping."""
    reads: dict[str, set[str]] = defaultdict(set)
    for path in engine_files():
        for key in _keys_read(ast.parse(path.read_text(), str(path))):
            reads[key].add(str(path.relative_to(ROOT)))
    return dict(reads)
