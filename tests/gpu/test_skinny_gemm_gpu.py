"""skinny-gemm on the GPU (`python -m pytest tests/gpu/test_skinny_gemm_gpu.py -m gpu -q`): the
Triton GEMM at the Qwen3-0.6B decode shapes (64 rows) against fp32 maths, no further from them
than cuBLAS's bf16 GEMM is; the residual and `out` forms; and replayed from a CUDA graph with new
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
    from engine.rollout import skinny_gemm

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
    from engine.rollout import skinny_gemm

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


@pytest.mark.parametrize("tiles", [(32, 256, 4), (64, 64, 16), (16, 128, 8)])
def test_split_k_in_one_kernel_is_deterministic(tiles) -> None:  # noqa: ANN001
    """The down shape split over K, the tile's last split summing the partials: the same bits
    over 50 calls (whichever split arrives last), every counter back at 0, as close to fp32
    maths as cuBLAS."""
    from engine.rollout import skinny_gemm

    n, k = SHAPES[3]
    x, weight = _inputs(n, k)
    residual = torch.randn(ROWS, n, device="cuda").bfloat16()
    first = skinny_gemm.linear(x, weight, residual=residual.clone(), tiles=tiles)
    for _ in range(50):
        assert torch.equal(skinny_gemm.linear(x, weight, residual=residual.clone(), tiles=tiles),
                           first)
    torch.cuda.synchronize()
    assert all(int(counts.abs().sum()) == 0 for _, counts, _ in skinny_gemm._SCRATCH.values())
    want = residual.float() + x.float() @ weight.float().t()
    assert _error(first, want) <= 2 * _error(residual.clone().addmm_(x, weight.t()), want) + 1e-3


def _gated_exact(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """SiLU(gate * r) * (up * r) in fp32 throughout (r: the rows' RMSNorm scale)."""
    both = (x.float() @ weight.float().t()) * torch.rsqrt(
        x.float().pow(2).mean(-1, keepdim=True) + eps)
    ffn = weight.shape[0] // 2
    return torch.nn.functional.silu(both[:, :ffn]) * both[:, ffn:]


@pytest.mark.parametrize("tiles", [None, (16, 128, 1), (32, 128, 2), (64, 64, 4)])
def test_gated_gemm_is_as_close_to_fp32_maths_as_the_two_kernels(tiles) -> None:  # noqa: ANN001
    """gated_linear at the 0.6B gate/up shape against the fp32 maths, no further from them
    than cuBLAS's GEMM then folded_norms.gated (what it replaces) are, and within a bf16
    step of that path; the same bits again from a CUDA graph replay with new inputs."""
    from engine.rollout import folded_norms, skinny_gemm

    n, k = SHAPES[2]
    x, weight = _inputs(n, k)
    x = x * 4  # the residual stream's scale: r well away from 1
    eps = 1e-6
    two_kernels = folded_norms.gated(x @ weight.t(), x, eps)
    got = skinny_gemm.gated_linear(x, weight, eps, tiles=tiles)
    exact = _gated_exact(x, weight, eps)
    assert _error(got, exact) <= 2 * _error(two_kernels, exact) + 1e-3
    torch.testing.assert_close(got.float(), two_kernels.float(), rtol=1.6e-2, atol=1.6e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = skinny_gemm.gated_linear(x, weight, eps, tiles=tiles)
    fresh, _ = _inputs(n, k, seed=3)
    x.copy_(fresh * 4)
    graph.replay()
    assert torch.equal(replayed, skinny_gemm.gated_linear(x, weight, eps, tiles=tiles))
