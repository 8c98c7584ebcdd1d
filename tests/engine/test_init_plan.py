"""init's steps one after another (miles' order) or at once, and the rollout start's parts.

The driver's threads are exercised with stand-in roles: no Ray, no models."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.memory import count_params, init_peak_gib
from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.driver.roles import (
    at_once,
    plan_init,
    run_init_steps,
    start_rollout,
)
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import EventWriter

GIB = 1 << 30


def preset_args(name: str = "qwen3-0.6b-ppo-1gpu", **values: Any) -> dict[str, Any]:  # noqa: ANN401
    from ppodeck.engine.config import resolve

    return dict(resolve(resolve_preset(load_preset(name)).with_values(**values), os.environ))


def test_initial_weight_push_is_resolved_from_the_debug_modes() -> None:
    assert resolve_values({}, os.environ)["initial_weight_push"] is True
    assert resolve_values({"debug_rollout_only": True}, os.environ)["initial_weight_push"] is False
    assert resolve_values({"debug_train_only": True}, os.environ)["initial_weight_push"] is False


def test_hf_on_a_big_gpu_starts_every_role_at_once_and_says_how_much_it_needs() -> None:
    args = preset_args()
    need = init_peak_gib(args, count_params(args), with_rollout=True, num_trainers=2, env={})
    # 0.6B: two trainers at 10 B/param (bf16 weights, fp32 master and grads), the rollout
    # generating rollout 0's batch as check()'s estimate counts it (bf16 weights, the packed
    # copy, 64 rows of K/V at 320 slots and the sampling buffers), a CUDA context each
    assert need is not None and 14 < need < 18
    assert need == pytest.approx(  # one memory model: the rollout term is check()'s own
        init_peak_gib(args, count_params(args), with_rollout=False, num_trainers=2, env={})
        + check_rollout_gib(args), abs=0.01)
    plan = plan_init(args, use_gpu=True, num_trainers=2, gpu_bytes=141 * GIB, env={})
    assert plan.trainers_together and plan.with_rollout
    assert "start at once" in plan.message and "GiB" in plan.message


def check_rollout_gib(args: dict[str, Any]) -> float:
    """The rollout's GiB in check()'s generate phase (engine/config/memory.py)."""
    from ppodeck.engine.config.memory import memory_estimate

    return memory_estimate(args, count_params(args), env={})["generate"]["rollout"]


def test_sglang_keeps_its_start_first_and_a_small_gpu_keeps_miles_order() -> None:
    sglang = plan_init(preset_args(rollout_backend="sglang"), True, 2, 141 * GIB, env={})
    assert sglang.trainers_together and not sglang.with_rollout
    assert "SGLang engines first" in sglang.message
    small = plan_init(preset_args(), True, 2, gpu_bytes=12 * GIB, env={})
    assert not small.trainers_together and "too much at once" in small.message


def test_the_switch_and_the_cpu_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import ppodeck.engine.driver.roles as roles

    args = preset_args("tiny-cpu")
    assert not plan_init(args, False, 2, env={}).trainers_together  # CPU: shared cores
    forced = plan_init(args, False, 2, env={"PPODECK_INIT_OVERLAP": "1"})
    assert forced.trainers_together and forced.with_rollout
    off = plan_init(preset_args(), True, 2, 141 * GIB, env={"PPODECK_INIT_OVERLAP": "0"})
    assert not off.trainers_together and "PPODECK_INIT_OVERLAP=0" in off.message
    monkeypatch.setattr(roles, "_smallest_gpu_bytes", lambda: None)  # NVML did not answer
    unknown = plan_init(preset_args(), True, 2, env={})
    assert not unknown.trainers_together and "GPU memory (NVML) unknown" in unknown.message


def test_at_once_runs_together_keeps_order_and_raises_the_first_error() -> None:
    barrier = threading.Barrier(3, timeout=5)  # passes only if all three run at once

    def step(value: int):  # noqa: ANN202
        return lambda: (barrier.wait(), value)[1]

    assert at_once([step(1), step(2), step(3)]) == [1, 2, 3]

    def fails() -> None:
        raise ValueError("critic rank 0: boom")

    start = time.perf_counter()
    with pytest.raises(ValueError, match="boom"):
        at_once([lambda: time.sleep(3), fails])
    assert time.perf_counter() - start < 2  # not held by the slow step


class StandInRollout:
    """RolloutHandle's calls, with the manager's init report."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def init(self, warm_up: bool = False) -> dict[str, Any]:
        self.calls.append("rollout init" + (" + warm-up" if warm_up else ""))
        time.sleep(0.05)
        return {"notes": ["synthetic task"], "parts": {"imports": 0.01, "model build": 0.02}}

    def offload(self) -> dict[str, Any]:
        self.calls.append("rollout offload")
        return {"noop": True, "bytes": 0, "seconds": 0.0, "where": "cpu"}


