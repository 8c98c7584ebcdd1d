"""The TUI stays light: importing every TUI module pulls in no training stack."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "ray", "megatron", "transformers", "datasets", "sglang")
MODULES = ("ppodeck.app.tui.app", "ppodeck.app.tui.screens.edit",
           "ppodeck.app.tui.screens.monitor", "ppodeck.app.tui.screens.presets",
           "ppodeck.app.tui.screens.runs", "ppodeck.app.tui.screens.help",
           "ppodeck.app.tui.commands", "ppodeck.engine.run.state")


def test_tui_imports_no_heavy_module() -> None:
    code = (f"import importlib, sys\nfor m in {MODULES!r}: importlib.import_module(m)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
