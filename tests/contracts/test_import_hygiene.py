"""Light modules never import the heavy stack (or textual): checked in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIGHT = ["app.cli", "engine.config", "engine.presets", "engine.events", "engine.rundir",
         "engine.launch", "engine.machine", "engine.jobs", "engine.vocabulary", "engine.runstate"]
HEAVY = ["torch", "ray", "megatron", "sglang", "transformers", "datasets", "textual"]

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))
"""


@pytest.mark.parametrize("module", LIGHT)
def test_light_module_imports_nothing_heavy(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} does not exist yet")
    result = subprocess.run([sys.executable, "-c", PROBE, module], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert not loaded & set(HEAVY), f"{module} pulled in {sorted(loaded & set(HEAVY))}"


def test_engine_config_is_stdlib_only() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, "engine.config"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    loaded = set(json.loads(result.stdout))
    assert not loaded & {"typer", "rich", "tomlkit", "platformdirs", "textual"}
