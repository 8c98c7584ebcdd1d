"""The rollout side trains grpo on group-normalized rewards (miles' train_data_conversion)."""

from __future__ import annotations

import os
import statistics

import pytest

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.rollout.manager import RolloutManager
from ppodeck.engine.rollout.types import Prompt, Sample


def _samples(groups: int, n: int) -> list[Sample]:
    prompts = [Prompt(index=g, text=str(g), token_ids=[g]) for g in range(groups)]
    return [Sample(prompt=prompts[g], group_index=g, sample_index=g * n + k)
            for g in range(groups) for k in range(n)]


def _post_process(**flags: object) -> list[float]:
    args = resolve_values({"rollout_batch_size": 2, "n_samples_per_prompt": 4, **flags}, os.environ)
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    return RolloutManager(args)._post_process_rewards(_samples(2, 4), rewards)


def test_grpo_rewards_are_normalized_per_prompt_group():
    out = _post_process(advantage_estimator="grpo")
    first = [1.0, 0.0, 0.0, 0.0]
    mean, std = statistics.fmean(first), statistics.stdev(first)
    assert out[:4] == pytest.approx([(r - mean) / (std + 1e-6) for r in first], rel=1e-5)
    assert sum(out[4:]) == pytest.approx(0.0, abs=1e-6) and out[4] > 0 > out[7]


def test_ppo_and_disabled_normalization_keep_raw_rewards():
    raw = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert _post_process(advantage_estimator="ppo") == raw
    assert _post_process(advantage_estimator="grpo", disable_rewards_normalization=True) == raw


def test_disable_grpo_std_normalization_only_centres():
    out = _post_process(advantage_estimator="grpo", disable_grpo_std_normalization=True)
    assert out == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75])
