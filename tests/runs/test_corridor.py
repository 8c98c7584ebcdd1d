"""The canary's corridor (engine/run/corridor.py) on made-up event streams, and the versioned
corridor file's shape. The canary's real runs are in tests/engine/test_canary.py."""

from __future__ import annotations

import json

import pytest

from ppodeck.engine.launch.canary import RECIPE_OVERRIDES, recipe
from ppodeck.engine.run.corridor import (
    METRICS,
    STEP_TIME,
    build_corridor,
    corridor_path,
    judge,
    read_corridor,
    run_series,
)


def _events(rewards: list[float], kl: float = 0.01, step_s: float = 1.0) -> list[dict]:
    events = []
    for rid, reward in enumerate(rewards):
        events.append({"kind": "phase", "name": "generate", "state": "end", "rollout_id": rid,
                       "seconds": step_s})
        events.append({"kind": "metrics", "step_key": "train/step", "step": 2 * rid,
                       "rollout_id": rid, "role": "critic",
                       "metrics": {"train/critic-value_loss": 0.02}})
        if rid:
            for step in range(2):
                events.append({"kind": "metrics", "step_key": "train/step", "step": 2 * rid + step,
                               "rollout_id": rid, "role": "actor",
                               "metrics": {"train/ppo_kl": kl, "train/pg_clipfrac": 0.05}})
        events.append({"kind": "metrics", "step_key": "rollout/step", "step": rid,
                       "rollout_id": rid, "metrics": {"rollout/raw_reward": reward}})
    return events


RISING = [0.05, 0.06, 0.07, 0.08, 0.10, 0.12]


def test_series_smooths_the_reward_and_means_the_train_steps() -> None:
    series = run_series(_events(RISING))
    assert series["rollout/raw_reward"][2] == pytest.approx((0.05 + 0.06 + 0.07) / 3)
    assert series["train/ppo_kl"][3] == pytest.approx(0.01) and 0 not in series["train/ppo_kl"]
    assert series[STEP_TIME][4] == pytest.approx(1.0)


def test_a_trusted_run_passes_and_a_falling_reward_is_named_with_its_rollout() -> None:
    corridor = build_corridor(recipe("tiny-cpu"), [run_series(_events(RISING))], "cpu: x")
    assert judge(corridor, run_series(_events(RISING))) == []
    falling = [0.05, 0.04, 0.02, 0.01, 0.0, 0.0]
    breaches = judge(corridor, run_series(_events(falling)))
    assert breaches and breaches[0].metric == "rollout/raw_reward"
    assert "reward (rollout/raw_reward) at rollout" in breaches[0].text()


def test_kl_and_step_time_leave_the_corridor() -> None:
    corridor = build_corridor(recipe("tiny-cpu"), [run_series(_events(RISING))], "cpu: x")
    (kl,) = {b.metric for b in judge(corridor, run_series(_events(RISING, kl=0.2)))}
    assert kl == "train/ppo_kl"
    (slow,) = judge(corridor, run_series(_events(RISING, step_s=10.0)))
    assert slow.metric == STEP_TIME and slow.rollout is None
    assert "over the run" in slow.text()


def test_a_missing_metric_is_a_breach() -> None:
    corridor = build_corridor(recipe("tiny-cpu"), [run_series(_events(RISING))], "cpu: x")
    breaches = judge(corridor, run_series(_events(RISING[:3])))
    assert any("missing" in b.label and b.rollout == 5 for b in breaches)


def test_the_versioned_corridor_matches_the_recipe(tmp_path) -> None:
    kept = read_corridor(corridor_path("tiny-cpu"))
    assert kept["recipe"] == json.loads(json.dumps(recipe("tiny-cpu")))
    assert set(kept["bands"]) == set(METRICS) and kept["trusted_runs"] >= 2
    rollouts = RECIPE_OVERRIDES["num_rollout"]
    assert max(int(r) for r in kept["bands"]["rollout/raw_reward"]) == rollouts - 1
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**kept, "version": 0}))
    with pytest.raises(ValueError, match="--refresh"):
        read_corridor(old)
