"""Each health rule: a synthetic stream that trips it (and only it) and the healthy one that
does not; thresholds from a [health] table; the hang rule."""

from __future__ import annotations

import math

import pytest

from ppodeck.engine.config.health import RULES
from ppodeck.engine.run.health import (
    HealthConfigError,
    HealthJudge,
    RunFacts,
    Thresholds,
    parse_health_table,
    worst_level,
)
from tests.health.streams import T0, stream

FACTS = RunFacts(clip_grad=1.0, num_critic_only_steps=1, rollout_max_response_len=8,
                 use_critic=True)


def judge(events, thresholds=None, facts=FACTS, finish=True):
    j = HealthJudge(thresholds or Thresholds(), facts)
    j.feed(events)
    if finish:
        j.finish()
    return j


def codes(j: HealthJudge) -> set[str]:
    return {f.code for f in j.findings}


def test_a_healthy_run_fires_nothing() -> None:
    j = judge(stream(40))
    assert j.findings == [] and j.level() == "ok"
    assert j.rollouts_judged == 40


BENT = {
    "health.clipfrac_high": {"train/pg_clipfrac": lambda r, s: 0.7 if r >= 10 else 0.1},
    "health.kl_jump": {"train/ppo_kl": lambda r, s: 0.2 if r == 15 else 0.02},
    "health.entropy_collapse": {"train/entropy_loss": lambda r, s: 1.2 if r < 5 else 0.05},
    "health.grad_norm_at_clip": {"train/grad_norm": lambda r, s: 1.0 if r >= 12 else 0.5},
    "health.explained_variance_negative": {
        "critic/explained_variance": lambda r, s: -0.2 if r >= 8 else 0.3},
    "health.value_loss_diverging": {
        "train/critic-value_loss": lambda r, s: 0.1 * (2 ** max(0, r - 10))},
    "health.truncation": {"rollout/truncated_ratio": lambda r, s: 0.8 if r >= 20 else 0.05},
    "health.reward_flat": {"rollout/raw_reward": lambda r, s: 0.0},
    "health.logprob_gap_climbing": {
        "train/train_rollout_logprob_abs_diff": lambda r, s: 0.01 * 1.3 ** max(0, r - 10)},
    "health.nonfinite_loss": {"train/critic-value_loss": lambda r, s: None if r == 7 else 0.1},
}


@pytest.mark.parametrize("code", sorted(BENT))
def test_each_rule_trips_alone_with_value_threshold_rollout_and_fix(code: str) -> None:
    j = judge(stream(30, bend=BENT[code]))
    assert codes(j) == {code}
    finding = j.findings[0]
    assert finding.rollout_id is not None and finding.rollout_id >= 0
    assert finding.fix and finding.message
    assert finding.level == next(r.level for r in RULES if r.code == code)
    assert isinstance(finding.threshold, float)


def test_a_rule_fires_once_per_episode_and_rearms_after_clearing() -> None:
    bend = {"train/pg_clipfrac": lambda r, s: 0.7 if r in (5, 6, 7, 20, 21) else 0.1}
    j = judge(stream(30, bend=bend))
    assert [(f.code, f.rollout_id) for f in j.findings] == [
        ("health.clipfrac_high", 5), ("health.clipfrac_high", 20)]
    assert j.findings[0].value == pytest.approx(0.7)
    assert j.findings[0].threshold == 0.5


def test_explained_variance_during_the_warmup_or_null_does_not_count() -> None:
    warm = {"critic/explained_variance": lambda r, s: -0.5 if r < 8 else 0.3}
    assert judge(stream(20, bend=warm), facts=RunFacts(1.0, 8, 8, True)).findings == []
    nulls = {"critic/explained_variance": lambda r, s: None if r % 2 else -0.1}
    j = judge(stream(20, bend=nulls))
    assert codes(j) == {"health.explained_variance_negative"}
    assert j.findings[0].rollout_id == 10  # defined below 0 after the warmup: 2,4,6,8,10


def test_grpo_without_critic_metrics_is_judged_without_them() -> None:
    bend = {"train/critic-value_loss": lambda r, s: None, "critic/explained_variance":
            lambda r, s: None}
    events = stream(30, bend=bend)
    for e in events:  # GRPO: no critic keys at all
        if e["kind"] == "metrics":
            e["metrics"] = {k: v for k, v in e["metrics"].items() if v is not None}
    assert judge(events, facts=RunFacts(1.0, 0, 8, False)).findings == []


def test_entropy_not_computed_is_zero_and_never_collapses() -> None:
    assert judge(stream(30, bend={"train/entropy_loss": lambda r, s: 0.0})).findings == []


def test_the_last_rollout_is_judged_only_when_the_run_ended() -> None:
    bend = {"train/pg_clipfrac": lambda r, s: 0.9 if r == 9 else 0.1}
    events = stream(10, bend=bend, final=None)
    assert judge(events, finish=False).findings == []
    assert codes(judge(events, finish=True)) == {"health.clipfrac_high"}


def test_preset_thresholds_override_and_disable() -> None:
    bend = {"train/pg_clipfrac": lambda r, s: 0.3}
    table = parse_health_table({"clipfrac-max": 0.25})
    assert codes(judge(stream(20, bend=bend), Thresholds(**table))) == {"health.clipfrac_high"}
    flat = stream(20, bend={"rollout/raw_reward": lambda r, s: 1.0})
    off = Thresholds(**parse_health_table({"disable": ["health.reward_flat"]}))
    assert judge(flat, off).findings == []
    assert Thresholds(**parse_health_table({"reward_flat_rollouts": 25})).reward_flat_rollouts \
        == 25


@pytest.mark.parametrize(("table", "words"), [
    ({"clipfrac-maxx": 0.4}, "unknown key 'clipfrac-maxx'"),
    ({"clipfrac-max": "high"}, "must be a number"),
    ({"hang-minutes": -1}, ">= 0"),
    ({"reward-flat-rollouts": 2.5}, "whole number"),
    ({"disable": ["health.nope"]}, "unknown rule 'health.nope'"),
])
def test_bad_health_tables_name_the_key_and_the_fix(table, words) -> None:
    with pytest.raises(HealthConfigError, match="Fix|must") as info:
        parse_health_table(table, "p.toml [health]")
    assert words in str(info.value) and "p.toml [health]" in str(info.value)


def test_hang_fires_only_while_the_driver_is_alive() -> None:
    j = judge(stream(5, final=None), finish=False)
    last = T0 + 10 * 5 + 3
    assert j.check_hang(last + 29 * 60, driver_alive=True) == []
    assert j.check_hang(last + 31 * 60, driver_alive=False) == []
    fired = j.check_hang(last + 31 * 60, driver_alive=True)
    assert [f.code for f in fired] == ["health.hang"] and fired[0].level == "error"
    assert fired[0].value == pytest.approx(31.0) and fired[0].rollout_id == 4
    assert j.check_hang(last + 40 * 60, driver_alive=True) == []  # once per episode
    assert worst_level(j.findings) == "error"


def test_malformed_events_are_skipped_not_fatal() -> None:
    events = stream(12) + [{"kind": "metrics", "rollout_id": 3, "metrics": 7},
                           {"kind": "metrics", "rollout_id": "x"}, {"ts": "bad"}]
    assert judge(events).findings == []


def test_nonfinite_value_is_reported_as_nan_in_json_safe_form() -> None:
    j = judge(stream(12, bend=BENT["health.nonfinite_loss"]))
    event = j.findings[0].to_event()
    assert math.isnan(event["value"]) and event["id"].startswith("health.nonfinite_loss:")
