"""The skinny-GEMM kernels run by Triton's CPU interpreter (CPU tensors): collected only when
named, by test_skinny_gemm.py::test_the_kernels_under_the_triton_interpreter, which runs this
file in a fresh process with TRITON_INTERPRET=1 (triton.jit reads it when Triton's own library
is decorated, at its import)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from ppodeck.engine.rollout.decoder.features import parse_variant
from ppodeck.engine.rollout.decoder.kernels import skinny_gemm as sg
from ppodeck.engine.rollout.decoder.static_decoder import StaticDecoder
from tests.rollout.test_fast_generate import (
    ROWS,
    SAMPLINGS,
    assert_follows_reference,
    settings,
    tiny_model,
)
from tests.rollout.test_skinny_gemm import case

# every (M, N, K): rows of 1 and 5 (padded to 16) and 64, columns not a multiple of the tile,
# K not a multiple of BLOCK_K; split-K, column tile and output mode cycle over them
SHAPES = list(itertools.product((1, 5, 64), (16, 40, 96), (32, 80)))
MODES = ("new", "out", "residual")


@pytest.fixture
def interpreted() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_skinny_gemm.py"
    assert sg.kernel_status(torch.device("cpu")) == (True, "ok")


def run(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, mode: str,
        tiles: tuple[int, int, int] | None) -> torch.Tensor:
    """sg.linear in `mode`, checked to write where that mode says."""
    if mode == "new":
        return sg.linear(x, w, tiles=tiles)
    target = r.clone() if mode == "residual" else torch.full_like(r, float("nan"))
    kwargs = {"residual" if mode == "residual" else "out": target}
    assert sg.linear(x, w, tiles=tiles, **kwargs) is target
    return target


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_are_torch_matmul(interpreted, dtype) -> None:  # noqa: ANN001
    """Against x @ W^T (+ r) in fp64 from the same inputs: fp32 to summation order, bf16 to
    its rounding of |out| <= ~40 (one rounding: fp32 accumulation and residual add)."""
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=8e-3, atol=2e-2)
    for i, (m, n, k) in enumerate(SHAPES):
        x, w, r = case(m, n, k, dtype, seed=i)
        mode = MODES[i % 3]
        tiles = ((16, 32)[i % 2 if n > 16 else 0], 16, (1, 3)[(i // 2) % 2])
        out = run(x, w, r, mode, tiles)
        expected = x.double() @ w.double().T + (r.double() if mode == "residual" else 0)
        assert out.dtype == dtype and out.shape == (m, n)
        torch.testing.assert_close(out.double(), expected, **tol, msg=f"{m, n, k, mode, tiles}")


def test_plans_tiles_and_a_deterministic_split(interpreted) -> None:  # noqa: ANN001
    """`plan`'s own tiles (a split of 2 over K = 256), and split-K's fixed-order sum: the same
    bits on a second run."""
    x, w, r = case(64, 96, 256, torch.float32)
    assert sg.plan(64, 96, 256)[2] == 2
    first = run(x, w, r, "residual", None)
    torch.testing.assert_close(first, r + x @ w.T, rtol=1e-5, atol=1e-4)
    assert torch.equal(run(x, w, r, "residual", None), first)


@pytest.mark.parametrize("variant", [
    "packed+decode-attn+graph-sampling+fused-prefill+folded-norms+skinny-down",
    "packed+graph-sampling+skinny-down"])
def test_skinny_down_variant_is_the_reference_path(interpreted, variant) -> None:  # noqa: ANN001
    """skinny-down: only the down projection by the kernel (with folded-norms' kernels, or on
    the plain fused path), fp32: tokens equal today's path, log-probs within 1e-5."""
    model = tiny_model("qwen3")
    decoder = StaticDecoder(model, parse_variant(variant))
    assert decoder.down_kernel
    for sampling in SAMPLINGS:
        assert_follows_reference(model, parse_variant(variant), 1e-5, ROWS,
                                 **settings(6, **sampling))
