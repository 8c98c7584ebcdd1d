"""The TUI is SIGKILLed while a run goes on; a new TUI attaches and shows the whole history.
And a TUI action that fails becomes a notification, never a traceback."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.messages import TailEnded
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.engine.config import RunConfig
from ppodeck.engine.launch.local import prepare_run, start_driver
from tests.reliability import helpers


def _tui_in_pty(run_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes],
                                                               bytearray]:
    """`run_tui(attach=RUN)` on a real pseudo-terminal; its output is drained in a thread
    (a TUI blocks once the pty buffer is full)."""
    master, slave = pty.openpty()
    code = f"from ppodeck.app.tui.app import run_tui; run_tui(attach={str(run_path)!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=helpers.REPO,
                            env={**env, "TERM": "xterm-256color", "COLUMNS": "120",
                                 "LINES": "40"},
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    screen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen.extend(chunk)
        os.close(master)

    threading.Thread(target=drain, daemon=True).start()
    return proc, screen


async def test_killing_the_tui_leaves_the_run_going_and_a_new_tui_sees_it_all(
        runs_dir, isolated_config, started) -> None:
    env = helpers.cli_env(runs_dir, PPODECK_DRIVER_MODULE="tests.reliability.slow_driver",
                          SLOW_DRIVER_ROLLOUTS="12", SLOW_DRIVER_DELAY="0.3")
    rundir = prepare_run(RunConfig(), "slow")
    driver = start_driver(rundir, env={k: env[k] for k in (
        "PPODECK_DRIVER_MODULE", "SLOW_DRIVER_ROLLOUTS", "SLOW_DRIVER_DELAY")})
    started.append(driver.pid)
    tui, screen = _tui_in_pty(rundir.path, env)
    started.append(tui.pid)

    helpers.wait_until(lambda: len(screen) > 2000, 30, "the first TUI to draw")
    await asyncio.sleep(0.5)
    assert tui.poll() is None, bytes(screen[-2000:])
    os.killpg(tui.pid, signal.SIGKILL)
    assert tui.wait(10) == -signal.SIGKILL
    lines_at_kill = len(helpers.events(rundir))

    # the run did not notice: still running, still writing
    assert driver.poll() is None
    helpers.wait_until(lambda: len(helpers.events(rundir)) > lines_at_kill, 10, "new events")
    assert helpers.status_of(rundir)["state"] == "running"
    driver.wait(60)
    assert helpers.status_of(rundir)["state"] == "succeeded"

    app = PPODeckApp(attach=str(rundir.path))
    ended: list[TailEnded] = []
    async with app.run_test(size=(160, 48), message_hook=lambda m: isinstance(
            m, TailEnded) and ended.append(m)) as pilot:
        deadline = time.monotonic() + 20
        while not (ended and isinstance(app.screen, MonitorScreen)):
            assert time.monotonic() < deadline, "the second TUI never finished reading"
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        total = len(rundir.events_jsonl.read_text().splitlines())
        assert app.screen.state.events_seen == total


async def test_a_failing_tui_action_becomes_a_notification(isolated_config, tmp_path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text('schema_version = 1\nname = "broken"\n[flags]\nlr = "fast"\n')
    app = PPODeckApp(preset=str(broken))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        notes = list(app._notifications)
        assert notes, "no notification was shown"
        note = notes[-1]
        assert note.severity == "error" and "broken.toml" in note.message, note.message
        assert "Traceback" not in note.message
        app.attach("no-such-run")  # a second failing action: attaching to a missing run
        await pilot.pause(0.3)
        assert any("no-such-run" in n.message for n in app._notifications)
