"""Light modules never import the heavy stack (or textual): checked in a fresh interpreter.

The line is drawn by package, not by a list: every module directly under engine/, the light
wings (engine.config, engine.run, engine.launch, engine.miles, engine.host) and app.cli are
light; engine.driver, engine.model, engine.train,
engine.rollout and engine.algo are the heavy side, which only the driver process (and the
prepare worker) load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.contracts.import_graph import module_name

REPO = Path(__file__).resolve().parents[2]
HEAVY = ["torch", "ray", "megatron", "sglang", "transformers", "datasets", "textual"]
HEAVY_PACKAGES = ["ppodeck.engine.driver", "ppodeck.engine.model", "ppodeck.engine.train",
                  "ppodeck.engine.rollout", "ppodeck.engine.algo"]
LIGHT_PACKAGES = ["ppodeck.engine.config", "ppodeck.engine.run", "ppodeck.engine.launch",
                  "ppodeck.engine.miles", "ppodeck.engine.host", "ppodeck.app.cli"]

PROBE = """
import importlib, json, sys
heavy, packages = set(json.loads(sys.argv[1])), tuple(json.loads(sys.argv[2]))
pulled = {}
for module in json.loads(sys.argv[3]):
    importlib.import_module(module)
    for name in sys.modules:
        if (name.split('.')[0] in heavy or name.startswith(packages)) and name not in pulled:
            pulled[name] = module
print(json.dumps(pulled))
"""


def light_modules() -> list[str]:
    """Every module directly under engine/, and every module of the light packages."""
    top = [module_name(p) for p in sorted((REPO / "engine").glob("*.py"))]
    folders = [REPO / package.removeprefix("ppodeck.").replace(".", "/")
               for package in LIGHT_PACKAGES]
    inside = [module_name(p) for folder in folders for p in sorted(folder.rglob("*.py"))]
    return [m for m in top + inside if not m.endswith("__main__")]


def test_the_light_side_is_found_by_package() -> None:
    found = light_modules()
    assert {"ppodeck.engine.launch.prepare", "ppodeck.engine.launch.local",
            "ppodeck.engine.launch.jobs", "ppodeck.engine.config.resolve",
            "ppodeck.engine.run.events",
            "ppodeck.engine.miles.watch", "ppodeck.engine.host.machine",
            "ppodeck.app.cli.runs"} <= set(found)
    assert not any(m.startswith(tuple(HEAVY_PACKAGES)) for m in found)


def test_light_modules_import_nothing_heavy() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(HEAVY_PACKAGES),
         json.dumps(light_modules())],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    pulled = json.loads(result.stdout)
    assert not pulled, "\n".join(f"{light} imported {heavy}" for heavy, light in pulled.items())


def test_engine_config_is_stdlib_only() -> None:
    code = PROBE.replace("name.split('.')[0] in heavy or name.startswith(packages)",
                         "name.split('.')[0] in heavy")
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(["typer", "rich", "tomlkit", "platformdirs",
                                                 "textual"]), "[]",
         json.dumps(["ppodeck.engine.config"])],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {}
