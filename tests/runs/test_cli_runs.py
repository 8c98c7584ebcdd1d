"""`ppodeck runs ls | tail | stop | attach | run` through typer's CliRunner, with a fake driver."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli import progress as cli_progress
from ppodeck.app.cli import runs as cli_runs
from ppodeck.engine.launch.local import start_driver
from ppodeck.engine.run.rundir import RunDir, create_run_dir, read_status, write_status
from tests.runs.helpers import group_gone, wait_for_state


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_runs.register(app)
    return app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _event(kind: str, **fields) -> str:
    return json.dumps({"v": 1, "ts": 1_700_000_000.0, "kind": kind, **fields}) + "\n"


@pytest.fixture
def finished_run(runs_dir: Path) -> RunDir:
    rundir = create_run_dir("smoke")
    write_status(rundir, state="succeeded", preset="smoke", started=time.time(), rollout_id=1,
                 num_rollout=2, detail="all rollouts done")
    rundir.events_jsonl.write_text(
        _event("phase", name="generate", state="end", rollout_id=1, seconds=1.5)
        + _event("metrics", step_key="rollout/step", step=1, rollout_id=1,
                 metrics={"rollout/raw_reward": 0.75})
        + _event("offload", model="critic", direction="offload", where="cpu", bytes=2**31,
                 seconds=0.5, gbps=4.3, noop=False)
        + _event("status", state="succeeded", detail="all rollouts done")
        + '{"v": 1, "ts": 1.0, "kind": "lo'
    )
    return rundir


def test_runs_ls_shows_a_table_and_json(app, runner, finished_run) -> None:
    result = runner.invoke(app, ["runs", "ls"])
    assert result.exit_code == 0, result.output
    assert finished_run.id in result.stdout and "succeeded" in result.stdout
    assert "2/2" in result.stdout
    result = runner.invoke(app, ["runs", "ls", "--json"])
    [run] = json.loads(result.stdout)
    assert run["id"] == finished_run.id and run["state"] == "succeeded"
    assert run["path"] == str(finished_run.path)


def test_runs_ls_root_option_and_empty_root(app, runner, tmp_path) -> None:
    result = runner.invoke(app, ["runs", "ls", "--root", str(tmp_path / "empty")])
    assert result.exit_code == 0 and result.stdout == ""
    assert "no runs under" in result.stderr
    assert runner.invoke(app, ["runs", "ls", "--json", "--root", str(tmp_path)]).stdout == "[]\n"


def test_runs_ls_help_names_the_env_var(app, runner) -> None:
    result = runner.invoke(app, ["runs", "ls", "--help"], terminal_width=200)
    assert "PPODECK_RUNS_DIR" in result.stdout and "Example" in result.stdout


def test_tail_prints_one_line_per_event_and_warns_about_the_torn_line(
        app, runner, finished_run) -> None:
    result = runner.invoke(app, ["tail", finished_run.id[:15]])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert "phase" in lines[0] and "generate end" in lines[0] and "1.50 s" in lines[0]
    assert "rollout/raw_reward=0.75" in lines[1]
    assert "critic offload -> cpu" in lines[2] and "2.00 GiB" in lines[2]
    assert "succeeded: all rollouts done" in lines[3]
    assert "events.jsonl line 5 is incomplete (torn write); skipped" in result.stderr


def test_tail_json_and_kind_filter(app, runner, finished_run) -> None:
    result = runner.invoke(app, ["tail", finished_run.id, "--json", "--kind", "metrics"])
    [event] = [json.loads(line) for line in result.stdout.splitlines()]
    assert event["metrics"] == {"rollout/raw_reward": 0.75}


def test_tail_rejects_an_unknown_kind_with_a_suggestion(app, runner, finished_run) -> None:
    result = runner.invoke(app, ["tail", finished_run.id, "--kind", "metric"])
    assert result.exit_code == 2 and "did you mean metrics?" in result.stderr


def test_unknown_run_is_a_clear_error_without_traceback(app, runner, runs_dir) -> None:
    for command in (["tail", "nope"], ["stop", "nope"], ["attach", "nope"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "no run 'nope'" in result.stderr and "ppodeck runs ls" in result.stderr
        assert "Traceback" not in result.output


def test_tail_follow_stops_when_the_run_ends(app, runner, created_run, fake_driver) -> None:
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    result = runner.invoke(app, ["tail", created_run.id, "--follow", "--kind", "status"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].endswith("succeeded: all rollouts done")
    popen.wait(10)


def test_stop_asks_the_driver_to_stop(app, runner, created_run, fake_driver, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "wait")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    wait_for_state(created_run, "running")
    result = runner.invoke(app, ["stop", created_run.id])
    assert result.exit_code == 0 and "SIGINT" in result.stdout
    assert popen.wait(10) == 0
    assert read_status(created_run)["state"] == "stopped"
    result = runner.invoke(app, ["stop", created_run.id])
    assert "not running" in result.stdout


def test_attach_without_the_tui_says_so(app, runner, finished_run, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ppodeck.app.tui.app", None)  # import fails
    result = runner.invoke(app, ["attach", finished_run.id])
    assert result.exit_code == 2 and "TUI monitor is not available" in result.stderr
    assert f"ppodeck tail {finished_run.id} --follow" in result.stderr


def test_attach_opens_the_tui_on_the_run(app, runner, finished_run, monkeypatch) -> None:
    opened: list[str] = []
    fake_tui = types.ModuleType("ppodeck.app.tui.app")
    fake_tui.run_tui = lambda attach: opened.append(attach)
    monkeypatch.setitem(sys.modules, "ppodeck.app.tui.app", fake_tui)
    assert runner.invoke(app, ["attach", finished_run.id]).exit_code == 0
    assert opened == [str(finished_run.path)]


# ------------------------------------------------------------- the attached view, Ctrl-C


def test_attached_run_prints_a_line_per_rollout(created_run, fake_driver, capsys) -> None:
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert cli_progress.follow_run(created_run, popen, num_rollout=2) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith("rollout 1/2") and "reward 0.5" in out[0]
    assert "value loss 0.25" in out[0]
    assert out[1].startswith("rollout 2/2") and "reward 1.5" in out[1]


def test_failed_run_exits_3_with_detail_and_log(created_run, fake_driver, monkeypatch,
                                                capsys) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "fail")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert cli_progress.follow_run(created_run, popen, num_rollout=2) == 3
    err = capsys.readouterr().err
    assert "ValueError: fake failure" in err and str(created_run.driver_log) in err


def test_a_driver_that_dies_silently_is_recorded_as_failed(created_run, fake_driver,
                                                           monkeypatch, capsys) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "crash")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    assert cli_progress.follow_run(created_run, popen, num_rollout=2) == 3
    status = read_status(created_run)
    assert status["state"] == "failed" and "exited with code 1" in status["detail"]


def _following() -> bool:
    """True while follow_run's Ctrl-C handler is installed (a stray SIGINT would end pytest)."""
    return isinstance(getattr(signal.getsignal(signal.SIGINT), "__self__", None),
                      cli_progress._Interrupts)


