"""CPU tests for token-level GAE with miles' mask semantics (miles' loss_hub/advantages.py)."""

from __future__ import annotations

import time

import pytest
import torch

from ppodeck.engine.algo import compute_gae, discounted_reverse_cumsum
from tests.algo.helpers import randn, random_mask


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def naive_gae(values, rewards, mask, gamma, lambd, token_rewards=None):
    """Per-sample, per-token loop: masked tokens are skipped and the carry crosses them."""
    batch, length = values.shape
    advantages = torch.zeros(batch, length, dtype=torch.float64)
    returns = torch.zeros(batch, length, dtype=torch.float64)
    for b in range(batch):
        trainable = [i for i in range(length) if mask[b, i] > 0]
        carry, next_value = 0.0, 0.0
        for i in reversed(trainable):
            reward = token_rewards[b, i].item() if token_rewards is not None else 0.0
            if i == trainable[-1]:
                reward += rewards[b].item()
            delta = reward + gamma * next_value - values[b, i].item()
            carry = delta + gamma * lambd * carry
            next_value = values[b, i].item()
            advantages[b, i] = carry
            returns[b, i] = carry + values[b, i].item()
    return advantages, returns


def test_defaults_give_advantage_reward_minus_value_and_return_reward():
    # gamma = lambda = 1, R = 1: every delta telescopes, so A_t = R - V_t and R_t = R.
    # delta_2 = 1 - 0.3 = 0.7; delta_1 = 0.3 - 0.2 = 0.1; delta_0 = 0.2 - 0.1 = 0.1
    # A = [0.9, 0.8, 0.7]
    adv, ret = compute_gae(t([[0.1, 0.2, 0.3]]), t([1.0]), t([[1, 1, 1]]))
    torch.testing.assert_close(adv, t([[0.9, 0.8, 0.7]]))
    torch.testing.assert_close(ret, t([[1.0, 1.0, 1.0]]))


def test_reward_goes_to_last_trainable_token_not_last_position():
    # Response of 2 tokens right-padded to 4: R = 2 lands on index 1, V after it is 0.
    # A = [2 - 0.5, 2 - 0.5, 0, 0]; padding values (9) must not matter.
    adv, ret = compute_gae(t([[0.5, 0.5, 9.0, 9.0]]), t([2.0]), t([[1, 1, 0, 0]]))
    torch.testing.assert_close(adv, t([[1.5, 1.5, 0.0, 0.0]]))
    torch.testing.assert_close(ret, t([[2.0, 2.0, 0.0, 0.0]]))


def test_trailing_masked_tool_output_moves_reward_to_last_trainable_token():
    # Mask [1, 1, 0]: the last response token is masked, so R = 1 sits on index 1.
    adv, _ = compute_gae(t([[0.0, 0.0, 0.0]]), t([1.0]), t([[1, 1, 0]]))
    torch.testing.assert_close(adv, t([[1.0, 1.0, 0.0]]))


def test_masked_holes_carry_undecayed():
    # gamma = lambda = 0.5, mask [1, 0, 1], V = [1, 100, 2], R = 3.
    # Compressed: V = [1, 2], r = [0, 3].
    # delta_1 = 3 + 0.5*0 - 2 = 1 -> A_1 = 1
    # delta_0 = 0 + 0.5*2 - 1 = 0 -> A_0 = 0 + 0.25*1 = 0.25 (one decay step, not two)
    adv, ret = compute_gae(t([[1.0, 100.0, 2.0]]), t([3.0]), t([[1, 0, 1]]), 0.5, 0.5)
    torch.testing.assert_close(adv, t([[0.25, 0.0, 1.0]]))
    torch.testing.assert_close(ret, t([[1.25, 0.0, 3.0]]))


