"""Ctrl-C in an attached `ppodeck run` of a real tiny-cpu run.

A terminal's Ctrl-C sends SIGINT to the foreground process group: here `ppodeck run` leads its
own group (start_new_session) and the test signals that group, as the terminal would. The driver
is in a session of its own, so only ppodeck's handler decides what reaches it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from ppodeck.engine.run.rundir import RunDir
from tests.reliability import helpers


def _attached_run(tmp_path: Path, started: list[int], *sets: str
                  ) -> tuple[subprocess.Popen[bytes], RunDir]:
    runs_dir = tmp_path / "runs"
    rundir = RunDir(runs_dir / "attached")
    args = ["run", "tiny-cpu", "--run-dir", str(rundir.path), "--set", "num-rollout=40"]
    for item in sets:
        args += ["--set", item]
    with open(tmp_path / "ppodeck.out", "wb") as out:
        proc = subprocess.Popen([*helpers.PPODECK, *args], cwd=helpers.REPO,
                                env=helpers.cli_env(runs_dir), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    started.append(proc.pid)
    helpers.wait_until(lambda: helpers.recorded_status(rundir).get("pid"), 30, "the driver")
    started.append(helpers.recorded_status(rundir)["pid"])
    return proc, rundir


def _ctrl_c(proc: subprocess.Popen[bytes]) -> None:
    import os

    os.killpg(proc.pid, signal.SIGINT)


def test_first_ctrl_c_stops_after_the_rollout_and_saves(tmp_path, started) -> None:
    proc, rundir = _attached_run(tmp_path, started, "save=${RUN_DIR}/checkpoints",
                                 "save-interval=1000")
    driver = helpers.recorded_status(rundir)["pid"]
    watch = helpers.TreeWatch(driver)
    try:
        helpers.wait_rollout(rundir, 1, 180)
        _ctrl_c(proc)
        code = proc.wait(120)
        leftovers = helpers.nothing_left(driver, watch, timeout=30)
    finally:
        watch.stop()
    output = (tmp_path / "ppodeck.out").read_text()
    assert code == 130, output[-2000:]
    status = helpers.recorded_status(rundir)
    assert status["state"] == "stopped", status
    assert status["detail"] == "stopped by request after the current rollout"
    assert "press Ctrl-C again to stop at once" in output
    # --save is set: the rollout it stopped after is in a complete checkpoint
    stopped_at = status["rollout_id"]
    for ckpt in (rundir.checkpoints_critic, rundir.checkpoints):
        assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == \
            str(stopped_at), ckpt
    assert not list(rundir.checkpoints_critic.glob("*.tmp-*"))
    assert leftovers == [], {p: watch.seen.get(p) for p in leftovers}


# A second real run: the nightly bench's (`slow`). The default suite holds it in two halves:
# tests/runs/test_cli_runs.py::test_second_ctrl_c_kills_the_group (ppodeck's second Ctrl-C
# SIGKILLs the driver's group, exit 130, status stopped) and test_driver_kill.py (a SIGKILLed
# real driver leaves no Ray daemon or worker alive, and its end is recorded).
@pytest.mark.slow
def test_second_ctrl_c_stops_at_once(tmp_path, started) -> None:
    proc, rundir = _attached_run(tmp_path, started)
    driver = helpers.recorded_status(rundir)["pid"]
    watch = helpers.TreeWatch(driver)
    try:
        helpers.wait_rollout(rundir, 0, 180)
        _ctrl_c(proc)
        helpers.wait_until(lambda: helpers.recorded_status(rundir).get("state") == "stopping",
                           10, "the stopping state")
        _ctrl_c(proc)
        second = time.monotonic()
        code = proc.wait(60)
        exited_after = time.monotonic() - second
        leftovers = helpers.nothing_left(driver, watch, timeout=30)
    finally:
        watch.stop()
    output = (tmp_path / "ppodeck.out").read_text()
    assert code == 130, output[-2000:]
    assert exited_after < 10, exited_after
    status = helpers.recorded_status(rundir)
    assert status["state"] == "stopped" and "SIGKILL" in status["detail"], status
    assert leftovers == [], {p: watch.seen.get(p) for p in leftovers}
    assert any("ActorWorker" in name or "CriticWorker" in name for name in watch.seen.values())
