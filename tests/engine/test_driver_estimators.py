"""The driver's loop with stand-in roles (no Ray): grpo runs no critic, ppo keeps miles' order."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.rollout.types import RolloutBatch
from ppodeck.engine.run.events import EventWriter, read_events
from ppodeck.engine.run.rundir import RunDir


class FakeRollout:
    role = "rollout"

    def generate(self, rollout_id: int) -> RolloutBatch:
        return RolloutBatch(tokens=[[1, 2]], prompt_lengths=[1], response_lengths=[1],
                            loss_masks=[[1]], rewards=[1.0], truncated=[False],
                            rollout_log_probs=[[-0.5]], sample_indices=[0],
                            metrics={"rollout/raw_reward": 1.0})

    def offload(self) -> dict:
        return {"noop": True}

    def onload(self) -> dict:
        return {"noop": True}

    def update_weights(self, weights: Any) -> dict:  # noqa: ANN401
        return {"seconds": 0.0, "bytes": 0, "path": "packed_host"}


class DoneCall:
    """A call of a stand-in trainer: it ran when it was sent."""

    def __init__(self, report: dict) -> None:
        self.report = report

    def done(self) -> bool:
        return True

    def result(self) -> dict:
        return self.report


class FakeTrainer:
    def __init__(self, role: str) -> None:
        self.role = role
        self.calls: list[tuple[str, Any]] = []

    def wake_up(self) -> dict:
        return {"noop": True}

    def sleep(self) -> dict:
        return {"noop": True}

    def start_wake_up(self) -> DoneCall:
        return DoneCall(self.wake_up())

    def start_sleep(self) -> DoneCall:
        return DoneCall(self.sleep())

    def start_release_export(self) -> DoneCall:
        return DoneCall({})

    def train_critic(self, rollout_id: int, batch: RolloutBatch) -> dict:
        self.calls.append(("train_critic", rollout_id))
        return {"values": {0: [0.5]}, "step_metrics": [{"train/critic-value_loss": 0.25}],
                "rollout_metrics": {"critic/explained_variance": None}}

    def train_actor(self, rollout_id: int, batch: RolloutBatch, values: Any) -> dict:  # noqa: ANN401
        self.calls.append(("train_actor", values))
        return {"step_metrics": [{"train/pg_loss": 0.0}], "rollout_metrics": {}}

    def export_hf_weights(self) -> None:
        return None

    def save(self, rollout_id: int) -> None:
        self.calls.append(("save", rollout_id))


def _run(tmp_path: Path, estimator: str) -> tuple[list[dict], FakeTrainer | None, FakeTrainer]:
    from ppodeck.engine.driver.ppo import StopFlag, train
    from ppodeck.engine.driver.roles import Roles

    args = resolve_values({"advantage_estimator": estimator, "n_samples_per_prompt": 2,
                           "rollout_batch_size": 1, "global_batch_size": 1, "num_rollout": 3,
                           "num_critic_only_steps": 1, "save": str(tmp_path / "ckpt")}, os.environ)
    critic = FakeTrainer("critic") if args["use_critic"] else None
    actor = FakeTrainer("actor")
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir(parents=True)
    writer = EventWriter(rundir.events_jsonl)
    train(args, Roles(rollout=FakeRollout(), critic=critic, actor=actor),
          Telemetry(writer, 0), StopFlag(), 0, rundir)
    writer.close()
    return read_events(rundir.events_jsonl)[0], critic, actor


def _phases(events: list[dict]) -> list[tuple[int, str]]:
    return [(e["rollout_id"], e["name"]) for e in events
            if e["kind"] == "phase" and e["state"] == "start"]


def test_grpo_runs_no_critic_phase_and_trains_the_actor_from_the_first_rollout(
        tmp_path: Path) -> None:
    events, critic, actor = _run(tmp_path, "grpo")
    assert critic is None
    assert not any(name == "critic_train" for _, name in _phases(events))
    # --num-critic-only-steps only applies with a critic (miles): the actor trains at rollout 0
    assert [c for c in actor.calls if c[0] == "train_actor"] == [("train_actor", None)] * 3
    assert ("save", 2) in actor.calls
    assert not any("critic" in key for e in events if e["kind"] == "metrics"
                   for key in e["metrics"])


def test_ppo_keeps_the_critic_warmup_and_passes_values(tmp_path: Path) -> None:
    events, critic, actor = _run(tmp_path, "ppo")
    assert critic is not None
    assert [rid for rid, name in _phases(events) if name == "critic_train"] == [0, 1, 2]
    assert [rid for rid, name in _phases(events) if name == "actor_train"] == [1, 2]
    assert actor.calls[0] == ("train_actor", {0: [0.5]})
    rollout = [e["metrics"] for e in events
               if e["kind"] == "metrics" and e["step_key"] == "rollout/step"]
    assert all(m["critic/explained_variance"] is None for m in rollout)  # null, not NaN