def _interrupt_when(condition, count: int = 1) -> threading.Thread:
    """Send SIGINT to this process (as Ctrl-C would) once `condition()` holds, `count` times."""
    def run() -> None:
        for _ in range(count):
            deadline = time.monotonic() + 30
            while not (_following() and condition()):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)  # let the follow loop act on it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_first_ctrl_c_stops_gracefully(created_run, fake_driver, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "wait")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    _interrupt_when(lambda: read_status(created_run).get("state") == "running")
    assert cli_progress.follow_run(created_run, popen, num_rollout=2) == 130
    assert "press Ctrl-C again to stop at once" in capsys.readouterr().err
    assert read_status(created_run)["state"] == "stopped"
    assert group_gone(popen.pid)


def test_second_ctrl_c_kills_the_group(created_run, fake_driver, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "stubborn")
    popen = start_driver(created_run)
    fake_driver.append(popen.pid)
    _interrupt_when(lambda: read_status(created_run).get("state") in ("running", "stopping"), 2)
    assert cli_progress.follow_run(created_run, popen, num_rollout=2) == 130
    assert popen.returncode == -signal.SIGKILL
    status = read_status(created_run)
    assert status["state"] == "stopped" and "killed" in status["detail"]
    assert group_gone(popen.pid)


# ------------------------------------------------------------------------------ ppodeck run


@pytest.fixture
def built_in_preset() -> str:
    presets = pytest.importorskip("ppodeck.engine.presets")
    presets.load_preset("tiny-cpu")
    return "tiny-cpu"


