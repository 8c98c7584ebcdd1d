"""TUI test fixtures: every user directory in a tmp dir, a recorded run, and a few helpers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EVENTS_TINY = FIXTURES / "events_tiny.jsonl"
RUN_ID = "260101-000000-qwen3-4b-ppo-abcd"
T0 = 1_767_225_600.0  # first event of events_tiny.jsonl
T_END = 1_767_227_895.497  # its last event


@pytest.fixture(autouse=True)
def tui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config, state, runs and team preset dirs under tmp; a fixed PPODECK_HOME so paths shown
    in issues are the same on every machine."""
    for name in ("config", "state", "runs", "team"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PPODECK_PRESET_PATH", str(tmp_path / "team"))
    monkeypatch.setenv("PPODECK_HOME", "/nonexistent/ppodeck-home")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def recorded_run(tui_env: Path) -> Path:
    """A finished run directory holding the recorded events_tiny.jsonl."""
    run = tui_env / "runs" / RUN_ID
    run.mkdir()
    shutil.copy(EVENTS_TINY, run / "events.jsonl")
    status = {"state": "succeeded", "detail": "20 rollouts done", "pid": None, "pgid": None,
              "started": T0, "ended": T_END, "rollout_id": 19, "num_rollout": 20,
              "preset": "qwen3-4b-ppo"}
    (run / "status.json").write_text(json.dumps(status))
    return run


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Pause until `condition()` holds (workers and deferred mounts), failing after timeout."""
    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)
        waited += 0.02


def freeze_cursors(pilot: Pilot) -> None:
    """A blinking cursor would make snapshots flaky."""
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False
