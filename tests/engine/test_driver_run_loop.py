"""The driver's loop with stand-in roles (no Ray): --update-weights-interval, evaluation timing,
the debug modes and a failing --ci-test check, each read back from the events."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.run.events import EventWriter, read_events
from ppodeck.engine.run.rundir import RunDir, read_status
from tests.engine.test_driver_estimators import FakeRollout, FakeTrainer


class EvalRollout(FakeRollout):
    def eval(self, rollout_id: int) -> dict[str, float]:
        return {"eval/held-out": 0.5, "eval/held-out-truncated_ratio": 0.0}


class KlActor(FakeTrainer):
    """An actor whose first step reports a policy that moved before any update."""

    def train_actor(self, rollout_id: int, batch: Any, values: Any) -> dict:  # noqa: ANN401
        return {"step_metrics": [{"train/ppo_kl": 2e-3, "train/pg_clipfrac": 0.0}],
                "rollout_metrics": {}}


def run_loop(tmp_path: Path, actor: Any = "ppo", critic: Any = "ppo",  # noqa: ANN401
             **flags: Any) -> list[dict]:  # noqa: ANN401
    from ppodeck.engine.driver.ppo import StopFlag, train
    from ppodeck.engine.driver.roles import Roles

    args = resolve_values({"n_samples_per_prompt": 1, "rollout_batch_size": 1,
                           "global_batch_size": 1, "num_rollout": 5,
                           "num_critic_only_steps": 0, **flags}, os.environ)
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir(parents=True)
    writer = EventWriter(rundir.events_jsonl)
    roles = Roles(rollout=EvalRollout(),
                  critic=FakeTrainer("critic") if critic == "ppo" else critic,
                  actor=FakeTrainer("actor") if actor == "ppo" else actor)
    try:
        train(args, roles, Telemetry(writer, 0), StopFlag(), 0, rundir)
    finally:
        writer.close()
    return read_events(rundir.events_jsonl)[0]


def starts(events: list[dict], name: str) -> list[int]:
    return [e["rollout_id"] for e in events
            if e["kind"] == "phase" and e["state"] == "start" and e["name"] == name]


def logs(events: list[dict]) -> list[str]:
    return [e["msg"] for e in events if e["kind"] == "log"]


def test_weights_are_pushed_every_nth_rollout_and_skips_are_logged(tmp_path: Path) -> None:
    events = run_loop(tmp_path, update_weights_interval=3)
    assert starts(events, "update_weights") == [2]  # miles: (rollout_id + 1) % 3 == 0
    skipped = [m for m in logs(events) if "not pushed" in m]
    assert len(skipped) == 4
    assert "after rollout 0" in skipped[0] and "next push after rollout 2" in skipped[0]
    assert "no further push in this run" in skipped[-1]


def test_eval_before_training_and_every_interval(tmp_path: Path) -> None:
    events = run_loop(tmp_path, eval_interval=2, eval_prompt_data=["held-out", "/x.jsonl"])
    assert starts(events, "eval") == [0, 1, 3]  # before rollout 0, after rollouts 1 and 3
    evals = [e for e in events if e["kind"] == "metrics" and e["step_key"] == "eval/step"]
    assert [e["step"] for e in evals] == [0, 1, 3]
    assert evals[0]["metrics"]["eval/held-out"] == 0.5


def test_skip_eval_before_train(tmp_path: Path) -> None:
    events = run_loop(tmp_path, eval_interval=2, eval_prompt_data=["a", "/x.jsonl"],
                      skip_eval_before_train=True)
    assert starts(events, "eval") == [1, 3]


def test_debug_rollout_only_generates_and_evaluates_but_trains_nothing(tmp_path: Path) -> None:
    events = run_loop(tmp_path, actor=None, critic=None, debug_rollout_only=True,
                      eval_interval=5, eval_prompt_data=["a", "/x.jsonl"])
    names = {e["name"] for e in events if e["kind"] == "phase"}
    assert names == {"generate", "rollout_offload", "rollout_onload", "eval"}
    assert any(m.startswith("--debug-rollout-only: rollouts only") for m in logs(events))
    assert not any("not pushed" in m for m in logs(events))


def test_debug_train_only_trains_without_push_or_eval(tmp_path: Path) -> None:
    events = run_loop(tmp_path, debug_train_only=True, eval_interval=1,
                      eval_prompt_data=["a", "/x.jsonl"])
    assert starts(events, "actor_train") == [0, 1, 2, 3, 4]
    assert starts(events, "update_weights") == [] and starts(events, "eval") == []
    assert any("every rollout trains on that same batch" in m for m in logs(events))


def test_a_failed_ci_check_names_the_check_and_the_numbers(tmp_path: Path) -> None:
    from ppodeck.engine.driver.ci_checks import CIFailure

    with pytest.raises(CIFailure, match=r"kl check failed: train/ppo_kl = 2\.000e-03 at the "
                                        r"first step of rollout 0"):
        run_loop(tmp_path, actor=KlActor("actor"), ci_test=True)


def test_a_failed_ci_check_fails_the_run_with_that_detail(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Through driver.run(): status failed, the detail says which check and the numbers."""
    import ppodeck.engine.driver.ppo as driver
    import ppodeck.engine.driver.roles as roles_module
    from ppodeck.engine.launch.local import prepare_run
    from ppodeck.engine.presets import load_preset, resolve_preset

    config = resolve_preset(load_preset("tiny-cpu")).with_values(
        num_rollout=2, ci_test=True, num_critic_only_steps=0)
    rundir = prepare_run(config, "test", run_dir=tmp_path / "run")
    stand_ins = roles_module.Roles(rollout=EvalRollout(), critic=FakeTrainer("critic"),
                             actor=KlActor("actor"))
    monkeypatch.setattr(roles_module, "start_roles", lambda args, tm, *rest: (stand_ins, 0))
    monkeypatch.setattr(roles_module, "stop_roles", lambda roles: None)
    monkeypatch.setattr(driver, "start_reaper", lambda rundir: None)
    monkeypatch.setattr(driver.signal, "signal", lambda *a: None)
    assert driver.run(rundir) == 1
    status = read_status(rundir)
    assert status["state"] == "failed"
    assert "CIFailure: --ci-test kl check failed: train/ppo_kl = 2.000e-03" in status["detail"]


def test_the_final_status_follows_the_last_memory_sample(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory samples are written from a sampler thread; finish() waits for them, so the run's
    final status is its last event (readers such as `ppodeck tail` stop there)."""
    import time

    from ppodeck.engine.driver import ppo, telemetry

    def slow_rss(pid: int) -> int:
        time.sleep(0.2)  # a process-tree walk on a loaded host
        return 0

    monkeypatch.setattr(telemetry, "process_tree_rss", slow_rss)
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir(parents=True)
    writer = EventWriter(rundir.events_jsonl)
    tm = Telemetry(writer, 0)
    with tm.phase("generate", 0):
        pass
    ppo.finish(rundir, tm, "succeeded", "all rollouts done", 0)
    tm.close()
    writer.close()
    events = read_events(rundir.events_jsonl)[0]
    assert [e["kind"] for e in events[-2:]] == ["gpu", "status"]
    assert read_status(rundir)["state"] == "succeeded"
