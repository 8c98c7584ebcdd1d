"""GRPO: group-normalized rewards (miles' train_data_conversion) broadcast over the response.

miles normalizes on the rollout side, once per rollout: within each prompt's group of
n_samples_per_prompt samples, reward - group mean, divided by (std + 1e-6) for grpo/gspo with
grpo_std_normalization (off when n_samples_per_prompt == 1) when the std is > 0. std is torch's
unbiased one. The trainer then uses that scalar as the advantage (and return) of every response
token (math_utils.get_grpo_returns); no critic, no GAE.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

GRPO_STD_EPS = 1e-6  # miles: rewards / (std + 1e-6)


def group_normalized_rewards(rewards: Sequence[float], group_ids: Sequence[int],
                             std_normalization: bool) -> list[float]:
    """Each reward minus its group's mean, over (std + 1e-6) when `std_normalization`, the group
    has more than one sample and its std is > 0. Groups are keyed by `group_ids` (the prompt of
    each sample), in any order."""
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    members: dict[int, list[int]] = {}
    for position, group in enumerate(group_ids):
        members.setdefault(int(group), []).append(position)
    out = [0.0] * len(rewards)
    for positions in members.values():
        group_rewards = torch.tensor([float(rewards[p]) for p in positions], dtype=torch.float32)
        normalized = group_rewards - group_rewards.mean()
        if std_normalization and len(positions) > 1:
            std = group_rewards.std()
            if std > 0:
                normalized = normalized / (std + GRPO_STD_EPS)
        for position, value in zip(positions, normalized.tolist(), strict=True):
            out[position] = value
    return out


def grpo_advantages(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] advantages (= returns): each sample's (normalized) reward on every response
    token; zero on padding (miles fills every response token and the loss mask drops the rest;
    zeros keep whitening statistics identical, since they are mask-weighted)."""
    values = rewards.to(torch.float32).reshape(-1, 1).expand_as(mask)
    return torch.where(mask > 0, values, torch.zeros_like(values))
