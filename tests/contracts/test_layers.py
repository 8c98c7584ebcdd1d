"""The layers of the project, checked on its import graph (tests/contracts/import_graph.py).

Bottom: engine.vocabulary, engine.config, engine.algo (and the two probes config consults)
import nothing of the project above them. Nothing in engine/ imports app/. engine.model (what
trainer and rollout share: model shape, conversion, weight transfer, offload) imports neither
engine.train nor engine.rollout; engine.train never imports engine.rollout, nor engine.rollout
engine.train. No import cycle at module level; lazy imports that close a cycle are
listed below and the list may only shrink. That the TUI never imports torch or ray at import
time is checked in a subprocess (tests/tui/test_import_hygiene.py, tests/contracts/
test_import_hygiene.py), not here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.contracts.import_graph import ROOT, Edge, cycles, import_edges, in_package

BOTTOM = ("ppodeck.engine.vocabulary", "ppodeck.engine.config", "ppodeck.engine.algo",
          "ppodeck.engine.host.machine", "ppodeck.engine.host.memory",  # leaf probes of check()
          "ppodeck.engine.host.tracking_support")

# Cycles closed by lazy (function-level) imports today: none since issue 17's steps 2-4. A
# known debt added here fails the test once it disappears, so the list only shrinks.
KNOWN_LAZY_CYCLES: tuple[tuple[str, ...], ...] = ()
# engine.train -> engine.rollout arrows today (none since weight_transfer moved into train/)
KNOWN_TRAIN_TO_ROLLOUT: tuple[tuple[str, str], ...] = ()


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_edges()


def _shown(edges: list[Edge]) -> str:
    return "\n".join(f"  {e.source} -> {e.target} (line {e.line}, {e.where})"
                     for e in sorted(set(edges), key=lambda e: (e.source, e.line)))


def test_the_graph_sees_the_project(edges: list[Edge]) -> None:
    sources = {e.source for e in edges}
    assert {"ppodeck.app.cli.root", "ppodeck.engine.driver.ppo",
            "ppodeck.engine.config.rules"} <= sources
    assert any(e.where == "function" for e in edges) and any(e.where == "module" for e in edges)


def test_the_bottom_layer_imports_nothing_above_it(edges: list[Edge]) -> None:
    def bottom(module: str) -> bool:
        return any(in_package(module, package) for package in BOTTOM)

    upward = [e for e in edges if bottom(e.source) and not bottom(e.target)]
    assert not upward, f"the bottom layer imports modules above it:\n{_shown(upward)}"


# Each light wing of engine/ and what it may import (besides itself and the bottom words:
# vocabulary, env_vars). host is what the machine is; config the pure flag layer; run the
# run-directory contract; miles and launch sit above them; presets is a loose module.
WINGS = ("host", "config", "run", "launch", "miles", "presets")
WING_MAY_IMPORT = {
    "host": set(),
    "config": {"host"},  # the machine probes check() consults (BOTTOM lists them)
    "presets": {"config", "host", "run"},
    "run": {"config", "host", "presets"},
    "launch": {"config", "host", "run", "presets"},
    "miles": {"config", "host", "run", "presets", "launch"},
}
# lazy arrows from a light wing to the heavy side, each a reader of a heavy module's pure helper
KNOWN_WING_EXCEPTIONS = {("ppodeck.engine.launch.resume_check", "ppodeck.engine.train.checkpoint")}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "engine":
        return None
    return parts[2] if parts[2] in WINGS or parts[2] in ("driver", "algo", "model", "train",
                                                          "rollout") else None


def test_each_wing_imports_only_the_wings_below_it(edges: list[Edge]) -> None:
    wrong = [e for e in edges
             if _wing(e.source) in WING_MAY_IMPORT and _wing(e.target) is not None
             and _wing(e.target) != _wing(e.source)
             and _wing(e.target) not in WING_MAY_IMPORT[_wing(e.source)]
             and (e.source, e.target) not in KNOWN_WING_EXCEPTIONS]
    assert not wrong, f"a wing imports one it may not:\n{_shown(wrong)}"


def test_the_wing_rule_sees_a_wrong_arrow() -> None:
    planted = [Edge("ppodeck.engine.run.health", "ppodeck.engine.miles.watch", 1, "function")]
    with pytest.raises(AssertionError, match="run.health -> ppodeck.engine.miles.watch"):
        test_each_wing_imports_only_the_wings_below_it(planted)


def test_the_vocabulary_imports_nothing_of_the_project(edges: list[Edge]) -> None:
    out = [e for e in edges if e.source == "ppodeck.engine.vocabulary"]
    assert not out, _shown(out)


def test_the_engine_never_imports_the_front_ends(edges: list[Edge]) -> None:
    upward = [e for e in edges
              if in_package(e.source, "ppodeck.engine") and in_package(e.target, "ppodeck.app")]
    assert not upward, f"engine/ imports app/:\n{_shown(upward)}"


def test_train_never_imports_rollout(edges: list[Edge]) -> None:
    arrows = [e for e in edges
              if in_package(e.source, "ppodeck.engine.train")
              and in_package(e.target, "ppodeck.engine.rollout")]
    found = {(e.source, e.target) for e in arrows}
    new = [e for e in arrows if (e.source, e.target) not in KNOWN_TRAIN_TO_ROLLOUT]
    assert not new, f"ppodeck.engine.train imports engine.rollout:\n{_shown(new)}"
    gone = set(KNOWN_TRAIN_TO_ROLLOUT) - found
    assert not gone, f"fixed, remove from KNOWN_TRAIN_TO_ROLLOUT: {sorted(gone)}"


def _arrows(edges: list[Edge], source: str, *targets: str) -> list[Edge]:
    return [e for e in edges if in_package(e.source, source)
            and any(in_package(e.target, target) for target in targets)]


def test_rollout_never_imports_train(edges: list[Edge]) -> None:
    assert any(in_package(e.source, "ppodeck.engine.rollout") for e in edges)
    arrows = _arrows(edges, "ppodeck.engine.rollout", "ppodeck.engine.train")
    assert not arrows, (f"ppodeck.engine.rollout imports engine.train (what both need belongs in "
                        f"ppodeck.engine.model):\n{_shown(arrows)}")


def test_the_model_layer_imports_neither_train_nor_rollout(edges: list[Edge]) -> None:
    sources = {e.source for e in edges}
    assert {"ppodeck.engine.model.convert", "ppodeck.engine.model.ipc_sync"} <= sources
    arrows = _arrows(edges, "ppodeck.engine.model", "ppodeck.engine.train",
                     "ppodeck.engine.rollout")
    assert not arrows, f"ppodeck.engine.model imports the layers above it:\n{_shown(arrows)}"


def test_no_import_cycle_at_module_level(edges: list[Edge]) -> None:
    found = cycles([e for e in edges if e.where == "module"])
    assert not found, f"module-level import cycles: {found}"


def test_lazy_import_cycles_only_shrink(edges: list[Edge]) -> None:
    found = cycles([e for e in edges if e.where != "type-checking"])
    known = [set(group) for group in KNOWN_LAZY_CYCLES]
    new = [group for group in found if not any(set(group) <= k for k in known)]
    assert not new, f"new import cycles (through lazy imports): {new}"
    gone = [group for group in KNOWN_LAZY_CYCLES
            if not any(set(group) & set(f) for f in found)]
    assert not gone, f"these cycles are gone; remove them from KNOWN_LAZY_CYCLES: {gone}"


def _bare_imports(path: Path) -> list[str]:
    """`import engine...` / `from app... import` lines: the names the wheel does not install."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
            else [])
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                  if name.split(".")[0] in ("app", "engine")]
    return found


def test_the_project_is_imported_by_its_one_name() -> None:
    """Every import of PPO Deck's code goes through `ppodeck.` (ppodeck/__init__.py): a bare
    `engine` would fail from a wheel and load a second copy of a module in a checkout."""
    files = [p for folder in ("app", "engine", "tests", "bench", "ppodeck")
             for p in sorted((ROOT / folder).rglob("*.py"))]
    bare = [line for path in files for line in _bare_imports(path)]
    assert not bare, "import these as ppodeck.app / ppodeck.engine:\n" + "\n".join(bare)
