"""Train-state moves: which ones the memory lets overlap (plan_moves), and that train() sends
them so each trainer still runs its calls in a valid order (engine/driver/offload.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.resolve import resolve
from ppodeck.engine.driver.offload import OVERLAP_ENV, MovePlan, Moves, plan_moves
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import EventWriter, read_events
from ppodeck.engine.run.rundir import RunDir
from tests.engine.test_driver_estimators import FakeRollout

H200 = 143_771_000_832  # NVML's total on the H200
A100_80G = 80 << 30
ON = {OVERLAP_ENV: "1"}


def _args(preset: str, **changes: object) -> dict:
    config = resolve_preset(load_preset(preset))
    return dict(resolve(config.with_values(**changes) if changes else config, os.environ))


# ---- the plan ----------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [{}, ON], ids=["default", "set-to-1"])
def test_06b_and_17b_overlap_everything_on_the_h200(env: dict) -> None:
    for preset in ("qwen3-0.6b-ppo-1gpu", "qwen3-1.7b-ppo-1gpu"):
        plan = plan_moves(_args(preset), True, H200, env=env)
        assert plan.trainers_together and plan.with_rollout, preset
        assert "every role awake at once" in plan.message and f"{OVERLAP_ENV}=0" in plan.message


def test_an_unreadable_setting_is_named_and_read_as_on() -> None:
    plan = plan_moves(_args("qwen3-0.6b-ppo-1gpu"), True, H200, env={OVERLAP_ENV: "yes"})
    assert plan.with_rollout
    assert f"{OVERLAP_ENV}='yes' is not 0 or 1: read as 1" in plan.message


def test_17b_hands_over_between_trainers_only_where_the_rollout_does_not_fit_too() -> None:
    # 1.7B: 103.1 GiB both trainers awake, 108.8 with the rollout; 90% of 118 GiB is 106.2
    plan = plan_moves(_args("qwen3-1.7b-ppo-1gpu"), True, 118 << 30, env=ON)
    assert plan.trainers_together and not plan.with_rollout
    assert "would not fit" in plan.message


def test_17b_on_an_80g_gpu_waits_on_every_move() -> None:
    plan = plan_moves(_args("qwen3-1.7b-ppo-1gpu"), True, A100_80G, env=ON)
    assert plan == MovePlan(message=plan.message)
    assert "does not fit" in plan.message


@pytest.mark.parametrize(("use_gpu", "gpu_bytes", "env", "changes", "says"), [
    (True, H200, {OVERLAP_ENV: "0"}, {}, f"{OVERLAP_ENV}=0; unset, they overlap"),
    (False, None, ON, {}, "CPU"),
    (False, None, {}, {}, "CPU"),
    (True, None, ON, {}, "GPU memory (NVML) unknown"),
    (True, H200, ON, {"offload_train": False}, "no --offload-train"),
])
def test_no_overlap_says_why(use_gpu: bool, gpu_bytes: int | None, env: dict,
                             changes: dict, says: str) -> None:
    plan = plan_moves(_args("qwen3-0.6b-ppo-1gpu", **changes), use_gpu, gpu_bytes, env=env)
    assert not plan.trainers_together and not plan.with_rollout
    assert says in plan.message


# ---- the loop ----------------------------------------------------------------------------------


class Sent:
    """A call sent to a stand-in Ray actor: it runs when something waits on it or on a later
    call of the same actor (Ray's per-actor order), or when poll asks whether it is done."""

    def __init__(self, trainer: OrderedTrainer, name: str) -> None:
        self.trainer, self.name, self.ran = trainer, name, False

    def run(self) -> dict:
        if not self.ran:
            self.ran = True
            self.trainer.execute(self.name)
        return {"bytes": 8, "seconds": 0.1, "noop": False, "where": "gpu"}

    def done(self) -> bool:
        self.trainer.flush_until(self)
        return True

    def result(self) -> dict:
        self.trainer.flush_until(self)
        return self.run()


class OrderedTrainer:
    def __init__(self, role: str, log: list[str]) -> None:
        self.role, self.log = role, log
        self.queue: list[Sent] = []
        self.awake = False

    def send(self, name: str) -> Sent:
        self.log.append(f"send {self.role}.{name}")
        sent = Sent(self, name)
        self.queue.append(sent)
        return sent

    def flush_until(self, last: Sent | None = None) -> None:
        while self.queue:
            sent = self.queue.pop(0)
            sent.run()
            if sent is last:
                return

    def execute(self, name: str) -> None:
        self.log.append(f"run {self.role}.{name}")
        if name == "wake_up":
            assert not self.awake, f"{self.role} woken twice"
            self.awake = True
        elif name == "sleep":
            assert self.awake, f"{self.role} put to sleep asleep"
            self.awake = False
        elif name in ("train_critic", "train_actor", "export", "save"):
            assert self.awake, f"{self.role} asked to {name} asleep"

    def blocking(self, name: str) -> dict:  # a TrainGroup method that waits: Ray's order
        return self.send(name).result()

    def start_wake_up(self) -> Sent:
        return self.send("wake_up")

    def start_sleep(self) -> Sent:
        return self.send("sleep")

    def start_release_export(self) -> Sent:
        return self.send("release_export")

    def wake_up(self) -> dict:
        return self.blocking("wake_up")

    def sleep(self) -> dict:
        return self.blocking("sleep")

    def train_critic(self, rollout_id: int, batch: Any) -> dict:  # noqa: ANN401
        self.blocking("train_critic")
        return {"values": {0: [0.5]}, "step_metrics": [{"train/critic-value_loss": 0.2}],
                "rollout_metrics": {}}

    def train_actor(self, rollout_id: int, batch: Any, values: Any) -> dict:  # noqa: ANN401
        self.blocking("train_actor")
        return {"step_metrics": [{"train/pg_loss": 0.0}], "rollout_metrics": {}}

    def export_hf_weights(self) -> None:
        self.blocking("export")

    def save(self, rollout_id: int) -> None:
        self.blocking("save")


class LoggedRollout(FakeRollout):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def generate(self, rollout_id: int) -> Any:  # noqa: ANN401
        self.log.append("generate")
        return super().generate(rollout_id)

    def update_weights(self, weights: Any) -> dict:  # noqa: ANN401
        self.log.append("update_weights")
        return {"seconds": 0.0, "bytes": 0, "path": "cuda_ipc"}


def _run(tmp_path: Path, plan: MovePlan, critic: bool = True,
         **flags: Any) -> tuple[list[str], list[dict]]:  # noqa: ANN401
    from ppodeck.engine.config.resolve import resolve_values
    from ppodeck.engine.driver.ppo import StopFlag, train
    from ppodeck.engine.driver.roles import Roles

    args = resolve_values({"n_samples_per_prompt": 1, "rollout_batch_size": 1,
                           "global_batch_size": 1, "num_rollout": 3, "offload_train": True,
                           "advantage_estimator": "ppo",
                           "num_critic_only_steps": 1, **flags}, os.environ)
    log: list[str] = []
    critic_trainer = OrderedTrainer("critic", log) if critic else None
    actor = OrderedTrainer("actor", log)
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir(parents=True)
    writer = EventWriter(rundir.events_jsonl)
    train(args, Roles(rollout=LoggedRollout(log), critic=critic_trainer, actor=actor,
                      move_plan=plan), Telemetry(writer, 0), StopFlag(), 0, rundir)
    writer.close()
    for trainer in (critic_trainer, actor):
        assert trainer is None or (not trainer.awake and not trainer.queue)
    return log, read_events(rundir.events_jsonl)[0]


PLANS = {"none": MovePlan(), "trainers": MovePlan(True, False, "t"),
         "rollout": MovePlan(True, True, "r")}


@pytest.mark.parametrize("level", sorted(PLANS))
def test_every_plan_keeps_each_trainer_in_order_and_reports_every_move(
        tmp_path: Path, level: str) -> None:
    log, events = _run(tmp_path, PLANS[level], save=str(tmp_path / "ckpt"), save_interval=2)
    moves = [(e["model"], e["direction"]) for e in events
             if e["kind"] == "offload" and e["model"] != "rollout"]
    runs = [line.removeprefix("run ") for line in log if line.startswith("run ")]
    # one event per move that ran, and every move ran
    assert len(moves) == sum(1 for r in runs if r.endswith((".wake_up", ".sleep")))
    assert runs.count("critic.train_critic") == 3 and runs.count("actor.train_actor") == 2


def test_rollout_level_onloads_the_critic_during_generate_and_offloads_the_actor_behind_the_sync(
        tmp_path: Path) -> None:
    log, _ = _run(tmp_path, PLANS["rollout"])
    first_sync = log.index("update_weights")
    second = log.index("generate", first_sync)  # rollout 1: the actor trains
    during_generate = log[first_sync:second]
    # one onload beside the decode: the critic's; the actor's beside the critic's training
    assert "send critic.wake_up" in during_generate
    assert "send actor.wake_up" not in during_generate
    after = log[second:]
    assert after.index("send actor.wake_up") < after.index("send critic.train_critic")
    sync = log.index("update_weights", second)
    actor_sleep = max(i for i, line in enumerate(log[:sync]) if line == "send actor.sleep")
    assert "run actor.sleep" not in log[actor_sleep:sync]  # not waited on before the sync


def test_rollout_level_without_a_critic_onloads_the_actor_during_generate(
        tmp_path: Path) -> None:
    log, _ = _run(tmp_path, PLANS["rollout"], critic=False, advantage_estimator="grpo",
                  num_critic_only_steps=0)
    first_sync = log.index("update_weights")
    second = log.index("generate", first_sync)
    assert "send actor.wake_up" in log[first_sync:second]
    assert not any(line.startswith(("send critic", "run critic")) for line in log)


def test_trainers_level_onloads_the_actor_while_the_critic_trains(tmp_path: Path) -> None:
    log, _ = _run(tmp_path, PLANS["trainers"])
    second = log.index("generate", log.index("generate") + 1)
    after = log[second:]
    assert after.index("send actor.wake_up") < after.index("send critic.train_critic")
    assert after.index("send critic.sleep") < after.index("run critic.sleep")
    assert after.index("send actor.train_actor") < after.index("run critic.sleep")
    # the rollout's memory comes back after both trainers left
    assert after.index("run actor.sleep") < after.index("update_weights")


def test_none_level_waits_on_each_move_where_it_starts(tmp_path: Path) -> None:
    log, _ = _run(tmp_path, PLANS["none"])
    for i, line in enumerate(log):
        if line.startswith("send ") and line.endswith((".wake_up", ".sleep")):
            assert log[i + 1] == line.replace("send ", "run ", 1), log[i:i + 3]


def test_moves_report_a_failed_move_where_it_is_waited_on() -> None:
    class Boom:
        def done(self) -> bool:
            return True

        def result(self) -> dict:
            raise RuntimeError("critic rank 0 failed")

    class Group:
        role = "critic"

        def start_sleep(self) -> Boom:
            return Boom()

    class Tm:
        def offload(self, *args: Any) -> None:  # noqa: ANN401
            raise AssertionError("no event for a failed move")

    moves = Moves(Tm(), True, MovePlan())  # type: ignore[arg-type]
    moves.sleep(Group(), later=True)
    with pytest.raises(RuntimeError, match="critic rank 0 failed"):
        moves.poll()
