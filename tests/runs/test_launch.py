"""Launching the driver (a fake one, through PPODECK_DRIVER_MODULE) and stopping it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from ppodeck import IMPORT_ROOT as REPO_ROOT
from ppodeck.engine.launch.local import (
    LaunchError,
    prepare_run,
    start_driver,
    stop_run,
    wait_for_exit,
)
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status, write_status
from ppodeck.engine.run.secrets import restore_secrets, secret_env, without_secrets
from tests.runs.helpers import group_gone, wait_for_state

NASTY = "$(touch pwned-marker); rm -rf ~ `id` | cat > x && echo 'q\"'"


def test_the_driver_runs_in_its_own_group_and_records_itself(created_run, fake_driver) -> None:
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert wait_for_exit(popen, 20) and popen.returncode == 0
    status = read_status(created_run)
    assert status["state"] == "succeeded" and status["detail"] == "all rollouts done"
    assert status["pid"] == popen.pid and status["pgid"] == popen.pid
    assert status["host"] == socket.gethostname() and status["started"] > 0
    events, warnings = read_events(created_run.events_jsonl)
    assert warnings == [] and events[-1]["kind"] == "status"
    assert group_gone(popen.pid)


def test_driver_argv_is_a_list_and_is_never_interpreted(runs_dir, fake_driver) -> None:
    rundir = RunDir(runs_dir / NASTY.replace("/", "_"))
    rundir.path.mkdir(parents=True)
    write_status(rundir, state="created")
    popen = start_driver(rundir)
    fake_driver.append(popen.pid)
    assert wait_for_exit(popen, 20)
    argv = json.loads((rundir.path / "argv.json").read_text())
    assert argv == ["--run-dir", str(rundir.path.resolve())]
    assert not (REPO_ROOT / "pwned-marker").exists() and not Path("pwned-marker").exists()


def test_driver_output_goes_to_driver_log(created_run, fake_driver, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "fail")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert wait_for_exit(popen, 20) and popen.returncode == 1
    assert "fake failure" in created_run.driver_log.read_text()
    assert read_status(created_run)["state"] == "failed"


def test_the_driver_module_must_be_a_module_name(created_run, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_DRIVER_MODULE", "os; rm -rf /")
    with pytest.raises(LaunchError, match="PPODECK_DRIVER_MODULE.*not a Python module name"):
        start_driver(created_run)


def test_graceful_stop_reaches_the_whole_group(created_run, fake_driver, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "wait")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    wait_for_state(created_run, "running")
    while not (created_run.path / "grandchild.pid").exists():
        assert popen.poll() is None
        time.sleep(0.01)
    said = stop_run(created_run)
    assert "SIGINT" in said and "after the current rollout" in said
    assert wait_for_exit(popen, 20) and popen.returncode == 0
    assert read_status(created_run)["state"] == "stopped"
    assert group_gone(popen.pid)


def test_force_stop_kills_the_group_and_records_it(created_run, fake_driver, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "wait")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    wait_for_state(created_run, "running")
    assert "SIGKILL" in stop_run(created_run, force=True)
    assert wait_for_exit(popen, 20) and popen.returncode == -signal.SIGKILL
    status = read_status(created_run)
    assert status["state"] == "stopped" and "killed" in status["detail"]
    assert group_gone(popen.pid)


def test_stopping_a_finished_run_does_nothing(created_run: RunDir) -> None:
    write_status(created_run, state="succeeded")
    assert "not running" in stop_run(created_run)


def test_stopping_a_run_whose_driver_vanished_marks_it_lost(created_run: RunDir) -> None:
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    write_status(created_run, state="running", pid=child, pgid=child)
    assert "lost" in stop_run(created_run)
    assert read_status(created_run)["state"] == "lost"


def test_wait_for_exit_by_pid(created_run: RunDir, fake_driver) -> None:
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert wait_for_exit(popen.pid, 20)
    assert not wait_for_exit(os.getpid(), 0.05)


# ------------------------------------------------------------ needs engine.config / presets


@pytest.fixture
def nasty_config():
    from ppodeck.engine.config import RunConfig

    return RunConfig({"wandb_project": NASTY, "wandb_key": "s3cret-key", "num_rollout": 2})


def test_secrets_travel_by_environment_not_files(nasty_config) -> None:
    env = secret_env(nasty_config)
    assert env == {"PPODECK_SECRET_WANDB_KEY": "s3cret-key"}
    public = without_secrets(nasty_config)
    assert not public.is_set("wandb_key") and public.get("wandb_project") == NASTY
    assert restore_secrets(public, env).get("wandb_key") == "s3cret-key"


def test_prepare_run_writes_config_command_and_status(runs_dir, nasty_config) -> None:
    presets = pytest.importorskip("ppodeck.engine.presets")

    rundir = prepare_run(nasty_config, "smoke", launched=1234.5)
    command = rundir.command_txt.read_text()
    assert "s3cret" not in command and "s3cret" not in rundir.config_toml.read_text()
    tokens = shlex.split(command)
    assert tokens[tokens.index("--wandb-project") + 1] == NASTY  # verbatim, quoted once
    assert tokens[tokens.index("--wandb-key") + 1].strip("*") == ""
    saved = presets.config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    assert saved.get("wandb_project") == NASTY and not saved.is_set("wandb_key")
    status = read_status(rundir)
    assert status["state"] == "created" and status["preset"] == "smoke"
    assert status["num_rollout"] == 2 and status["pid"] is None
    assert status["launched"] == 1234.5  # when the command started: the forecast's "launch"


def test_prepare_run_never_reuses_a_non_empty_dir(tmp_path, nasty_config) -> None:
    pytest.importorskip("ppodeck.engine.presets")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "events.jsonl").write_text("")
    with pytest.raises(LaunchError, match="not empty"):
        prepare_run(nasty_config, "smoke", tmp_path / "taken")
    assert prepare_run(nasty_config, "smoke", tmp_path / "fresh").path == tmp_path / "fresh"


def test_light_modules_do_not_import_heavy_packages() -> None:
    import subprocess

    code = ("import sys, ppodeck.engine.run.events, ppodeck.engine.run.rundir, "
            "ppodeck.engine.launch.local, ppodeck.app.cli.runs; "
            "heavy = {'torch', 'ray', 'megatron', 'transformers', 'textual', 'sglang'}; "
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"

