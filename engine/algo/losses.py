"""Per-token PPO losses (miles' loss_hub/losses.py); engine.algo.reduce reduces them."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .kl import at_least_fp32, safe_log_ratio, zero_inactive


class PolicyLossOut(NamedTuple):
    pg_loss: torch.Tensor  # [B, T], 0 at inactive tokens
    clipfrac: torch.Tensor  # [B, T], 1.0 where the clipped surrogate was selected
    ppo_kl: torch.Tensor  # [B, T], old_logp - logp, 0 at inactive tokens


class ValueLossOut(NamedTuple):
    loss: torch.Tensor  # [B, T]
    clipfrac: torch.Tensor  # [B, T], 1.0 where |V - V_old| > value_clip


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float,
    eps_clip_c: float | None = None,
) -> PolicyLossOut:
    """PPO clipped surrogate, with optional dual clip for negative advantages.

    ratio = exp(clamp(-ppo_kl, -20, 20)); pg = max(-ratio*A, -clip(ratio, 1-eps, 1+eps_high)*A);
    with eps_clip_c and A < 0: pg = min(-eps_clip_c*A, pg). ppo_kl and A are zeroed (after
    nan_to_num) at inactive tokens, so those tokens contribute no loss and no gradient.
    """
    if eps_clip_c is not None and eps_clip_c <= 1.0:
        raise ValueError(
            "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0, "
            f"but get the value: {eps_clip_c}."
        )
    ppo_kl = zero_inactive(old_logp - logp, mask)
    adv = zero_inactive(adv, mask)
    ratio = safe_log_ratio(-ppo_kl).exp()
    pg1 = -ratio * adv
    pg2 = -ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip_high) * adv
    pg = torch.maximum(pg1, pg2)
    clipfrac = (pg2 > pg1).float()
    if eps_clip_c is not None:
        # Dual clip: a tiny-probability token with A < 0 cannot push the loss above -c*A.
        pg = torch.where(adv < 0, torch.minimum(-eps_clip_c * adv, pg), pg)
    return PolicyLossOut(pg_loss=pg, clipfrac=clipfrac, ppo_kl=ppo_kl)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    value_clip: float,
) -> ValueLossOut:
    """Clipped value loss max((V_clip - R)^2, (V - R)^2), V_clip = V_old + clamp(V - V_old, +-c).

    No 0.5 factor and no coefficient (miles): the critic has its own optimizer and LR. Unmasked:
    the sample-mean reducer applies the loss mask.
    """
    delta = values - old_values
    clipped = old_values + delta.clamp(-value_clip, value_clip)
    loss = torch.maximum((clipped - returns).square(), (values - returns).square())
    clipfrac = (delta.abs() > value_clip).float()
    return ValueLossOut(loss=loss, clipfrac=clipfrac)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy [...] of softmax(logits [..., V]), from log_softmax (stable for large logits).

    Computed in at least fp32. Vocabulary entries with probability 0 (logit -inf) contribute 0,
    not NaN. Scale the logits by the rollout temperature before calling, as miles does.
    """
    logp = torch.log_softmax(at_least_fp32(logits), dim=-1)
    # Zero the -inf entries before the product, not after: 0 * -inf would also poison the grad.
    finite_logp = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
    return -(logp.exp() * finite_logp).sum(dim=-1)
