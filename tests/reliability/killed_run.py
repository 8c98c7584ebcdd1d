"""One real tiny-cpu run, SIGKILLed mid-phase, shared by the session (tests/conftest.py's
`killed_tiny_run` fixture): the driver-kill tests (tests/reliability/test_driver_kill.py) and
the verified-saves tests (tests/health/test_verified_saves.py) read it, so the suite pays for
one such run, not two.

While it trains, its process tree and listening sockets are recorded; it saves every 2 rollouts
(rollouts 1 and 3, each checked by the driver) and the driver is SIGKILLed when rollout 5's
critic phase starts. It carries a W&B key, to prove that secrets reach no file. `pristine` is a
copy taken right after the kill: tests that damage or resume a copy start from it, whatever the
driver-kill resume has since appended to the original.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppodeck.engine.run.rundir import RunDir
from tests.reliability import helpers

SAVE_INTERVAL = 2
SAVED = (1, 3)  # the rollouts saved before the kill ((rollout_id + 1) % SAVE_INTERVAL == 0)
KILL_ROLLOUT = 5  # rollout 5 would be saved at its end
SAVE_ROOT = "checkpoints"  # --save under the run directory; the critic's is SAVE_ROOT_critic
SECRET = "wandb-canary-5f3a9c"


@dataclass
class KilledRun:
    rundir: RunDir
    env: dict[str, str]
    pid: int
    watch: helpers.TreeWatch
    status: dict[str, Any]
    leftovers: list[int]
    done_before_kill: int
    recorded_after: float
    pristine: RunDir


def _critic_phase_started(rundir: RunDir, rollout_id: int) -> bool:
    """True once rollout `rollout_id`'s critic phase has begun; fails at once if the run ended
    first (a Ray start that timed out on a loaded host, say), naming its status."""
    status = helpers.recorded_status(rundir)
    assert status.get("state") not in helpers.FINAL, f"the run ended before the kill: {status}"
    return any(
        e["kind"] == "phase"
        and e["name"] == "critic_train"
        and e["state"] == "start"
        and e.get("rollout_id") == rollout_id
        for e in helpers.events(rundir)
    )


def start_and_kill(root: Path, started: list[int]) -> KilledRun:
    """Start the run detached under `root`, kill its driver in rollout KILL_ROLLOUT's critic
    phase, wait for the reaper's record and for every process of the run to end."""
    runs_dir = root / "runs"
    env = helpers.cli_env(runs_dir)
    rundir = helpers.start_detached(
        runs_dir,
        [
            "tiny-cpu",
            "--set",
            "num-rollout=40",
            "--set",
            f"save=${{RUN_DIR}}/{SAVE_ROOT}",
            "--set",
            f"save-interval={SAVE_INTERVAL}",
            "--set",
            f"wandb-key={SECRET}",
        ],
        env,
    )
    pid = helpers.status_of(rundir)["pid"]
    started.append(pid)
    watch = helpers.TreeWatch(pid)
    try:
        helpers.wait_until(
            lambda: _critic_phase_started(rundir, KILL_ROLLOUT),
            240,
            f"rollout {KILL_ROLLOUT}'s critic phase",
        )
        watch.sample()
        done_before_kill = helpers.status_of(rundir)["rollout_id"]
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        status = helpers.wait_final(rundir, 30)
        recorded_after = time.monotonic() - killed_at
        leftovers = helpers.nothing_left(pid, watch, timeout=30)
    finally:
        watch.stop()
    pristine = RunDir(root / "pristine" / rundir.id)
    shutil.copytree(rundir.path, pristine.path)
    return KilledRun(
        rundir=rundir,
        env=env,
        pid=pid,
        watch=watch,
        status=status,
        leftovers=leftovers,
        done_before_kill=done_before_kill,
        recorded_after=recorded_after,
        pristine=pristine,
    )