def test_gamma_and_lambda_follow_the_gae_recursion():
    # gamma = 0.9, lambda = 0.8, V = [0.5, 0.25], R = 1.
    # delta_1 = 1 - 0.25 = 0.75 -> A_1 = 0.75
    # delta_0 = 0.9*0.25 - 0.5 = -0.275 -> A_0 = -0.275 + 0.72*0.75 = 0.265
    adv, ret = compute_gae(t([[0.5, 0.25]]), t([1.0]), t([[1, 1]]), 0.9, 0.8)
    torch.testing.assert_close(adv, t([[0.265, 0.75]]))
    torch.testing.assert_close(ret, t([[0.765, 1.0]]))


def test_fully_masked_sample_gets_zero_advantages_and_returns():
    adv, ret = compute_gae(t([[1.0, 2.0], [3.0, 4.0]]), t([5.0, 6.0]), t([[0, 0], [1, 1]]))
    torch.testing.assert_close(adv[0], t([[0.0, 0.0]])[0])
    torch.testing.assert_close(ret[0], t([[0.0, 0.0]])[0])
    torch.testing.assert_close(adv[1], t([[3.0, 2.0]])[0])  # 6 - V_t


def test_token_rewards_are_added_on_trainable_tokens_only():
    # r = -kl_coef*kl = [-0.1, -5, -0.2], mask [1, 0, 1], V = 0, R = 1, gamma = lambda = 1:
    # compressed r = [-0.1, -0.2 + 1] -> A = [-0.1 + 0.8, 0.8]; the masked -5 is dropped.
    adv, _ = compute_gae(
        t([[0.0, 0.0, 0.0]]), t([1.0]), t([[1, 0, 1]]), token_rewards=t([[-0.1, -5.0, -0.2]])
    )
    torch.testing.assert_close(adv, t([[0.7, 0.0, 0.8]]))


def test_non_finite_values_at_masked_positions_do_not_leak():
    values = t([[0.5, float("nan"), 0.5, float("inf")]])
    adv, ret = compute_gae(values, t([1.0]), t([[1, 0, 1, 0]]))
    torch.testing.assert_close(adv, t([[0.5, 0.0, 0.5, 0.0]]))
    torch.testing.assert_close(ret, t([[1.0, 0.0, 1.0, 0.0]]))


@pytest.mark.parametrize("gamma,lambd", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.5), (0.3, 1.0)])
def test_gae_matches_a_naive_per_token_loop(gamma, lambd):
    generator = torch.Generator().manual_seed(7)
    batch, length = 6, 300  # > one 128-token chunk, so the carry across chunks is exercised
    values, rewards = randn(generator, batch, length), randn(generator, batch)
    mask, token_rewards = random_mask(generator, batch, length), randn(generator, batch, length)
    adv, ret = compute_gae(values, rewards, mask, gamma, lambd, token_rewards)
    ref_adv, ref_ret = naive_gae(values, rewards, mask, gamma, lambd, token_rewards)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_gae_keeps_float32_inputs_in_float32_and_tracks_no_gradient():
    values = torch.zeros(2, 3, requires_grad=True)
    adv, ret = compute_gae(values, torch.ones(2), torch.ones(2, 3))
    assert adv.dtype == ret.dtype == torch.float32
    assert not adv.requires_grad and not ret.requires_grad


def test_discounted_reverse_cumsum_matches_a_loop_across_chunks():
    generator = torch.Generator().manual_seed(3)
    x = randn(generator, 3, 257)
    expected = torch.zeros_like(x)
    running = torch.zeros(3, dtype=torch.float64)
    for i in reversed(range(257)):
        running = x[:, i] + 0.97 * running
        expected[:, i] = running
    torch.testing.assert_close(discounted_reverse_cumsum(x, 0.97), expected)


def test_discount_zero_returns_the_input():
    x = t([[1.0, 2.0, 3.0]])
    torch.testing.assert_close(discounted_reverse_cumsum(x, 0.0), x)


def test_gae_is_fast_for_64_samples_of_8192_tokens():
    values, rewards = torch.randn(64, 8192), torch.randn(64)
    mask = (torch.rand(64, 8192) > 0.1).float()
    compute_gae(values, rewards, mask, 0.99, 0.95)  # warm-up
    start = time.perf_counter()
    compute_gae(values, rewards, mask, 0.99, 0.95)
    assert time.perf_counter() - start < 1.0
