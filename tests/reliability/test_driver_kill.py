"""The driver is SIGKILLed mid-phase during a real tiny-cpu run, then the run is resumed.

The run is the session's `killed_tiny_run` (tests/reliability/killed_run.py: the expensive
part, shared with tests/health/test_verified_saves.py): checkpoints every 2 rollouts, the
driver SIGKILLed when rollout 5's critic phase starts (the last save is rollout 3's), a W&B key
that must reach no file; then `ppodeck run --resume` finishes it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir
from tests.reliability import helpers
from tests.reliability.killed_run import (
    KILL_ROLLOUT,
    SAVE_INTERVAL,
    SAVE_ROOT,
    SAVED,
    SECRET,
    KilledRun,
)

RESUMED_TOTAL = 7
STEPS_PER_ROLLOUT = 4  # tiny-cpu: 128 samples / global batch 32


@pytest.fixture
def killed(killed_tiny_run: KilledRun) -> KilledRun:
    return killed_tiny_run


def test_status_and_runs_ls_say_failed_with_the_reason(killed: KilledRun) -> None:
    status = killed.status
    assert status["state"] == "failed", status
    assert f"driver process {killed.pid}" in status["detail"]
    # killed while critic_train of rollout 5 was running, or just after (on a loaded machine
    # the kill can land in the next phase): the reason names the phase that was running
    last = [e for e in helpers.events(killed.rundir)
            if e["kind"] == "phase" and e["state"] == "start"][-1]
    assert last["rollout_id"] == KILL_ROLLOUT
    assert f"{last['name']} (rollout {KILL_ROLLOUT})" in status["detail"], status["detail"]
    listed = helpers.ppodeck(["runs", "ls"], killed.env)
    row = next(line for line in listed.stdout.splitlines() if killed.rundir.id in line)
    assert "failed" in row and "ended without recording a final state" in row
    assert killed.recorded_after < 15, "the reaper records the end within seconds"


def test_no_ray_or_worker_process_survives(killed: KilledRun) -> None:
    names = set(killed.watch.seen.values())
    # the watch really saw Ray's daemons and the workers, so "none left" means something
    assert {"raylet", "gcs_server"} <= names, names
    assert any("ActorWorker" in name or "CriticWorker" in name for name in names), names
    assert killed.leftovers == [], {p: killed.watch.seen.get(p) for p in killed.leftovers}


def test_every_listening_port_is_on_the_loopback(killed: KilledRun) -> None:
    listening = killed.watch.listening
    assert listening, "no listening socket was seen: the watch is broken"
    assert helpers.non_loopback(listening) == []


def test_the_secret_reached_no_file_of_the_run(killed: KilledRun) -> None:
    rundir: RunDir = killed.rundir
    for path in rundir.path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert "--wandb-key '********'" in rundir.command_txt.read_text()


def test_events_stay_readable_and_a_torn_line_is_reported(killed: KilledRun,
                                                          tmp_path: Path) -> None:
    # a copy: the resume test below appends to the original
    copy = RunDir(tmp_path / "runs" / killed.rundir.id)
    shutil.copytree(killed.rundir.path, copy.path, ignore=shutil.ignore_patterns(f"{SAVE_ROOT}*"))
    events, warnings = read_events(copy.events_jsonl)
    assert warnings == []
    phases = [e for e in events if e["kind"] == "phase"]
    assert phases[-1]["rollout_id"] == KILL_ROLLOUT
    assert phases[-1]["name"] in ("critic_train", "actor_train")
    with open(copy.events_jsonl, "ab") as file:  # what a writer killed mid-line leaves
        file.write(b'{"v":1,"ts":1.0,"kind":"metrics","step_key":"rollout/st')
    again, warnings = read_events(copy.events_jsonl)
    assert len(again) == len(events)
    assert len(warnings) == 1 and "incomplete (torn write)" in warnings[0]
    assert f"line {len(events) + 1}" in warnings[0]
    tail = helpers.ppodeck(["tail", str(copy.path)], killed.env)
    assert tail.returncode == 0 and "torn write" in tail.stderr
    assert "Traceback" not in tail.stderr


def test_resume_continues_after_the_last_checkpoint(killed: KilledRun) -> None:
    rundir: RunDir = killed.rundir
    resumed = helpers.ppodeck(["run", "--resume", rundir.id, "--set",
                               f"num-rollout={RESUMED_TOTAL}"], killed.env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    saved = SAVED[-1]  # the last rollout saved before the kill
    assert f"resuming run {rundir.id} at rollout {saved + 1}" in resumed.stderr
    status = helpers.status_of(rundir)
    assert status["state"] == "succeeded" and status["resumed_from"] == saved
    assert helpers.nothing_left(status["pid"], timeout=30) == []

    events, warnings = read_events(rundir.events_jsonl)
    assert warnings == []
    rollout_steps = [e["step"] for e in events
                     if e["kind"] == "metrics" and e["step_key"] == "rollout/step"]
    assert rollout_steps == list(range(RESUMED_TOTAL)), rollout_steps  # no gap, no duplicate
    actor_steps = [e["step"] for e in events if e["kind"] == "metrics"
                   and e["step_key"] == "train/step" and e.get("role") == "actor"]
    assert len(actor_steps) == len(set(actor_steps))
    assert any("resumed from the checkpoint of rollout 3" in e.get("msg", "") for e in events)
    superseded = read_events(rundir.path / "events.superseded.jsonl")[0]
    assert {e.get("rollout_id") for e in superseded} - {None} == {saved + 1, KILL_ROLLOUT}

    # rollout 4 ran to its end before the kill (its events are the superseded ones): resumed
    # from the rollout-3 checkpoint, the same rollout must give the same losses
    assert first_resumed_losses(events, saved + 1) == pytest.approx(
        first_resumed_losses(superseded, saved + 1), rel=1e-4, abs=1e-7)

    lost_rollouts = killed.done_before_kill - saved
    assert 0 <= lost_rollouts < SAVE_INTERVAL
    helpers.record_figure("resume", {
        "save_interval_rollouts": SAVE_INTERVAL, "rollouts_done_before_kill":
        killed.done_before_kill + 1, "resumed_at_rollout": saved + 1,
        "rollouts_lost": lost_rollouts, "optimizer_steps_lost": lost_rollouts * STEPS_PER_ROLLOUT,
        "kill_to_status_recorded_s": round(killed.recorded_after, 2)})


def first_resumed_losses(events: list[dict[str, Any]], rollout_id: int) -> dict[str, float]:
    """Critic value losses and actor pg losses of one rollout, by train step."""
    losses = {}
    for e in events:
        if (e["kind"] == "metrics" and e.get("step_key") == "train/step"
                and e.get("rollout_id") == rollout_id):
            for name in ("train/critic-value_loss", "train/pg_loss"):
                if name in e["metrics"]:
                    losses[f"{name}@{e['step']}"] = e["metrics"][name]
    assert len(losses) == 2 * STEPS_PER_ROLLOUT, losses
    return losses

