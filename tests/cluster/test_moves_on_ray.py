"""train()'s train-state moves through real Ray actors (engine/driver/offload.py): each plan
keeps every trainer's calls in a valid order, and the overlapping plans do run a move beside
the other trainer's work, as Ray's per-actor call order allows. The workers are MoveProbes
(tests/cluster/probes.py): every call takes 0.3 s and is recorded on the worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.driver import cluster
from ppodeck.engine.driver.offload import MovePlan
from ppodeck.engine.driver.roles import Roles, TrainGroup, torch_reserved_by_device
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.run.events import EventWriter, read_events
from ppodeck.engine.run.rundir import RunDir
from tests.cluster.probes import MoveProbe
from tests.engine.test_driver_estimators import FakeRollout

Call = tuple[str, float, float, bool]  # name, start, end, awake before


class IpcRollout(FakeRollout):
    def update_weights(self, weights: Any) -> dict:  # noqa: ANN401
        return {"seconds": 0.0, "bytes": 0, "path": "cuda_ipc"}


def run_train(ray, tmp_path: Path, plan: MovePlan,  # noqa: ANN001
              memory: bool = False
              ) -> tuple[dict[str, list[Call]], list[dict], dict[str, list[float]]]:
    """train() over MoveProbes -> each worker's calls, the events, when each worker answered
    a memory sample; `memory`: sample the trainers' memory at each phase's end, as on a GPU
    (the caller makes nvml_devices report one)."""
    from ppodeck.engine.driver.ppo import StopFlag, train

    args = resolve_values({"advantage_estimator": "ppo", "n_samples_per_prompt": 1,
                           "rollout_batch_size": 1, "global_batch_size": 1, "num_rollout": 3,
                           "num_critic_only_steps": 1, "offload_train": True,
                           "actor_num_nodes": 1, "actor_num_gpus_per_node": 1}, os.environ)
    placement = cluster.create_placement_group(1, use_gpu=True)
    groups = {role: TrainGroup(role, args, placement, 0.4, True, False, worker_cls=MoveProbe)
              for role in ("critic", "actor")}
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir(parents=True)
    writer = EventWriter(rundir.events_jsonl)
    reserved = (lambda: torch_reserved_by_device(list(groups.values()))) if memory else None
    try:
        train(args, Roles(rollout=IpcRollout(), critic=groups["critic"], actor=groups["actor"],
                          move_plan=plan), Telemetry(writer, 0, reserved), StopFlag(), 0,
              rundir)
        calls = {role: ray.get(g.workers[0].recorded.remote()) for role, g in groups.items()}
        answered = {role: ray.get(g.workers[0].memory_times.remote())
                    for role, g in groups.items()}
    finally:
        writer.close()
        for group in groups.values():
            group.kill()
        ray.util.remove_placement_group(placement.group)
    return calls, read_events(rundir.events_jsonl)[0], answered


def check_order(calls: list[Call]) -> None:
    """wake/sleep alternate from asleep, and the work runs awake."""
    awake = False
    for name, _, _, awake_before in calls:
        assert awake_before == awake, (name, calls)
        if name == "wake_up":
            assert not awake
            awake = True
        elif name == "sleep":
            assert awake
            awake = False
        elif name in ("train_critic", "train_actor", "export"):
            assert awake, (name, calls)
    assert not awake


def overlapping(a: list[Call], b: list[Call], name_a: str, name_b: str) -> bool:
    return any(x[1] < y[2] and y[1] < x[2] for x in a if x[0] == name_a
               for y in b if y[0] == name_b)


PLANS = {"none": MovePlan(), "trainers": MovePlan(True, False, "t"),
         "rollout": MovePlan(True, True, "r")}


@pytest.mark.parametrize("level", ["none", "trainers", "rollout"])
def test_moves_on_ray_keep_each_trainer_in_order(joined, tmp_path: Path, level: str) -> None:
    calls, events, _ = run_train(joined, tmp_path, PLANS[level])
    critic, actor = calls["critic"], calls["actor"]
    check_order(critic)
    check_order(actor)
    assert [c[0] for c in critic].count("train_critic") == 3
    assert [c[0] for c in actor].count("train_actor") == 2
    moves = [e for e in events if e["kind"] == "offload" and e["model"] != "rollout"]
    assert len(moves) == sum(c[0] in ("wake_up", "sleep") for c in critic + actor)
    critic_sleeps_while_actor_works = (overlapping(critic, actor, "sleep", "train_actor")
                                       or overlapping(critic, actor, "sleep", "wake_up"))
    actor_wakes_while_critic_trains = overlapping(actor, critic, "wake_up", "train_critic")
    # what the driver still waited of each move: all of it when waited on where it starts
    critic_offloads = [e["waited_seconds"] for e in moves
                       if e["model"] == "critic" and e["direction"] == "offload"]
    if level == "none":
        assert not critic_sleeps_while_actor_works and not actor_wakes_while_critic_trains
        assert min(e["waited_seconds"] for e in moves) >= 0.8 * MoveProbe.MOVE_S
    else:
        assert critic_sleeps_while_actor_works and actor_wakes_while_critic_trains
        assert min(critic_offloads) < 0.5 * MoveProbe.MOVE_S  # done behind the actor's work


def test_memory_sample_does_not_wait_behind_a_move(joined, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU sample at a phase's end asks each trainer its torch memory on the telemetry
    thread (roles.TELEMETRY): it is answered while the move the overlapped plan left running
    is still under way, not queued behind it (on the H200 each such wait cost ~0.2 s per
    phase). Ray runs a worker's default-group calls one at a time, so a sample answered inside
    a move's interval on the same worker can only have come from another thread."""
    from ppodeck.engine.driver import telemetry

    monkeypatch.setattr(telemetry, "nvml_devices", lambda: [
        {"index": 0, "uuid": "GPU-0", "used_bytes": 1 << 30, "total_bytes": 1 << 34}])
    calls, events, memory = run_train(joined, tmp_path, PLANS["rollout"], memory=True)
    samples = [e for e in events if e["kind"] == "gpu"]
    assert samples and all(s["devices"][0]["torch_reserved_bytes"] == 2 << 20 for s in samples)
    during_a_move = [t for role in calls for t in memory[role]
                     for name, start, end, _ in calls[role]
                     if name in ("wake_up", "sleep") and start < t < end]
    assert during_a_move, (memory, calls)
