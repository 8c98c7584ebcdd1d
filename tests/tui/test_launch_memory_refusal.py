"""The TUI's launch dialog shows the memory pre-flight's refusal (engine/launch/memory_check.py),
and launching here is then refused with the same words; nothing is started."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from textual.widgets import Static

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.engine.host.memory import Holdings
from tests.conftest import CPU_MACHINE
from tests.tui.conftest import wait_until
from tests.tui.test_edit_screen import SIZE, open_editor


async def test_the_launch_dialog_shows_what_the_machine_cannot_hold(
        tui_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ppodeck.engine.launch.local as launch
    import ppodeck.engine.launch.memory_check as memory_check

    starved = dataclasses.replace(CPU_MACHINE, holdings=Holdings(None, 24.0, 0.5))
    monkeypatch.setattr(memory_check, "fresh_machine", lambda: starved)  # 0.5 GiB available
    started: list[Path] = []
    monkeypatch.setattr(launch, "start_driver", lambda rundir, env=None: started.append(rundir))
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.screen.id == "confirm-launch")
        body = str(app.screen.query_one("#dialog-text", Static).render())
        assert "cannot hold the run now" in body
        assert "0.5 GiB available of 24.0 GiB RAM" in body and "Fix:" in body
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: any("not launched" in str(n.message)
                                            for n in app._notifications))
    assert not started and not list((tui_env / "runs").iterdir())
