"""A reward function in the launch directory reaches a Ray Job: `ppodeck run --submit` from the
directory holding next_digit.py ships it in the job's runtime_env (py_modules, as a package of
the same name), and the job's driver and rollout worker on the cluster import and run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppodeck.engine.run.rundir import RunDir, read_status
from tests.cluster.conftest import REPO

pytestmark = pytest.mark.slow  # a job's driver start on the cluster: about a minute on 2 cores

USER_CODE = REPO / "bench" / "user_code"


def test_a_submitted_run_imports_the_reward_module_from_the_launch_directory(
        ray_cluster, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "PPODECK_CODE_DIR")}
    env.update(PPODECK_RUNS_DIR=str(tmp_path / "runs"), PPODECK_SUBMIT_PYTHON=sys.executable,
               PPODECK_TEST_RAY_GPUS="1", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    rundir = RunDir(tmp_path / "runs" / "user-code")
    out = subprocess.run(
        [sys.executable, "-m", "ppodeck", "run", "tiny-cpu", "--set", "num-rollout=1", "--set",
         "custom-rm-path=next_digit.score", "--submit", ray_cluster.dashboard_url,
         "--run-dir", str(rundir.path), "--yes", "--trust"],
        cwd=USER_CODE, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    status = read_status(rundir)
    assert status["state"] == "succeeded", (status, rundir.driver_log.read_text()[-3000:])
    events = [json.loads(line) for line in rundir.events_jsonl.read_text().splitlines()]
    logs = " ".join(str(e.get("msg", "")) for e in events if e["kind"] == "log")
    assert "--custom-rm-path next_digit.score: loaded" in logs  # by the cluster's rollout worker
    assert any(e["kind"] == "metrics" and e.get("step_key") == "rollout/step" for e in events)
