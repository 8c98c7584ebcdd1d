"""SVG snapshots of each screen at 80x24 and 160x48 (pytest-textual-snapshot).

Regenerate after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
Everything shown is pinned: built-in presets come from a tmp dir, clocks from event times.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable

import ppodeck.engine.presets
from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.edit import EditScreen
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.screens.presets import PresetPickerScreen
from ppodeck.app.tui.screens.runs import RunsScreen
from tests.tui.conftest import T_END, TEAM_PRESET, freeze_cursors, wait_until

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])


@pytest.fixture(autouse=True)
def pinned_builtins(tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots must not change when someone edits a shipped preset."""
    builtin = tui_env / "builtin"
    builtin.mkdir()
    (builtin / "demo-ppo.toml").write_text(
        TEAM_PRESET.replace('name = "tui-ppo"', 'name = "demo-ppo"')
        .replace("Tiny PPO for the TUI tests (team preset)", "Demo PPO preset (built-in)")
        .replace('tested_hardware = "CPU"', 'tested_hardware = "1 node x 4 NVIDIA H200"'))
    monkeypatch.setattr(ppodeck.engine.presets, "BUILTIN_DIR", builtin)


def tables_sized(screen) -> bool:
    """DataTable sizes its columns on a later refresh (textual 8.2.8, pinned): wait for it."""
    return not any(table._require_update_dimensions for table in screen.query(DataTable))


def settled(screen_type: type, ready=lambda screen: True):
    async def run_before(pilot) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: isinstance(app.screen, screen_type)
                         and ready(app.screen) and tables_sized(app.screen))
        await pilot.pause()
        freeze_cursors(pilot)
        await pilot.pause()
    return run_before


@SIZES
def test_preset_picker(snap_compare, size) -> None:
    assert snap_compare(PPODeckApp(), terminal_size=size,
                        run_before=settled(PresetPickerScreen, lambda s: bool(s.shown)))


@SIZES
def test_flag_editor(snap_compare, size) -> None:
    def ready(screen: EditScreen) -> bool:
        return "kl_coef" in screen.fields() and "num_critic_only_steps" in screen.fields()

    assert snap_compare(PPODeckApp(preset="tui-ppo"), terminal_size=size,
                        run_before=settled(EditScreen, ready))


@SIZES
def test_run_monitor_of_recorded_run(snap_compare, size, recorded_run: Path) -> None:
    assert snap_compare(PPODeckApp(attach=str(recorded_run)), terminal_size=size,
                        run_before=settled(MonitorScreen, lambda s: s.tail_ended is not None))


@SIZES
def test_runs_list(snap_compare, size, recorded_run: Path) -> None:
    async def open_runs(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, PresetPickerScreen))
        pilot.app.open_runs()
        await settled(RunsScreen, lambda s: bool(s.runs))(pilot)

    assert snap_compare(PPODeckApp(now=T_END + 60), terminal_size=size, run_before=open_runs)


@SIZES
def test_samples_view(snap_compare, size, recorded_run: Path) -> None:
    from ppodeck.app.tui.screens.samples import SamplesScreen
    from tests.fixtures.make_samples import write_run

    write_run(recorded_run, rollouts=3, samples=16)

    async def open_samples(pilot) -> None:
        await settled(MonitorScreen, lambda s: s.tail_ended is not None)(pilot)
        await pilot.press("a")
        await settled(SamplesScreen, lambda s: s.loaded is not None)(pilot)
        await pilot.press("down", "tab", "right", "right")  # sample 1, its third token
        await pilot.pause()

    assert snap_compare(PPODeckApp(attach=str(recorded_run)), terminal_size=size,
                        run_before=open_samples)
