"""Safety of the launcher: code named by shared presets needs explicit consent, processes are
started from argv lists, run directories follow the umask, secrets stay out of previews, and the
driver's reaper cleans up after a SIGKILL (fast checks with stand-in drivers; the real engine is
covered by test_driver_kill.py)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli import app as ppodeck
from ppodeck.engine.config import RunConfig
from ppodeck.engine.launch.local import code_to_run, prepare_run, start_driver
from ppodeck.engine.run.rundir import RunDir, read_status
from tests.reliability import helpers

RUNNER = CliRunner()
FAKE = {"PPODECK_DRIVER_MODULE": "tests.runs.fake_driver", "FAKE_DRIVER_MODE": "succeed"}


@pytest.fixture
def fake_env(runs_dir: Path, isolated_config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in FAKE.items():
        monkeypatch.setenv(key, value)
    return runs_dir


def _shared_preset(tmp: Path) -> Path:
    # code named through passthrough (the engine refuses some code flags, such as
    # --custom-generate-function-path), but the listing and the consent still guard what
    # reaches a run; tests/reliability/test_reward_code_consent.py: the reward code it runs
    return helpers.write_preset(
        tmp / "team.toml", "",
        head='passthrough = ["--train-env-vars", \'{"LD_PRELOAD": "/opt/x.so"}\', '
             '"--custom-generate-function-path=team_gen.generate"]\n')


NAMED = [("--train-env-vars", '{"LD_PRELOAD": "/opt/x.so"}'),
         ("--custom-generate-function-path", "team_gen.generate")]
EXPECTED_LISTING = [f"  {flag:<31}  {value}" for flag, value in NAMED]  # one aligned line each


def test_code_a_preset_names_is_listed_exactly(tmp_path: Path, isolated_config: Path) -> None:
    from ppodeck.engine.presets import load_preset, resolve_preset

    config = resolve_preset(load_preset(str(_shared_preset(tmp_path))))
    assert code_to_run(config) == NAMED


@pytest.mark.parametrize("flags", [[], ["--yes"]], ids=["no flags", "--yes alone"])
def test_code_from_a_shared_preset_does_not_run_without_trust(fake_env: Path, tmp_path: Path,
                                                              flags: list[str]) -> None:
    result = RUNNER.invoke(ppodeck, ["run", str(_shared_preset(tmp_path)), "--detach", *flags])
    assert result.exit_code == 1, result.output
    for line in EXPECTED_LISTING:
        assert line in result.stderr, result.stderr
    assert "--trust" in result.stderr
    assert not fake_env.exists() or not any(fake_env.iterdir())


def test_trust_lets_it_run_after_showing_it(fake_env: Path, tmp_path: Path,
                                           started: list[int]) -> None:
    result = RUNNER.invoke(ppodeck, ["run", str(_shared_preset(tmp_path)), "--detach", "--yes",
                                     "--trust"])
    assert result.exit_code == 0, result.output
    assert EXPECTED_LISTING[0] in result.stderr
    rundir = RunDir(fake_env / result.stdout.strip())
    started.append(read_status(rundir)["pid"])
    helpers.wait_until(lambda: read_status(rundir)["state"] == "succeeded", 20, "the run")


def test_built_in_presets_and_the_users_own_flags_need_no_consent(fake_env: Path,
                                                                 started: list[int]) -> None:
    result = RUNNER.invoke(ppodeck, ["run", "tiny-cpu", "--detach"])
    assert result.exit_code == 0 and "would execute" not in result.stderr, result.output
    started.append(read_status(RunDir(fake_env / result.stdout.strip()))["pid"])


def _answer_in_a_pty(args: list[str], answer: bytes, env: dict[str, str]) -> tuple[int, str]:
    """Run ppodeck on a terminal, answer its question, return (exit code, what it printed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*helpers.PPODECK, *args], cwd=helpers.REPO, env=env, stdin=slave,
                            stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    answered = False
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        if not answered and b"Run this code?" in seen:
            os.write(master, answer + b"\n")
            answered = True
    code = proc.wait(30)
    os.close(master)
    return code, seen.decode(errors="replace")


@pytest.mark.parametrize(("answer", "launched"), [(b"n", False), (b"y", True)])
def test_a_terminal_user_is_asked_and_their_answer_holds(fake_env: Path, tmp_path: Path,
                                                         started: list[int], answer: bytes,
                                                         launched: bool) -> None:
    env = {**helpers.cli_env(fake_env), **FAKE}
    code, seen = _answer_in_a_pty(["run", str(_shared_preset(tmp_path)), "--detach"], answer,
                                  env)
    assert "Run this code? [y/N]" in seen and EXPECTED_LISTING[1] in seen, seen
    runs = list(fake_env.iterdir()) if fake_env.exists() else []
    if launched:
        assert code == 0 and len(runs) == 1, seen
        started.append(read_status(RunDir(runs[0]))["pid"])
    else:
        assert code == 1 and runs == [], seen


