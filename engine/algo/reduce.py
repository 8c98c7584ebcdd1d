"""Masked reductions: loss reducers, advantage whitening and explained variance."""

from __future__ import annotations

from typing import Any

import torch


def sum_of_sample_mean(
    x: torch.Tensor, mask: torch.Tensor, sample_denoms: torch.Tensor | None = None
) -> torch.Tensor:
    """sum_s sum_t x*m / max(denom_s, 1): the per-sample token mean, summed over samples.

    denom_s is the sample's mask sum, or `sample_denoms[s]` (miles' rollout_mask_sums) when given.
    The caller divides by the number of samples in the step (Megatron scaling) to get a mean.
    """
    denoms = mask.sum(dim=-1) if sample_denoms is None else sample_denoms.to(mask)
    return (_masked(x, mask).sum(dim=-1) / denoms.clamp(min=1)).sum()


def sum_of_tokens(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_s sum_t x*m: the --calculate-per-token-loss reducer (the caller divides by tokens)."""
    return _masked(x, mask).sum()


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # where() first so a NaN/inf at a masked position cannot leak into the sum (0 * inf = NaN).
    return torch.where(mask > 0, x * mask, torch.zeros_like(x))


def normalize_advantages(
    adv: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, group: Any = None
) -> torch.Tensor:
    """Whiten advantages with mask-weighted statistics: (A - mean) * rsqrt(var + eps).

    var has Bessel's correction when the count is >= 2. With a torch.distributed `group`, the
    sum, sum of squares and count are all-reduced over it (miles: the effective DP group);
    `group=None` uses local statistics only. Every position is transformed (miles: the policy
    loss re-zeros masked tokens). Raises ValueError when the (global) mask sum is zero.
    """
    total, total_sq, count = _all_reduced_sums([adv * mask, adv.square() * mask, mask], group)
    if count == 0:
        raise ValueError("The global mask sum across all participating GPUs is zero.")
    mean = total / count
    var = max(total_sq / count - mean**2, 0.0)  # clamp: fp cancellation can go slightly negative
    if count >= 2:
        var *= count / (count - 1)
    return (adv - mean) * (var + eps) ** -0.5


EV_ABS_TOL = 1e-10  # Var(R) below atol + rtol * scale is rounding noise, not a spread of
EV_REL_TOL = 1e-8  # returns (scale: the larger mean square of returns and values, fp32 numbers)


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, group: Any = None
) -> float | None:
    """1 - Var(R - V) / Var(R) over masked tokens (population variances, pooled over `group`).

    1 = the critic predicts the returns exactly, 0 = no better than their mean, < 0 = worse.
    None when it is undefined: no masked tokens, or Var(R) zero up to rounding (absolute and
    relative tolerance), e.g. every sample got the same reward under gamma = lambda = 1, where
    R = A + V carries only the rounding of V: the ratio is then noise over noise (a GPU run logged
    -3.8e18). None becomes null in the events, a gap in a chart; 0.0 would read as
    "the critic explains nothing".
    """
    error = returns - values
    r_sum, r_sq, v_sq, e_sum, e_sq, count = _all_reduced_sums(
        [returns * mask, returns.square() * mask, values.square() * mask, error * mask,
         error.square() * mask, mask], group
    )
    if count == 0:
        return None
    var_returns = max(r_sq / count - (r_sum / count) ** 2, 0.0)
    var_error = max(e_sq / count - (e_sum / count) ** 2, 0.0)
    scale = max(r_sq, v_sq) / count
    if var_returns <= EV_ABS_TOL + EV_REL_TOL * scale:
        return None
    return 1.0 - var_error / var_returns


def _all_reduced_sums(terms: list[torch.Tensor], group: Any) -> list[float]:
    """Sum each term in fp64 (less cancellation in E[x^2] - E[x]^2), all-reduced over `group`."""
    stats = torch.stack([t.detach().double().sum() for t in terms])
    if group is not None:
        import torch.distributed as dist

        dist.all_reduce(stats, group=group)
    return stats.tolist()