def test_run_detach_prints_the_id_and_starts_the_driver(app, runner, runs_dir, fake_driver,
                                                       built_in_preset) -> None:
    result = runner.invoke(app, ["run", built_in_preset, "--detach", "--set", "eps-clip=0.25",
                                 "--set", "--lr=0.002", "--set", "no-offload-train"])
    assert result.exit_code == 0, result.output
    run_id = result.stdout.strip()
    rundir = RunDir(runs_dir / run_id)
    status = read_status(rundir)
    fake_driver.append(status["pid"])
    assert status["preset"] == "tiny-cpu" and status["pgid"] == status["pid"]
    command = rundir.command_txt.read_text().split()
    assert command[command.index("--eps-clip") + 1] == "0.25"
    assert command[command.index("--lr") + 1] == "0.002" and "--no-offload-train" in command
    assert f"ppodeck attach {run_id}" in result.stderr
    wait_for_state(rundir, "succeeded")


def test_run_attached_follows_to_the_end(app, runner, runs_dir, fake_driver,
                                         built_in_preset) -> None:
    result = runner.invoke(app, ["run", built_in_preset])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith("rollout 2/60")
    assert "succeeded" in result.stderr


def test_run_attached_failure_exits_3(app, runner, runs_dir, fake_driver, monkeypatch,
                                     built_in_preset) -> None:
    monkeypatch.setenv("FAKE_DRIVER_MODE", "fail")
    result = runner.invoke(app, ["run", built_in_preset])
    assert result.exit_code == 3
    assert "ValueError: fake failure" in result.stderr and "driver.log" in result.stderr


@pytest.mark.parametrize(("item", "code", "message"), [
    ("kl-coeff=0.1", 2, "unknown flag --kl-coeff. Did you mean kl-coef?"),
    ("kl-coef", 2, "--kl-coef expects a value"),
    ("eps-clip=abc", 1, "--eps-clip"),
])
def test_run_rejects_a_bad_set_naming_the_flag(app, runner, runs_dir, built_in_preset,
                                               item, code, message) -> None:
    result = runner.invoke(app, ["run", built_in_preset, "--set", item, "--detach"])
    assert result.exit_code == code, result.output
    assert message in result.stderr and "Traceback" not in result.output
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_run_refuses_a_config_with_errors(app, runner, runs_dir, built_in_preset) -> None:
    result = runner.invoke(app, ["run", built_in_preset, "--set", "eps-clip=-1", "--detach"])
    assert result.exit_code == 1
    assert "--eps-clip must be >= 0" in result.stderr and "nothing was launched" in result.stderr
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_run_unknown_preset_is_a_clear_error(app, runner, runs_dir, built_in_preset) -> None:
    result = runner.invoke(app, ["run", "no-such-preset", "--detach"])
    assert result.exit_code == 2 and "no-such-preset" in result.stderr
    assert "Traceback" not in result.output


def test_a_preset_file_that_runs_code_needs_trust(app, runner, runs_dir, tmp_path, fake_driver,
                                                  built_in_preset) -> None:
    # --yes alone no longer allows it (issue #8): tests/reliability/test_safety.py has the rest
    preset = tmp_path / "shared.toml"
    preset.write_text('schema_version = 1\nname = "shared"\ndescription = ""\n'
                      'extends = "tiny-cpu"\n'
                      'passthrough = ["--custom-generate-function-path=evil.gen"]\n[flags]\n')
    result = runner.invoke(app, ["run", str(preset), "--detach"])
    assert result.exit_code == 1
    assert "--custom-generate-function-path  evil.gen" in result.stderr
    assert "--trust" in result.stderr
    result = runner.invoke(app, ["run", str(preset), "--detach", "--yes", "--trust"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(runs_dir / result.stdout.strip())
    fake_driver.append(read_status(rundir)["pid"])
    wait_for_state(rundir, "succeeded")


def test_secrets_reach_the_driver_but_no_file(app, runner, runs_dir, fake_driver,
                                             built_in_preset) -> None:
    result = runner.invoke(app, ["run", built_in_preset, "--set", "wandb-key=s3cret", "--detach"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(runs_dir / result.stdout.strip())
    fake_driver.append(read_status(rundir)["pid"])
    wait_for_state(rundir, "succeeded")
    for path in rundir.path.iterdir():
        assert "s3cret" not in path.read_text(), path


def test_the_ppodeck_app_has_the_run_commands(runner) -> None:
    from ppodeck.app.cli import app as ppodeck

    result = runner.invoke(ppodeck, ["--help"], terminal_width=200)
    for command in ("run", "runs", "tail", "stop", "attach"):
        assert f"  {command} " in result.stdout
    assert "PPODECK_RUNS_DIR" in runner.invoke(ppodeck, ["runs", "ls", "--help"]).stdout
