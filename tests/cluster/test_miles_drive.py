"""`ppodeck run --engine miles` with a stand-in for miles' train.py (tests/miles_standin): a
real Ray head on 127.0.0.1 (the run's private one, shut down when the run ends; or the test
cluster through --submit) runs it as a Ray job with the argv `ppodeck command` shows, and the
dump it writes is watched as the run: rollouts, runs ls, tail, stop and exit codes.

Each run starts a Ray head (10-30 s on 2 shared cores): slow, out of the default suite;
57 s for the file at load 4 (bench/miles_bench.py --tests runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ppodeck.engine.run.rundir import RunDir, pid_alive, read_status
from tests.cluster.conftest import REPO

pytestmark = pytest.mark.slow

STANDIN = REPO / "tests" / "miles_standin"
PRESET = str(STANDIN / "tiny-cpu-standin.toml")  # tiny-cpu, declared for both engines
SETS = ("--set", "num-rollout=3")
OWN_FLAGS = ("--rollout-backend", "--synthetic-task", "--synthetic-num-prompts",
             "--model-init", "--max-prompt-len")  # tiny-cpu's PPO Deck-only flags


def ppodeck(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ppodeck", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PPODECK_RUNS_DIR=str(tmp_path / "runs"), PPODECK_MILES_PYTHON=sys.executable,
               PPODECK_TEST_RAY_GPUS="1", RAY_AUTH_MODE="disabled",
               RAY_USAGE_STATS_ENABLED="0", STANDIN_ROLLOUT_S="0.2")
    return env


def standin_lines(rundir: RunDir, tag: str) -> object:
    for line in rundir.driver_log.read_text().splitlines():
        if line.startswith(f"{tag} "):
            return json.loads(line[len(tag) + 1:])
    raise AssertionError(f"no {tag} line in {rundir.driver_log}")


def expected_argv(env: dict[str, str], rundir: RunDir) -> list[str]:
    """`ppodeck command`'s argv without PPO Deck's own flags, plus the watching flags."""
    shown = json.loads(ppodeck("command", PRESET, *SETS, "--json", env=env).stdout)
    kept: list[str] = []
    skip = False
    for word in shown:
        if skip:
            skip = False
            continue
        if word in OWN_FLAGS:
            skip = True  # each takes a value
            continue
        kept.append(word)
    return kept + ["--dump-details", str(rundir.path.resolve() / "miles"),
                   "--use-miles-dashboard"]


def test_a_local_miles_run_goes_through_a_private_ray_head(cli_env, tmp_path) -> None:
    rundir = RunDir(tmp_path / "runs" / "local")
    out = ppodeck("run", PRESET, *SETS, "--set", "wandb-key=k3y-never-shown", "--engine",
                  "miles", "--miles-root", str(STANDIN), "--run-dir", str(rundir.path),
                  env=cli_env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "added for watching: --dump-details" in out.stderr
    assert standin_lines(rundir, "STANDIN_ARGV") == expected_argv(cli_env, rundir)
    env = standin_lines(rundir, "STANDIN_ENV")
    assert env["WANDB_API_KEY set"] is True  # the secret reaches miles as wandb reads it
    assert not any("k3y-never-shown" in p.read_text(errors="replace")
                   for p in rundir.path.rglob("*") if p.is_file())
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["MASTER_ADDR"] == "127.0.0.1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(STANDIN)
    status = read_status(rundir)
    assert (status["state"], status["engine"], status["rollout_id"]) == ("succeeded", "miles", 2)
    assert status["miles_job"]["private_head"] is True
    assert not pid_alive(status["pid"])
    tail = ppodeck("tail", rundir.id, "--json", "--kind", "metrics", env=cli_env)
    rewards = [json.loads(line)["metrics"]["rollout/raw_reward"] for line in
               tail.stdout.splitlines()]
    assert rewards == pytest.approx([0.1, 0.2, 0.3])
    [listed] = json.loads(ppodeck("runs", "ls", "--json", env=cli_env).stdout)
    assert (listed["state"], listed["health"]) == ("succeeded", "ok")
    assert "train.py" in rundir.command_txt.read_text()


def test_a_failing_miles_run_exits_3_and_a_stopped_one_is_stopped(cli_env, tmp_path) -> None:
    failing = RunDir(tmp_path / "runs" / "failing")
    out = ppodeck("run", PRESET, *SETS, "--engine", "miles", "--miles-root", str(STANDIN),
                  "--run-dir", str(failing.path), env={**cli_env, "STANDIN_EXIT": "2"})
    assert out.returncode == 3, out.stderr[-3000:]
    status = read_status(failing)
    assert status["state"] == "failed" and "exit code 2" in status["detail"]

    stopped = RunDir(tmp_path / "runs" / "stopped")
    out = ppodeck("run", PRESET, "--set", "num-rollout=500", "--engine", "miles",
                  "--miles-root", str(STANDIN), "--run-dir", str(stopped.path), "--detach",
                  env={**cli_env, "STANDIN_ROLLOUT_S": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    wait_for(lambda: read_status(stopped).get("rollout_id") is not None, 120)
    said = ppodeck("stop", stopped.id, env=cli_env)
    assert "supervisor" in said.stdout
    wait_for(lambda: read_status(stopped)["state"] == "stopped", 60)
    wait_for(lambda: not pid_alive(read_status(stopped)["pid"]), 60)


def test_a_submitted_miles_run_is_a_job_on_the_cluster(ray_cluster, cli_env, tmp_path) -> None:
    rundir = RunDir(tmp_path / "runs" / "submitted")
    out = ppodeck("run", PRESET, *SETS, "--engine", "miles", "--miles-root", str(STANDIN),
                  "--submit", ray_cluster.dashboard_url, "--run-dir", str(rundir.path),
                  env=cli_env)
    assert out.returncode == 0, out.stderr[-3000:]
    status = read_status(rundir)
    assert status["state"] == "succeeded" and status["miles_job"]["private_head"] is False
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_cluster.dashboard_url).get_job_info(rundir.id)
    assert info.metadata["ppodeck_engine"] == "miles" and "train.py" in info.entrypoint
    assert info.runtime_env["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert standin_lines(rundir, "STANDIN_ARGV") == expected_argv(cli_env, rundir)
    events = ppodeck("tail", rundir.id, "--json", "--kind", "metrics", env=cli_env).stdout
    assert len(events.splitlines()) == 3


def test_without_the_jobs_api_train_py_is_the_supervisors_child(cli_env, tmp_path) -> None:
    """Where Ray's dashboard packages are missing (a GPU image with Ray alone) there is no Jobs
    API: train.py runs as the supervisor's child on the private head, the head carries the
    job's environment to Ray's workers, and a stop interrupts it (PPODECK_MILES_DIRECT=1 takes
    that path here, where the Jobs API exists). The departures a setup records are shown."""
    departures = tmp_path / "departures.json"
    departures.write_text(json.dumps([{"what": "a stub module", "why": "the image lacks it"}]))
    env = {**cli_env, "PPODECK_MILES_DIRECT": "1",
           "PPODECK_MILES_DEPARTURES": str(departures)}
    rundir = RunDir(tmp_path / "runs" / "direct")
    out = ppodeck("run", PRESET, *SETS, "--engine", "miles", "--miles-root", str(STANDIN),
                  "--run-dir", str(rundir.path), env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    log = rundir.driver_log.read_text()
    assert "PPODECK_MILES_DIRECT=1" in log and "runs as a child of this supervisor" in log
    assert "departure from miles' image (outside the miles checkout): a stub module" in log
    status = read_status(rundir)
    assert (status["state"], status["rollout_id"]) == ("succeeded", 2)
    assert status["miles_job"]["private_head"] is True and "pid" in status["miles_job"]
    assert not pid_alive(status["miles_job"]["pid"]) and not pid_alive(status["pid"])
    assert standin_lines(rundir, "STANDIN_ARGV") == expected_argv(cli_env, rundir)
    assert standin_lines(rundir, "STANDIN_ENV")["PYTHONPATH"].split(os.pathsep)[0] == \
        str(STANDIN)
    warned = ppodeck("tail", rundir.id, "--json", "--kind", "log", env=cli_env).stdout
    assert "a stub module" in warned

    stopped = RunDir(tmp_path / "runs" / "direct-stopped")
    out = ppodeck("run", PRESET, "--set", "num-rollout=500", "--engine", "miles",
                  "--miles-root", str(STANDIN), "--run-dir", str(stopped.path), "--detach",
                  env={**env, "STANDIN_ROLLOUT_S": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    wait_for(lambda: read_status(stopped).get("rollout_id") is not None, 120)
    child = read_status(stopped)["miles_job"]["pid"]
    ppodeck("stop", stopped.id, env=cli_env)
    wait_for(lambda: read_status(stopped)["state"] == "stopped", 90)
    wait_for(lambda: not pid_alive(read_status(stopped)["pid"]), 60)
    assert not pid_alive(child)


def wait_for(probe, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)
