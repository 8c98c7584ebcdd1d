"""PPO maths over right-padded response tokens ([B, T], float 0/1 loss mask); pure torch.

The formulas follow miles "as coded" (see ../shared/reference/miles-ppo-spec.md section 5).
"""

from __future__ import annotations

from .corrections import TISOut, rollout_mismatch, truncated_importance_weights
from .gae import compute_gae, discounted_reverse_cumsum
from .grpo import group_normalized_rewards, grpo_advantages
from .kl import KL_KINDS, approx_kl
from .losses import (
    PolicyLossOut,
    ValueLossOut,
    entropy_from_logits,
    policy_loss,
    value_loss,
)
from .reduce import (
    explained_variance,
    normalize_advantages,
    sum_of_sample_mean,
    sum_of_tokens,
)

__all__ = [
    "KL_KINDS",
    "PolicyLossOut",
    "TISOut",
    "ValueLossOut",
    "approx_kl",
    "compute_gae",
    "discounted_reverse_cumsum",
    "entropy_from_logits",
    "explained_variance",
    "group_normalized_rewards",
    "grpo_advantages",
    "normalize_advantages",
    "policy_loss",
    "rollout_mismatch",
    "sum_of_sample_mean",
    "sum_of_tokens",
    "truncated_importance_weights",
    "value_loss",
]
