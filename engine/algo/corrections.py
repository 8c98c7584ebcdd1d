"""Off-policy correction against the rollout engine's log-probs (miles loss_hub/corrections.py).

The rollout backend samples with its own numerics (bf16 kernels, another attention), so its
log-probs differ from the trainer's recomputed ones. Truncated importance sampling reweights each
token's policy loss by w = clamp(exp(train_logp - rollout_logp), tis_clip_low, tis_clip), where
train_logp is the trainer's pi_old (miles' vanilla_tis_function).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .kl import approx_kl, at_least_fp32, zero_inactive


class TISOut(NamedTuple):
    weights: torch.Tensor  # [B, T] clamp(ratio, low, high): multiplies the per-token pg loss
    ratio: torch.Tensor  # [B, T] exp(train - rollout) before the clamp (miles' "tis" metric)
    clipfrac: torch.Tensor  # [B, T] 1.0 where the clamp changed the ratio ("tis_clipfrac")
    abs_dev: torch.Tensor  # [B, T] |ratio - 1| ("tis_abs")


def truncated_importance_weights(train_logp: torch.Tensor, rollout_logp: torch.Tensor,
                                 clip_low: float, clip_high: float) -> TISOut:
    """miles' vanilla TIS: weights, pre-clamp ratio, clip indicator and |ratio - 1| per token."""
    ratio = torch.exp(at_least_fp32(train_logp) - at_least_fp32(rollout_logp))
    weights = ratio.clamp(min=clip_low, max=clip_high)
    return TISOut(weights=weights, ratio=ratio, clipfrac=(weights != ratio).float(),
                  abs_dev=(ratio - 1.0).abs())


def rollout_mismatch(train_logp: torch.Tensor, rollout_logp: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: |train - rollout| log-prob and KL(rollout || train) by low_var_kl (k3 clamped
    to [-10, 10]); both 0 at inactive tokens, as miles' train_rollout_logprob_abs_diff and
    train_rollout_kl before reduction."""
    abs_diff = zero_inactive((at_least_fp32(train_logp) - at_least_fp32(rollout_logp)).abs(),
                             mask)
    kl = approx_kl(rollout_logp, train_logp, "low_var_kl", mask=mask)
    return abs_diff, kl
