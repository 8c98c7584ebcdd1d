"""`ppodeck run --submit` against the test cluster's head (its dashboard serves the Jobs API):
a tiny-cpu job followed to success through the log stream (no shared directory), then a
second one stopped with `ppodeck stop`. Nothing is left running on the cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ppodeck.engine.run.rundir import RunDir, pid_alive, read_status
from tests.cluster.conftest import REPO

# two jobs of a few rollouts, each a driver start on the cluster: about a minute and a half
# on 2 cores, so out of the default run; bench/ray_jobs_bench.py runs this file
pytestmark = pytest.mark.slow


def ppodeck(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ppodeck", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory) -> dict[str, str]:
    runs = tmp_path_factory.mktemp("runs")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PPODECK_RUNS_DIR=str(runs), PPODECK_SUBMIT_PYTHON=sys.executable,
               PPODECK_TEST_RAY_GPUS="1", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    return env


def run_dir(env: dict[str, str], name: str) -> RunDir:
    return RunDir(Path(env["PPODECK_RUNS_DIR"]) / name)


def test_a_submitted_run_is_followed_to_success(ray_cluster, cli_env):
    rundir = run_dir(cli_env, "followed")
    out = ppodeck("run", "tiny-cpu", "--set", "num-rollout=2", "--submit",
                  ray_cluster.dashboard_url, "--run-dir", str(rundir.path), "--yes", env=cli_env)
    assert out.returncode == 0, out.stderr[-3000:]
    status = read_status(rundir)
    assert status["state"] == "succeeded" and status["job"]["status"] == "SUCCEEDED"
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_cluster.dashboard_url).get_job_info(rundir.id)
    assert info.submission_id == rundir.id and info.metadata["ppodeck_preset"] == "tiny-cpu"
    assert "ppodeck.engine.driver.job_entry --run-id" in info.entrypoint
    tail = ppodeck("tail", rundir.id, "--json", env=cli_env)
    events = [json.loads(line) for line in tail.stdout.splitlines()]
    rollouts = [e for e in events if e["kind"] == "metrics" and e["step_key"] == "rollout/step"]
    assert [e["step"] for e in rollouts] == [0, 1]
    assert events[-1]["kind"] == "status" and events[-1]["state"] == "succeeded"
    ls = ppodeck("runs", "ls", "--json", env=cli_env)
    (row,) = json.loads(ls.stdout)
    assert row["state"] == "succeeded" and row["job"]["status"] == "SUCCEEDED"


def test_a_submitted_run_stops_through_the_jobs_api(ray_cluster, cli_env):
    rundir = run_dir(cli_env, "stopped")
    out = ppodeck("run", "tiny-cpu", "--submit", ray_cluster.dashboard_url, "--detach",
                  "--run-dir", str(rundir.path), "--yes", env=cli_env)
    assert out.returncode == 0, out.stderr[-3000:]
    deadline = time.monotonic() + 180
    while read_status(rundir).get("rollout_id") is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the first rollout's events arrived through the log stream
    assert read_status(rundir).get("rollout_id") is not None, rundir.driver_log.read_text()
    stop = ppodeck("stop", rundir.id, env=cli_env)
    assert "stop job" in stop.stdout, stop.stdout + stop.stderr
    while read_status(rundir).get("state") not in ("stopped", "failed") and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    status = read_status(rundir)
    assert status["state"] == "stopped" and status["job"]["status"] == "STOPPED", status
    from ray.util.state import list_actors

    alive = list_actors(address=ray_cluster.dashboard_url, filters=[("state", "=", "ALIVE")])
    assert alive == []  # the job's driver and workers are gone; the cluster itself stays
    follower = status["pid"]  # the local process that mirrored the job: ends on its own
    while pid_alive(follower) and time.monotonic() < deadline + 30:
        time.sleep(0.2)
    if pid_alive(follower):
        os.kill(follower, signal.SIGKILL)
        raise AssertionError("the follower outlived its job")