def test_run_directory_and_files_follow_the_umask(fake_env: Path, started: list[int]) -> None:
    env = {**helpers.cli_env(fake_env), **FAKE}
    done = subprocess.run([*helpers.PPODECK, "run", "tiny-cpu", "--detach"], cwd=helpers.REPO,
                          env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: os.umask(0o027))
    assert done.returncode == 0, done.stderr
    rundir = RunDir(fake_env / done.stdout.strip())
    started.append(read_status(rundir)["pid"])
    helpers.wait_until(lambda: read_status(rundir)["state"] == "succeeded", 20, "the run")
    assert rundir.path.stat().st_mode & 0o777 == 0o750
    for path in (rundir.config_toml, rundir.command_txt, rundir.status_json,
                 rundir.events_jsonl, rundir.driver_log):
        assert path.stat().st_mode & 0o777 == 0o640, path


def test_secrets_are_masked_in_every_preview(isolated_config: Path) -> None:
    secret = "s3cret-preview-canary"
    for args in (["command", "tiny-cpu"], ["command", "tiny-cpu", "--json"],
                 ["validate", "tiny-cpu", "--json"], ["validate", "tiny-cpu"]):
        result = RUNNER.invoke(ppodeck, [*args, "--set", f"wandb-key={secret}"])
        assert secret not in result.output, args
    preview = RUNNER.invoke(ppodeck, ["command", "tiny-cpu", "--set", f"wandb-key={secret}"])
    assert "--wandb-key '********'" in preview.stdout


# ---- the reaper, without Ray: a stand-in driver that starts a worker in its own group

STAND_IN = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from ppodeck.engine.driver.ppo import start_reaper
    from ppodeck.engine.run.rundir import RunDir, write_status
    rundir = RunDir(Path(sys.argv[sys.argv.index("--run-dir") + 1]))
    write_status(rundir, state="running", pid=os.getpid(), pgid=os.getpgid(0))
    start_reaper(rundir)
    # like a Ray worker: its own process group, same session
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              process_group=0)
    (rundir.path / "worker.pid").write_text(str(worker.pid))
    with open(rundir.events_jsonl, "ab") as events:
        events.write(b'{"v":1,"ts":1.0,"kind":"phase","name":"generate","state":"start",'
                     b'"rollout_id":7}\\n{"v":1,"ts":1.0,"kind":"metr')  # killed mid-line
    time.sleep(120)
""")


def test_the_reaper_stops_workers_in_other_groups_and_records_why(runs_dir: Path,
                                                                  started: list[int]) -> None:
    rundir = prepare_run(RunConfig(), "stand-in", run_dir=runs_dir / "odd; touch PWNED")
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, "--run-dir", str(rundir.path)],
                            cwd=helpers.REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(proc.pid)
    worker_file = rundir.path / "worker.pid"
    helpers.wait_until(worker_file.exists, 20, "the stand-in worker")
    time.sleep(0.2)
    worker = int(worker_file.read_text())
    started.append(worker)
    assert os.getpgid(worker) != proc.pid and os.getsid(worker) == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = helpers.wait_final(rundir, 20)
    assert status["state"] == "failed" and "generate (rollout 7)" in status["detail"], status
    assert helpers.nothing_left(proc.pid, timeout=10) == []
    assert not helpers.alive(worker)
    assert not (runs_dir / "PWNED").exists() and not Path("PWNED").exists()
    # the torn line was closed off before the reaper's status event
    from ppodeck.engine.run.events import read_events

    events, warnings = read_events(rundir.events_jsonl)
    assert events[-1]["kind"] == "status" and events[-1]["state"] == "failed"
    assert len(warnings) == 1 and "line 2" in warnings[0]


def test_a_driver_that_could_write_nothing_reads_as_lost(runs_dir: Path,
                                                         started: list[int]) -> None:
    rundir = prepare_run(RunConfig(), "stand-in")
    driver = start_driver(rundir, env={**FAKE, "FAKE_DRIVER_MODE": "stubborn"})
    started.append(driver.pid)
    helpers.wait_until(lambda: helpers.recorded_status(rundir).get("state") == "running", 20,
                       "the stand-in driver")
    os.killpg(driver.pid, signal.SIGKILL)  # driver and all it could have used to say so
    driver.wait()
    listed = RUNNER.invoke(ppodeck, ["runs", "ls"], env={"PPODECK_RUNS_DIR": str(runs_dir)})
    row = next(line for line in listed.stdout.splitlines() if rundir.id in line)
    assert "lost" in row and f"driver process {driver.pid} is gone" in row, row
