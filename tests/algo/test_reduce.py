"""CPU tests for loss reducers, advantage whitening and explained variance (miles'
training_utils/loss.py and normalize_advantages)."""

from __future__ import annotations

import math

import pytest
import torch

from ppodeck.engine.algo import (
    compute_gae,
    explained_variance,
    normalize_advantages,
    sum_of_sample_mean,
    sum_of_tokens,
)
from tests.algo.helpers import positions, randn, random_mask


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# --------------------------------------------------------------------------- reducers


def test_sum_of_sample_mean_sums_per_sample_token_means():
    # Row 0: (1 + 2) / 2 = 1.5; row 1: 4 / 1 = 4; row 2 fully masked: 0 / max(0, 1) = 0.
    x = t([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    mask = t([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    torch.testing.assert_close(sum_of_sample_mean(x, mask), t(5.5))


def test_sum_of_sample_mean_uses_given_sample_denominators():
    # rollout_mask_sums: row 0 divides by 4 instead of 2 -> 3/4 + 4/1.
    x, mask = t([[1, 2, 3], [4, 5, 6]]), t([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(sum_of_sample_mean(x, mask, sample_denoms=t([4, 1])), t(4.75))


def test_sum_of_tokens_is_the_plain_masked_sum():
    x, mask = t([[1, 2, 3], [4, 5, 6]]), t([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(sum_of_tokens(x, mask), t(7.0))


def test_reducers_ignore_non_finite_values_at_masked_positions():
    x, mask = t([[1.0, float("nan"), float("inf")]]), t([[1, 0, 0]])
    torch.testing.assert_close(sum_of_sample_mean(x, mask), t(1.0))
    torch.testing.assert_close(sum_of_tokens(x, mask), t(1.0))


def test_sum_of_sample_mean_matches_a_naive_loop():
    generator = torch.Generator().manual_seed(17)
    x, mask = randn(generator, 6, 20), random_mask(generator, 6, 20)
    expected = 0.0
    for b in range(6):
        tokens = [x[b, i].item() for i in range(20) if mask[b, i]]
        expected += sum(tokens) / max(len(tokens), 1)
    assert sum_of_sample_mean(x, mask).item() == pytest.approx(expected)


# --------------------------------------------------------------------------- whitening


def test_whitening_uses_mask_weighted_stats_with_bessel_correction():
    # Masked values 1, 2, 3: mean 2, population var 2/3, Bessel x 3/2 -> 1.
    # Output (A - 2) * rsqrt(1 + 1e-8); the masked 100 is transformed too (-> 98).
    out = normalize_advantages(t([[1, 2, 3, 100]]), t([[1, 1, 1, 0]]))
    torch.testing.assert_close(out, t([[-1, 0, 1, 98]]) / math.sqrt(1 + 1e-8))


def test_whitening_a_single_token_skips_bessel_and_uses_eps():
    # count 1: var 0 (no Bessel), so (A - A) * rsqrt(1e-8) = 0.
    torch.testing.assert_close(normalize_advantages(t([[5.0, 0.0]]), t([[1, 0]])), t([[0.0, -5e4]]))


def test_whitening_with_zero_mask_sum_raises_miles_message():
    message = "The global mask sum across all participating GPUs is zero"
    with pytest.raises(ValueError, match=message):
        normalize_advantages(t([[1.0, 2.0]]), t([[0, 0]]))


def test_whitening_matches_a_naive_loop():
    generator = torch.Generator().manual_seed(19)
    adv, mask = randn(generator, 5, 30) * 2 + 1, random_mask(generator, 5, 30)
    tokens = [adv[index].item() for index in positions(adv.shape) if mask[index]]
    mean = sum(tokens) / len(tokens)
    var = sum((x - mean) ** 2 for x in tokens) / (len(tokens) - 1)
    expected = (adv - mean) / math.sqrt(var + 1e-8)
    torch.testing.assert_close(normalize_advantages(adv, mask), expected)


def test_whitening_pools_statistics_over_the_group(monkeypatch):
    # Two "ranks": this one holds shard a, the other shard b. The fake all_reduce adds b's sums,
    # so shard a must be whitened exactly as if both shards were whitened together.
    generator = torch.Generator().manual_seed(23)
    a, b = randn(generator, 2, 8), randn(generator, 3, 8) + 3
    mask_a, mask_b = random_mask(generator, 2, 8), random_mask(generator, 3, 8)
    b_sums = torch.stack([(b * mask_b).sum(), (b.square() * mask_b).sum(), mask_b.sum()])

    def fake_all_reduce(tensor, group=None):
        assert group == "dp-group"
        tensor += b_sums

    monkeypatch.setattr(torch.distributed, "all_reduce", fake_all_reduce)
    pooled = normalize_advantages(a, mask_a, group="dp-group")
    together = normalize_advantages(torch.cat([a, b]), torch.cat([mask_a, mask_b]))
    torch.testing.assert_close(pooled, together[:2])


# --------------------------------------------------------------------------- explained variance


def test_explained_variance_hand_value():
    # R = [1, 2, 3], V = [1, 2, 2]: error [0, 0, 1], Var(err) = 2/9, Var(R) = 2/3 -> 1 - 1/3.
    # The masked 4th token (V = 50) must not count.
    ev = explained_variance(t([[1, 2, 2, 50]]), t([[1, 2, 3, 0]]), t([[1, 1, 1, 0]]))
    assert ev == pytest.approx(2 / 3)


def test_explained_variance_is_one_for_a_perfect_critic_and_zero_for_the_mean():
    returns, mask = t([[1.0, 3.0, 5.0]]), t([[1, 1, 1]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(t([[3.0, 3.0, 3.0]]), returns, mask) == pytest.approx(0.0)


def test_explained_variance_is_none_when_returns_are_constant_or_no_token_counts():
    # gamma = lambda = 1 and the same reward everywhere: Var(R) = 0 -> undefined.
    assert explained_variance(t([[0.1, 0.5]]), t([[0.1, 0.1]]), t([[1, 1]])) is None
    assert explained_variance(t([[0.1, 0.5]]), t([[1.0, 2.0]]), t([[0, 0]])) is None


def test_explained_variance_is_none_when_returns_vary_only_by_rounding():
    # The H200 case: every reward 0, R = A + V in fp32 keeps only V's rounding (~1e-7), so
    # 1 - Var(R - V) / Var(R) was about -1e15. Zero-mean noise: the relative test alone (against
    # E[R^2], itself noise) would not catch it; the absolute one and V's scale do.
    generator = torch.Generator().manual_seed(3)
    values = (randn(generator, 8, 32) * 3.0).float()
    mask = torch.ones_like(values)
    _, returns = compute_gae(values, torch.zeros(8), mask)  # telescoping deltas: R = 0 + noise
    assert 0 < returns.abs().max() < 1e-5  # rounding noise, not exact zeros
    assert explained_variance(values, returns, mask) is None
    # relative tolerance: constant large returns with fp32 rounding noise on top
    big = torch.full((4, 16), 1e4) + randn(generator, 4, 16) * 1e-4
    assert explained_variance(big + 1.0, big, torch.ones_like(big)) is None
    # a real but small spread is still measured
    small = t([[0.0, 0.001, 0.002, 0.003]])
    assert explained_variance(small, small, t([[1, 1, 1, 1]])) == pytest.approx(1.0)


def test_explained_variance_matches_a_naive_loop():
    generator = torch.Generator().manual_seed(29)
    values, returns = randn(generator, 4, 16), randn(generator, 4, 16)
    mask = random_mask(generator, 4, 16)
    pairs = [(values[i].item(), returns[i].item()) for i in positions(values.shape) if mask[i]]

    def variance(xs):
        mean = sum(xs) / len(xs)
        return sum((x - mean) ** 2 for x in xs) / len(xs)

    expected = 1 - variance([r - v for v, r in pairs]) / variance([r for _, r in pairs])
    assert explained_variance(values, returns, mask) == pytest.approx(expected)
