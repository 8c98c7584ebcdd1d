"""The `ppodeck` console entry point: bare, the TUI without the CLI's imports; else the CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _entry_code(argv: list[str], run_tui: str) -> str:
    """Run the installed script's target (pyproject) with `argv`, run_tui replaced."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        module, func = tomllib.load(handle)["project"]["scripts"]["ppodeck"].split(":")
    return (f"import sys\nsys.argv = {['ppodeck', *argv]!r}\n"
            f"import ppodeck.app.tui.app\n{run_tui}\nppodeck.app.tui.app.run_tui = run_tui\n"
            f"from {module} import {func}\n{func}()\n"
            "print('imported:', sorted(m for m in ('typer', 'click', 'ppodeck.app.cli') "
            "if m in sys.modules))\n")


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PPODECK_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_bare_ppodeck_opens_the_tui_without_importing_the_cli(tmp_path: Path) -> None:
    done = _run(_entry_code([], "def run_tui():\n    print('tui opened')"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["tui opened", "imported: []"]


def test_any_argument_goes_to_the_cli(tmp_path: Path) -> None:
    code = _entry_code(["--help"], "def run_tui():\n    print('tui opened')")
    done = _run(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Usage: ppodeck" in done.stdout and "tui opened" not in done.stdout


def test_a_crash_before_the_app_runs_is_one_line_and_a_crash_log(tmp_path: Path) -> None:
    done = _run(_entry_code([], "def run_tui():\n    raise OSError('no terminal')"), tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stderr.startswith("ppodeck: unexpected error: OSError: no terminal (details in ")
    assert "OSError: no terminal" in (tmp_path / "crash.log").read_text()


HEADLESS_RUN_TUI = '''
import asyncio, gc
def run_tui():
    from ppodeck.app.tui.app import PPODeckApp
    from ppodeck.app.tui.screens.presets import PresetPickerScreen
    print("collector on at start:", gc.isenabled())

    async def auto_pilot(pilot):
        for _ in range(200):  # 2 s: before the app's fallback timer (GC_BACK_ON_S)
            if isinstance(pilot.app.screen, PresetPickerScreen) and gc.isenabled():
                break
            await pilot.pause(0.01)
        print("collector on once painted:", gc.isenabled(), gc.get_freeze_count() > 0)
        pilot.app.exit()

    PPODeckApp().run(headless=True, auto_pilot=auto_pilot, size=(100, 30))
'''


def test_start_up_runs_without_the_collector_until_the_picker_is_painted(tmp_path: Path) -> None:
    env_code = f"import os\nos.environ['PPODECK_CONFIG_DIR'] = {str(tmp_path)!r}\n"
    done = _run(env_code + _entry_code([], HEADLESS_RUN_TUI), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["collector on at start: False",
                                            "collector on once painted: True True"]
