"""skinny_gemm (skinny-down's GEMM) on the GPU
(`python -m pytest tests/gpu/test_skinny_gemm_gpu.py -m gpu -q`): the Triton GEMM at the
Qwen3-0.6B decode shapes (64 rows) against fp32 maths, no further from them than cuBLAS's bf16
GEMM is; the residual and `out` forms; and replayed from a CUDA graph with new
inputs, as the decode step replays it."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

# (N, K) of the 0.6B decode step: packed qkv, o, packed gate/up, down, lm head
SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (151936, 1024)]
ROWS = 64


def _inputs(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(ROWS, k, generator=gen, device="cuda").bfloat16()
    weight = (torch.randn(n, k, generator=gen, device="cuda") * k ** -0.5).bfloat16()
    return x, weight


def _error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return (got.float() - exact).abs().max().item()


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_as_close_to_fp32_maths_as_cublas(n: int, k: int) -> None:
    from ppodeck.engine.rollout.decoder.kernels import skinny_gemm

    assert skinny_gemm.kernel_status(torch.device("cuda")) == (True, "ok")
    x, weight = _inputs(n, k)
    exact = x.float() @ weight.float().t()
    cublas = _error(x @ weight.t(), exact)
    assert _error(skinny_gemm.linear(x, weight), exact) <= 2 * cublas + 1e-3
    residual = torch.randn(ROWS, n, device="cuda").bfloat16()
    want = residual.float() + exact
    got = skinny_gemm.linear(x, weight, residual=residual.clone())
    assert _error(got, want) <= 2 * _error(residual.clone().addmm_(x, weight.t()), want) + 1e-3
    out = torch.empty(ROWS, n, device="cuda", dtype=torch.bfloat16)
    assert skinny_gemm.linear(x, weight, out=out) is out
    assert _error(out, exact) <= 2 * cublas + 1e-3


def test_replays_from_a_cuda_graph_with_new_inputs() -> None:
    from ppodeck.engine.rollout.decoder.kernels import skinny_gemm

    n, k = SHAPES[3]  # down: the deepest split-K
    x, weight = _inputs(n, k)
    residual = torch.zeros(ROWS, n, device="cuda", dtype=torch.bfloat16)
    skinny_gemm.linear(x, weight, residual=residual)  # compile and allocate outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        skinny_gemm.linear(x, weight, residual=residual)
    for seed in (1, 2):
        fresh, _ = _inputs(n, k, seed)
        x.copy_(fresh)
        residual.zero_()
        graph.replay()
        exact = x.float() @ weight.float().t()
        assert _error(residual, exact) <= 2 * _error(x @ weight.t(), exact) + 1e-3
