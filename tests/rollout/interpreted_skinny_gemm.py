"""The skinny-GEMM kernels run by Triton's CPU interpreter (CPU tensors): collected only when
named, by test_skinny_gemm.py::test_the_kernels_under_the_triton_interpreter, which runs this
file in a fresh process with TRITON_INTERPRET=1 (triton.jit reads it when Triton's own library
is decorated, at its import)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from ppodeck.engine.rollout import fast_generate as fg
from ppodeck.engine.rollout import skinny_gemm as sg
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


@pytest.mark.parametrize(("arch", "variant"), [("qwen3", "packed+graph-sampling+skinny-gemm"),
                                               ("llama", "compiled+skinny-gemm")])
def test_skinny_gemm_variant_is_the_reference_path(interpreted, arch, variant) -> None:  # noqa: ANN001
    """fast_generate with the kernels for every decode-step GEMM (fp32; packed qkv/gate_up,
    in-place o/down residuals, the logits buffer; `compiled`'s functions eagerly, through the
    custom op): greedy (and on qwen3 sampled) tokens equal today's path, log-probs within
    1e-5."""
    model = tiny_model(arch)
    options = fg.parse_variant(variant)
    assert fg.StaticDecoder(model, options).gemm_kernel
    samplings = SAMPLINGS if arch == "qwen3" else SAMPLINGS[:1]
    with torch.compiler.set_stance("force_eager"):
        for sampling in samplings:
            assert_follows_reference(model, options, 1e-5, ROWS, **settings(6, **sampling))


@pytest.mark.parametrize("variant", [
    "packed+decode-attn+graph-sampling+fused-prefill+folded-norms+skinny-down",
    "packed+graph-sampling+skinny-down"])
def test_skinny_down_variant_is_the_reference_path(interpreted, variant) -> None:  # noqa: ANN001
    """skinny-down: only the down projection by the kernel (with folded-norms' kernels, or on
    the plain fused path), fp32: tokens equal today's path, log-probs within 1e-5."""
    model = tiny_model("qwen3")
    decoder = fg.StaticDecoder(model, fg.parse_variant(variant))
    assert decoder.down_kernel and not decoder.gemm_kernel
    for sampling in SAMPLINGS:
        assert_follows_reference(model, fg.parse_variant(variant), 1e-5, ROWS,
                                 **settings(6, **sampling))


def test_compiled_layer_mlp_traces_in_one_graph(interpreted) -> None:  # noqa: ANN001
    """dynamo takes the custom op whole (fullgraph: no break at the Triton launches); the
    result is the cuBLAS layer_mlp's."""
    x, gate_up, norm = torch.randn(5, 64), torch.randn(192, 64) / 8, torch.ones(64)
    args = (x, norm, (gate_up,), 1e-6)
    mlp = torch.compile(fg.layer_mlp, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(mlp(*args, True), fg.layer_mlp(*args, False), rtol=1e-5,
                               atol=1e-4)