def events_of(tmp_path: Path, run) -> list[dict[str, Any]]:  # noqa: ANN001
    writer = EventWriter(tmp_path / "events.jsonl")
    tm = Telemetry(writer, root_pid=0)
    run(tm)
    tm.close()
    writer.close()
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


def test_the_rollout_start_step_carries_its_parts_and_a_log_line(tmp_path: Path) -> None:
    calls: list[str] = []
    rollout = StandInRollout(calls)
    events = events_of(tmp_path, lambda tm: start_rollout(rollout, tm, {"offload_rollout": True}))
    end = next(e for e in events if e["kind"] == "phase" and e["state"] == "end")
    assert end["name"] == "rollout_start" and end["parent"] == "init"
    parts = end["parts"]
    assert list(parts) == ["worker ready", "imports", "model build", "sleep"]
    assert sum(parts.values()) <= end["seconds"] + 0.01
    assert calls == ["rollout init", "rollout offload"]
    assert any(e["kind"] == "log" and e["msg"].startswith("rollout start ") for e in events)


def test_run_init_steps_at_once_or_in_miles_order(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Together, the trainers' inits run side by side; in miles' order one after another. Read
    from when each init ran, not from a wall-clock bound (a loaded CI host stretches those)."""
    import ppodeck.engine.driver.roles as roles

    calls: list[str] = []
    spans: dict[str, tuple[float, float]] = {}

    def init_trainer(group: str, tm: Telemetry, offload: bool) -> list[dict[str, Any]]:
        calls.append(f"{group} init")
        start = time.perf_counter()
        time.sleep(0.2)
        spans[group] = (start, time.perf_counter())
        return [{"role": group}]

    monkeypatch.setattr(roles, "init_trainer", init_trainer)
    args = {"offload_train": True, "offload_rollout": False}

    def run(plan: roles.InitPlan) -> list[Any]:
        infos: list[Any] = []
        events_of(tmp_path, lambda tm: infos.extend(
            run_init_steps(plan, StandInRollout(calls), ["critic", "actor"], tm, args)))
        return infos

    def side_by_side() -> bool:
        (critic_start, critic_end), (actor_start, actor_end) = spans["critic"], spans["actor"]
        return critic_start < actor_end and actor_start < critic_end

    infos = run(roles.InitPlan(True, True, ""))
    assert infos == [[{"role": "critic"}], [{"role": "actor"}]] and side_by_side()
    assert "rollout init + warm-up" in calls  # hidden behind the trainers: the decoder warms
    calls.clear()
    spans.clear()
    infos = run(roles.InitPlan(False, False, ""))
    assert calls == ["rollout init", "critic init", "actor init"] and not side_by_side()


@pytest.mark.parametrize("together", [False, True])
def test_a_failed_model_check_stops_the_trainers_before_they_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, together: bool) -> None:
    """The preflight's Megatron config checks run alongside Ray's start: a trainer waits for
    them and never builds a model when they failed; the error is the driver's to report."""
    import ppodeck.engine.driver.roles as roles

    calls: list[str] = []
    monkeypatch.setattr(roles, "init_trainer", lambda group, tm, offload: calls.append(group))

    def checks() -> None:
        raise AssertionError("num_attention_heads must be a multiple of the TP size")

    plan = roles.InitPlan(together, together, "")
    with pytest.raises(AssertionError, match="multiple of the TP size"):
        events_of(tmp_path, lambda tm: run_init_steps(
            plan, StandInRollout(calls), ["critic", "actor"], tm,
            {"offload_train": True, "offload_rollout": False}, checks))
    assert "critic" not in calls and "actor" not in calls
