"""CPU tests for the k1/k2/k3/low_var_kl estimators (miles' loss_hub/losses.py)."""

from __future__ import annotations

import math

import pytest
import torch

from ppodeck.engine.algo import KL_KINDS, approx_kl
from tests.algo.helpers import positions, randn, random_mask

LN2 = math.log(2.0)


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def naive_kl(d: float, kind: str) -> float:
    if kind == "k1":
        return d
    if kind == "k2":
        return d * d / 2
    neg_d = min(max(-d, -20.0), 20.0) if kind == "low_var_kl" else -d
    kl = math.exp(neg_d) - 1 - neg_d
    return min(max(kl, -10.0), 10.0) if kind == "low_var_kl" else kl


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("k1", LN2),  # d = ln 2
        ("k2", LN2**2 / 2),  # 0.2402
        ("k3", 0.5 - 1 + LN2),  # exp(-ln 2) - 1 + ln 2 = 0.1931
        ("low_var_kl", 0.5 - 1 + LN2),  # inside both clamps: same as k3
    ],
)
def test_estimators_match_hand_values_for_log_ratio_ln2(kind, expected):
    kl = approx_kl(t([[LN2]]), t([[0.0]]), kind)
    torch.testing.assert_close(kl, t([[expected]]))


def test_low_var_kl_clamps_log_ratio_and_result():
    # d = -30: k3 = exp(30) - 1 - 30 (huge); low_var_kl clamps -d to 20, then the result to 10.
    logp, ref = t([[-30.0]]), t([[0.0]])
    assert approx_kl(logp, ref, "k3").item() == pytest.approx(math.exp(30) - 31, rel=1e-5)
    torch.testing.assert_close(approx_kl(logp, ref, "low_var_kl"), t([[10.0]]))


def test_importance_ratio_multiplies_the_estimate():
    # k1 = ln 2, IS ratio 3 -> 3 ln 2.
    kl = approx_kl(t([[LN2]]), t([[0.0]]), "k1", importance_ratio=t([[3.0]]))
    torch.testing.assert_close(kl, t([[3 * LN2]]))


def test_mask_zeroes_inactive_and_non_finite_values():
    kl = approx_kl(t([[LN2, 1.0, float("nan")]]), t([[0.0, 0.0, 0.0]]), "k1", mask=t([[1, 0, 1]]))
    torch.testing.assert_close(kl, t([[LN2, 0.0, 0.0]]))


def test_unknown_estimator_is_rejected():
    with pytest.raises(ValueError, match="Unknown kl_loss_type: k4"):
        approx_kl(t([[0.0]]), t([[0.0]]), "k4")  # type: ignore[arg-type]


def test_bf16_inputs_are_computed_in_fp32():
    kl = approx_kl(t([[LN2]]).bfloat16(), t([[0.0]]).bfloat16(), "k3")
    assert kl.dtype == torch.float32


@pytest.mark.parametrize("kind", KL_KINDS)
def test_estimators_match_a_naive_per_token_loop(kind):
    generator = torch.Generator().manual_seed(13)
    logp, ref = randn(generator, 4, 25) * 3, randn(generator, 4, 25) * 3
    mask = random_mask(generator, 4, 25)
    kl = approx_kl(logp, ref, kind, mask=mask)
    for index in positions(logp.shape):
        expected = naive_kl(logp[index].item() - ref[index].item(), kind) if mask[index] else 0.0
        assert kl[index].item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
