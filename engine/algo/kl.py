"""KL estimators between the current policy and a base policy, per token (Schulman's k1/k2/k3)."""

from __future__ import annotations

from typing import Literal

import torch

KLKind = Literal["k1", "k2", "k3", "low_var_kl"]
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl")
LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: large enough to be exact in practice, finite in fp32


def safe_log_ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """Log-ratio (at least fp32) with NaN -> 0 and +-inf / large values clamped to +-20, so exp()
    is finite."""
    cleaned = torch.nan_to_num(
        at_least_fp32(log_ratio), nan=0.0, posinf=LOG_RATIO_CLAMP, neginf=-LOG_RATIO_CLAMP
    )
    return cleaned.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def approx_kl(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    kind: KLKind,
    importance_ratio: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate with d = logp - ref_logp, in (at least) fp32.

    k1 = d, k2 = d^2/2, k3 = exp(-d) - 1 + d; low_var_kl is k3 with -d clamped to [-20, 20] and
    the result clamped to [-10, 10]. `importance_ratio` (pi/pi_old, --use-unbiased-kl) multiplies
    the estimate before that final clamp. With `mask`, non-finite values become 0 on trainable
    tokens and everything else is 0, as miles does before reducing the KL loss.
    """
    d = at_least_fp32(logp) - at_least_fp32(ref_logp)
    if kind == "k1":
        kl = d
    elif kind == "k2":
        kl = d.square() / 2.0
    elif kind in ("k3", "low_var_kl"):
        neg_d = safe_log_ratio(-d) if kind == "low_var_kl" else -d
        kl = neg_d.exp() - 1.0 - neg_d
    else:
        raise ValueError(f"Unknown kl_loss_type: {kind}")
    if importance_ratio is not None:
        kl = importance_ratio * kl
    if kind == "low_var_kl":
        kl = kl.clamp(-10.0, 10.0)
    if mask is not None:
        kl = zero_inactive(kl, mask)
    return kl


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 -> fp32 (as miles' .float()); fp64 stays fp64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def zero_inactive(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with NaN/inf -> 0 on active tokens (mask > 0) and exactly 0 elsewhere."""
    cleaned = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return torch.where(mask > 0, cleaned, torch.zeros_like(cleaned))
