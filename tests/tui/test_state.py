"""RunState and Series: pure folding of events into bounded panel data."""

from __future__ import annotations

import json

from ppodeck.engine.run.state import RunState, Series
from tests.tui.conftest import EVENTS_TINY, T0, T_END


def recorded_events() -> list[dict]:
    return [json.loads(line) for line in EVENTS_TINY.read_text().splitlines()]


def test_series_keeps_every_point_until_full() -> None:
    series = Series(capacity=8)
    for x in range(8):
        series.append(x, float(x))
    points = series.points()
    assert points.xs == list(range(8)) and points.means == [float(x) for x in range(8)]


def test_series_downsampling_keeps_the_extremes() -> None:
    series = Series(capacity=16)
    for x in range(10_000):
        series.append(x, 100.0 if x == 4321 else (-50.0 if x == 777 else 1.0))
    points = series.points()
    assert len(series) <= 16 and series.count == 10_000
    assert max(points.maxs) == 100.0 and min(points.mins) == -50.0
    assert points.xs == sorted(points.xs) and points.xs[0] == 0


def test_series_ignores_non_finite_values() -> None:
    series = Series()
    series.append(0, float("nan"))
    series.append(1, float("inf"))
    series.append(2, 3.0)
    assert series.count == 1 and series.points().means == [3.0]


def test_recorded_run_folds_into_panel_data() -> None:
    events = recorded_events()
    state = RunState()
    changed = state.apply(events)
    assert changed == {"metrics", "phase", "offload", "gpu", "status", "log"}
    assert state.events_seen == len(events) and state.events_skipped == 0
    assert state.state == "succeeded" and state.rollout_progress() == (20, 20)
    assert state.elapsed() == T_END - T0 and state.eta() == 0.0
    rewards = [e["metrics"]["rollout/raw_reward"] for e in events
               if e["kind"] == "metrics" and "rollout/raw_reward" in e["metrics"]]
    assert state.points("rollout/raw_reward").means == rewards
    assert state.where == {"actor": "cpu", "critic": "cpu", "rollout": "gpu"}
    last_gpu = [e for e in events if e["kind"] == "gpu"][-1]
    assert [d.non_torch_bytes for d in state.devices] == [
        d["non_torch_bytes"] for d in last_gpu["devices"]]
    assert state.rss_bytes == last_gpu["rss_bytes"]


def test_the_critic_only_warmup_rollout_has_no_actor_phase() -> None:
    state = RunState()
    state.apply(recorded_events())
    assert [s.name for s in state.rollout_spans(0)] == [
        "generate", "rollout_offload", "critic_train", "update_weights", "rollout_onload"]
    assert "actor_train" in [s.name for s in state.rollout_spans(1)]
    assert set(state.phase_means()) >= {"generate", "critic_train", "actor_train", "save"}


def test_live_progress_eta_and_current_phase() -> None:
    events = recorded_events()
    cut = next(i for i, e in enumerate(events)
               if e["kind"] == "phase" and e["rollout_id"] == 5 and e["name"] == "critic_train")
    state = RunState()
    state.apply(events[: cut + 1])
    assert state.state == "running" and state.current_phase == "critic_train"
    assert state.rollout_progress() == (6, 20)
    per_rollout = state.seconds_per_rollout()
    assert per_rollout is not None and 90 < per_rollout < 160
    eta = state.eta(now=events[cut]["ts"])
    assert eta is not None and 14 * per_rollout < eta < 15 * per_rollout


def test_malformed_events_are_skipped_not_fatal() -> None:
    state = RunState()
    state.apply([{"kind": "offload"}, {"kind": "phase", "name": "generate", "state": "start",
                                       "rollout_id": "x"}, {"kind": "mystery"}, {"no": "kind"},
                 {"v": 1, "ts": 1.0, "kind": "log", "level": "info", "source": "t", "msg": "ok"}])
    assert state.events_skipped >= 3 and state.logs[-1].msg == "ok"


def test_memory_stays_bounded_on_long_runs() -> None:
    state = RunState(series_capacity=64, log_capacity=50, phase_capacity=40)
    batch = [{"v": 1, "ts": float(i), "kind": "metrics", "step_key": "train/step", "step": i,
              "rollout_id": i // 4, "metrics": {"train/ppo_kl": i * 1e-6}} for i in range(50_000)]
    batch += [{"v": 1, "ts": float(i), "kind": "log", "level": "info", "source": "s",
               "msg": str(i)} for i in range(1_000)]
    state.apply(batch)
    assert len(state.series["train/ppo_kl"]) <= 64 and len(state.logs) == 50
    assert state.new_logs(state.logs_total - 3) == list(state.logs)[-3:]


def test_the_move_plan_comes_from_its_log_event_only() -> None:
    plan = "moves: the trainers hand over to each other (both awake: 103.1 GiB ...)"
    state = RunState()
    state.apply([{"v": 1, "ts": 1.0, "kind": "log", "level": "info", "source": "driver",
                  "msg": "moves: a line that merely looks like the plan"}])
    assert state.move_plan == ""
    state.apply([{"v": 1, "ts": 2.0, "kind": "log", "level": "info", "source": "driver",
                  "msg": plan, "move_plan": "trainers"}])
    assert state.move_plan == plan
