"""GRPO group normalization and truncated importance sampling against hand-computed values."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ppodeck.engine.algo import (
    group_normalized_rewards,
    grpo_advantages,
    rollout_mismatch,
    truncated_importance_weights,
)


def test_grpo_rewards_are_normalized_within_each_prompt_group():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    out = group_normalized_rewards(rewards, groups, std_normalization=True)
    for group in (0, 1):
        members = [r for r, g in zip(rewards, groups, strict=True) if g == group]
        mean, std = statistics.fmean(members), statistics.stdev(members)  # unbiased, as torch
        expected = [(r - mean) / (std + 1e-6) for r in members]
        got = [o for o, g in zip(out, groups, strict=True) if g == group]
        assert got == pytest.approx(expected, rel=1e-5)
    # group 0: mean 0.5, unbiased std sqrt(1/3) -> +-0.866
    assert out[0] == pytest.approx(0.5 / math.sqrt(1 / 3), rel=1e-5)


def test_grpo_without_std_normalization_only_subtracts_the_group_mean():
    out = group_normalized_rewards([3.0, 1.0, 10.0, 10.0], [7, 7, 2, 2], std_normalization=False)
    assert out == pytest.approx([1.0, -1.0, 0.0, 0.0])


def test_grpo_groups_need_not_be_contiguous_and_a_constant_group_gives_zero():
    out = group_normalized_rewards([1.0, 5.0, 1.0, 5.0], [0, 1, 0, 1], std_normalization=True)
    assert out == [0.0, 0.0, 0.0, 0.0]  # std 0: no division (miles), mean removed
    with pytest.raises(ValueError, match="group ids"):
        group_normalized_rewards([1.0], [0, 1], std_normalization=True)


def test_grpo_advantages_broadcast_the_reward_over_trainable_response_tokens():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    adv = grpo_advantages(torch.tensor([0.5, -2.0]), mask)
    assert adv.tolist() == [[0.5, 0.5, 0.0], [-2.0, 0.0, -2.0]]


def test_tis_weights_are_the_clamped_ratio_of_train_to_rollout_probabilities():
    train = torch.tensor([[0.0, -1.0, -3.0, -0.5]])
    rollout = torch.tensor([[0.0, -2.0, -1.0, -0.5 - 1e-3]])
    out = truncated_importance_weights(train, rollout, clip_low=0.5, clip_high=2.0)
    ratio = [1.0, math.e, math.exp(-2.0), math.exp(1e-3)]
    assert out.ratio[0].tolist() == pytest.approx(ratio, rel=1e-5)
    assert out.weights[0].tolist() == pytest.approx([1.0, 2.0, 0.5, math.exp(1e-3)], rel=1e-5)
    assert out.clipfrac[0].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert out.abs_dev[0].tolist() == pytest.approx([abs(r - 1) for r in ratio], rel=1e-4)


def test_rollout_mismatch_is_abs_logprob_gap_and_low_var_kl_on_active_tokens():
    train = torch.tensor([[-1.0, -2.0, -0.1]])
    rollout = torch.tensor([[-1.03, -2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    abs_diff, kl = rollout_mismatch(train, rollout, mask)
    assert abs_diff[0].tolist() == pytest.approx([0.03, 0.0, 0.0], abs=1e-6)
    d = -0.03  # rollout - train
    assert kl[0, 0].item() == pytest.approx(math.exp(-d) - 1 + d, rel=1e-4)
    assert kl[0, 1:].tolist() == [0.0, 0.0]
