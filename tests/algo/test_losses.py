"""CPU tests for the PPO policy loss (clip, dual clip), the clipped value loss and entropy."""

from __future__ import annotations

import math

import pytest
import torch

from ppodeck.engine.algo import entropy_from_logits, policy_loss, value_loss
from tests.algo.helpers import positions, randn, random_mask


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def logp_pair(ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, old_logp) with exp(logp - old_logp) = ratio, for one token."""
    return t([[math.log(ratio)]]), t([[0.0]])


# --------------------------------------------------------------------------- policy loss


def naive_policy_loss(logp, old_logp, adv, mask, eps, eps_high, eps_c):
    pg = torch.zeros_like(logp)
    clipfrac = torch.zeros_like(logp)
    kl = torch.zeros_like(logp)
    for index in positions(logp.shape):
        if mask[index] == 0:
            continue
        ppo_kl = old_logp[index].item() - logp[index].item()
        a = adv[index].item()
        ratio = math.exp(min(max(-ppo_kl, -20.0), 20.0))
        loss1, loss2 = -ratio * a, -min(max(ratio, 1 - eps), 1 + eps_high) * a
        loss = max(loss1, loss2)
        if eps_c is not None and a < 0:
            loss = min(-eps_c * a, loss)
        pg[index], clipfrac[index], kl[index] = loss, float(loss2 > loss1), ppo_kl
    return pg, clipfrac, kl


def test_on_policy_ratio_one_gives_minus_advantage():
    out = policy_loss(t([[-1.0, -2.0]]), t([[-1.0, -2.0]]), t([[0.5, -2.0]]), t([[1, 1]]), 0.2, 0.2)
    torch.testing.assert_close(out.pg_loss, t([[-0.5, 2.0]]))
    torch.testing.assert_close(out.clipfrac, t([[0.0, 0.0]]))
    torch.testing.assert_close(out.ppo_kl, t([[0.0, 0.0]]))


def test_positive_advantage_is_clipped_at_one_plus_eps_clip_high():
    # ratio 1.5, A = 2: pg1 = -3, pg2 = -1.28*2 = -2.56 -> max = -2.56, clipped.
    logp, old = logp_pair(1.5)
    out = policy_loss(logp, old, t([[2.0]]), t([[1]]), eps_clip=0.2, eps_clip_high=0.28)
    torch.testing.assert_close(out.pg_loss, t([[-2.56]]))
    torch.testing.assert_close(out.clipfrac, t([[1.0]]))
    torch.testing.assert_close(out.ppo_kl, t([[-math.log(1.5)]]))


def test_negative_advantage_is_clipped_at_one_minus_eps_clip():
    # ratio 0.5, A = -1: pg1 = 0.5, pg2 = 0.8*1 = 0.8 -> 0.8, clipped.
    # ratio 0.5, A = +1: pg1 = -0.5, pg2 = -0.8 -> -0.5, not clipped (pessimistic bound).
    logp, old = logp_pair(0.5)
    neg = policy_loss(logp, old, t([[-1.0]]), t([[1]]), 0.2, 0.28)
    pos = policy_loss(logp, old, t([[1.0]]), t([[1]]), 0.2, 0.28)
    torch.testing.assert_close(neg.pg_loss, t([[0.8]]))
    torch.testing.assert_close(neg.clipfrac, t([[1.0]]))
    torch.testing.assert_close(pos.pg_loss, t([[-0.5]]))
    torch.testing.assert_close(pos.clipfrac, t([[0.0]]))


def test_dual_clip_caps_loss_for_negative_advantages():
    # ratio 5, A = -1, eps 0.2, c = 3: max(pg1 = 5, pg2 = 1.2) = 5 -> min(-c*A = 3, 5) = 3.
    logp, old = logp_pair(5.0)
    capped = policy_loss(logp, old, t([[-1.0]]), t([[1]]), 0.2, 0.2, eps_clip_c=3.0)
    plain = policy_loss(logp, old, t([[-1.0]]), t([[1]]), 0.2, 0.2)
    torch.testing.assert_close(capped.pg_loss, t([[3.0]]))
    torch.testing.assert_close(plain.pg_loss, t([[5.0]]))


def test_dual_clip_leaves_positive_advantages_alone():
    # ratio 5, A = +1: max(-5, -1.2) = -1.2 with or without dual clip.
    logp, old = logp_pair(5.0)
    out = policy_loss(logp, old, t([[1.0]]), t([[1]]), 0.2, 0.2, eps_clip_c=3.0)
    torch.testing.assert_close(out.pg_loss, t([[-1.2]]))


@pytest.mark.parametrize("eps_clip_c", [1.0, 0.5])
def test_dual_clip_rejects_eps_clip_c_of_at_most_one(eps_clip_c):
    with pytest.raises(ValueError, match="should be greater than 1.0, but get the value"):
        policy_loss(t([[0.0]]), t([[0.0]]), t([[1.0]]), t([[1]]), 0.2, 0.2, eps_clip_c)


def test_inactive_tokens_give_zero_loss_clipfrac_and_kl_even_when_not_finite():
    logp = t([[0.0, float("nan"), -1.0]])
    old = t([[0.5, 0.0, float("-inf")]])
    adv = t([[1.0, float("inf"), 3.0]])
    out = policy_loss(logp, old, adv, t([[1, 0, 0]]), 0.2, 0.2)
    assert torch.isfinite(out.pg_loss).all()
    torch.testing.assert_close(out.pg_loss[0, 1:], t([0.0, 0.0]))
    torch.testing.assert_close(out.clipfrac[0, 1:], t([0.0, 0.0]))
    torch.testing.assert_close(out.ppo_kl, t([[0.5, 0.0, 0.0]]))


def test_extreme_log_ratio_is_clamped_to_exp_20():
    # ppo_kl = old - logp = -100 -> ratio exp(clamp(100)) = exp(20); with eps_clip_high huge the
    # unclipped branch wins and shows the clamp.
    out = policy_loss(t([[100.0]]), t([[0.0]]), t([[1.0]]), t([[1]]), 0.2, 1e12)
    torch.testing.assert_close(out.pg_loss, t([[-math.exp(20.0)]]))


def test_gradient_reaches_only_active_tokens():
    logp = torch.zeros(1, 3, requires_grad=True)
    out = policy_loss(logp, torch.zeros(1, 3), t([[1.0, 1.0, 1.0]]), t([[1, 0, 1]]), 0.2, 0.2)
    out.pg_loss.sum().backward()
    # d(-ratio*A)/d logp = -ratio*A = -1 at active tokens (ratio 1 is inside the clip range).
    torch.testing.assert_close(logp.grad, t([[-1.0, 0.0, -1.0]]))


@pytest.mark.parametrize("eps_clip_c", [None, 3.0])
def test_policy_loss_matches_a_naive_per_token_loop(eps_clip_c):
    generator = torch.Generator().manual_seed(11)
    logp, old = randn(generator, 5, 40) * 0.3, randn(generator, 5, 40) * 0.3
    adv, mask = randn(generator, 5, 40), random_mask(generator, 5, 40)
    out = policy_loss(logp, old, adv, mask, 0.2, 0.28, eps_clip_c)
    ref_pg, ref_clip, ref_kl = naive_policy_loss(logp, old, adv, mask, 0.2, 0.28, eps_clip_c)
    torch.testing.assert_close(out.pg_loss.double(), ref_pg)
    torch.testing.assert_close(out.clipfrac.double(), ref_clip)
    torch.testing.assert_close(out.ppo_kl.double(), ref_kl)


# --------------------------------------------------------------------------- value loss


def test_value_loss_takes_the_clipped_error_when_it_is_larger():
    # V = 1.5, V_old = 1, R = 2, clip 0.2: V_clip = 1.2; max((1.2-2)^2 = 0.64, (1.5-2)^2 = 0.25).
    out = value_loss(t([[1.5]]), t([[1.0]]), t([[2.0]]), 0.2)
    torch.testing.assert_close(out.loss, t([[0.64]]))
    torch.testing.assert_close(out.clipfrac, t([[1.0]]))


def test_value_loss_inside_the_clip_range_is_the_plain_squared_error_without_half():
    # V = 1.1, V_old = 1, R = 2: |V - V_old| = 0.1 <= 0.2, so (1.1 - 2)^2 = 0.81 (no 0.5 factor).
    out = value_loss(t([[1.1, 0.0]]), t([[1.0, 0.0]]), t([[2.0, 1.0]]), 0.2)
    torch.testing.assert_close(out.loss, t([[0.81, 1.0]]))
    torch.testing.assert_close(out.clipfrac, t([[0.0, 0.0]]))


def test_value_loss_uses_the_unclipped_error_when_clipping_would_help():
    # V = 1.9 moved towards R = 2 past the clip: V_clip = 1.2; max(0.64, 0.01) = 0.64, so the
    # update is not rewarded beyond the clip range (miles takes the max, i.e. the pessimistic one).
    out = value_loss(t([[1.9]]), t([[1.0]]), t([[2.0]]), 0.2)
    torch.testing.assert_close(out.loss, t([[0.64]]))


def test_value_loss_matches_a_naive_per_token_loop():
    generator = torch.Generator().manual_seed(5)
    values, old, returns = (randn(generator, 4, 30) for _ in range(3))
    out = value_loss(values, old, returns, 0.5)
    for index in positions(values.shape):
        v, v_old, r = values[index].item(), old[index].item(), returns[index].item()
        v_clip = v_old + min(max(v - v_old, -0.5), 0.5)
        assert out.loss[index].item() == pytest.approx(max((v_clip - r) ** 2, (v - r) ** 2))
        assert out.clipfrac[index].item() == float(abs(v - v_old) > 0.5)


# --------------------------------------------------------------------------- entropy


def test_entropy_of_uniform_logits_is_log_vocab():
    entropy = entropy_from_logits(torch.zeros(2, 3, 4))
    torch.testing.assert_close(entropy, torch.full((2, 3), math.log(4)))


def test_entropy_ignores_impossible_tokens_without_nan_in_value_or_gradient():
    # p = [0.5, 0.5, 0] -> H = ln 2.
    logits = torch.tensor([[[0.0, 0.0, float("-inf")]]], requires_grad=True)
    entropy = entropy_from_logits(logits)
    entropy.sum().backward()
    torch.testing.assert_close(entropy, t([[math.log(2)]]))
    assert torch.isfinite(logits.grad).all()


def test_entropy_is_stable_for_huge_logits():
    # Shifting logits by 1e4 changes nothing; a naive softmax would overflow.
    logits = torch.tensor([[[1e4, 1e4 + math.log(3.0)]]])
    # p = [1/4, 3/4] -> H = -(0.25 ln 0.25 + 0.75 ln 0.75)
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy_from_logits(logits), t([[expected]]))


def test_entropy_matches_a_naive_loop():
    generator = torch.Generator().manual_seed(2)
    logits = randn(generator, 2, 3, 7) * 3
    entropy = entropy_from_logits(logits)
    for b, i in positions(entropy.shape):
        row = [math.exp(x) for x in logits[b, i].tolist()]
        probs = [x / sum(row) for x in row]
        expected = -sum(p * math.log(p) for p in probs)
        assert entropy[b, i].item() == pytest.approx(expected, rel=1e-5)
