"""The launch dialog runs a typed miles checkout's own parser in a worker thread (issue #46):
"checking…" while it runs, keys still answered, then the verdict; a refusal holds the launch."""

from __future__ import annotations

import sys

from textual.app import App
from textual.widgets import Input, Static

from ppodeck.app.tui.screens.confirm import LaunchChoice, LaunchDialog
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.cli.test_miles_parser_gate import ACCEPTS, REFUSES, checkout

PRESET = "qwen3-4b-ppo"
SLOW = "import time\n\n\ndef parse_args():\n    time.sleep(3)\n"  # ends soon after the test


class DialogHost(App):
    def __init__(self) -> None:
        super().__init__()
        self.result: object = None

    def on_mount(self) -> None:
        config = resolve_preset(load_preset(PRESET))
        self.push_screen(
            LaunchDialog("Launch?", "python3 train.py ...", config=config),
            lambda result: setattr(self, "result", result),
        )


def _line(app: App) -> str:
    return str(app.screen.query_one("#miles-parser", Static).render())


async def _answered(pilot, app: App, seconds: float = 20.0) -> str:
    for _ in range(int(seconds / 0.1)):
        await pilot.pause(0.1)
        if "checking" not in _line(app):
            break
    return _line(app)


def _env(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_MILES_PYTHON", sys.executable)
    monkeypatch.delenv("PPODECK_MILES_PARSER_TIMEOUT", raising=False)


async def test_checking_then_accepts_then_launches(tmp_path, monkeypatch) -> None:
    _env(monkeypatch, tmp_path)
    root = checkout(tmp_path / "miles", ACCEPTS)
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.screen.query_one("#miles-root", Input).value = str(root)
        assert "accepts this command" in await _answered(pilot, app)
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result == LaunchChoice(miles_root=str(root))


async def test_a_refusal_holds_the_launch(tmp_path, monkeypatch) -> None:
    _env(monkeypatch, tmp_path)
    root = checkout(tmp_path / "miles", REFUSES)
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.screen.query_one("#miles-root", Input).value = str(root)
        line = await _answered(pilot, app)
        assert "refuses this command" in line and "arguments.py:6" in line
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result is None and isinstance(app.screen, LaunchDialog)


async def test_keys_are_answered_while_it_checks(tmp_path, monkeypatch) -> None:
    """A parser that takes long: the dialog still takes keys, says it is checking, and holds
    Launch until the checkout field is cleared."""
    _env(monkeypatch, tmp_path)
    root = checkout(tmp_path / "miles", SLOW)
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.screen.query_one("#miles-root", Input).value = str(root)
        await pilot.pause(0.3)
        assert _line(app) == "miles' parser: checking…"
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result is None and "still checking" in _line(app)
        app.screen.query_one("#miles-root", Input).value = ""
        await pilot.pause()
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result == LaunchChoice()
