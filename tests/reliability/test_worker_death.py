"""A Ray worker (the critic's rank 0) is SIGKILLed during a real run: the driver notices within
seconds, stops the other workers and fails with a message naming the role and the rank."""

from __future__ import annotations

import os
import signal
import time

from tests.reliability import helpers


def test_a_dead_critic_rank_fails_the_run_naming_it(runs_dir, started) -> None:
    env = helpers.cli_env(runs_dir)
    rundir = helpers.start_detached(runs_dir, ["tiny-cpu", "--set", "num-rollout=40"], env)
    driver = helpers.status_of(rundir)["pid"]
    started.append(driver)
    watch = helpers.TreeWatch(driver)
    try:
        pids = helpers.wait_until(lambda: helpers.logged_worker_pids(rundir), 180,
                                  "the worker pids log event")
        assert set(pids) == {"rollout/0", "critic/0", "actor/0"}, pids
        helpers.wait_rollout(rundir, 1, 120)
        os.kill(pids["critic/0"], signal.SIGKILL)
        killed_at = time.monotonic()
        status = helpers.wait_final(rundir, 60)
        noticed_after = time.monotonic() - killed_at
        leftovers = helpers.nothing_left(driver, watch, timeout=30)
    finally:
        watch.stop()
    assert status["state"] == "failed", status
    assert "critic rank 0 failed: the worker process died" in status["detail"], status
    assert noticed_after < 30, noticed_after
    assert leftovers == [], {p: watch.seen.get(p) for p in leftovers}
    assert pids["actor/0"] in watch.seen and not helpers.alive(pids["actor/0"])
    failed = [e for e in helpers.events(rundir) if e["kind"] == "status"]
    assert failed[-1]["state"] == "failed" and "critic rank 0" in failed[-1]["detail"]
    helpers.record_figure("worker_death_to_failed_status_s", round(noticed_after, 2))
