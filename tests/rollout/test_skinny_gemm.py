"""skinny_gemm (the decoder's `skinny-down` GEMM): `plan`'s tiles on the Qwen3-0.6B shapes, the
torch contract, no kernel without Triton; the Triton kernels themselves run under Triton's CPU
interpreter in a fresh process (interpreted_skinny_gemm.py; skipped where Triton is not
installed) and through Triton's compiler for sm_90."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ppodeck.engine.rollout.decoder.kernels import skinny_gemm as sg
from tests.rollout.interpreter import assert_interpreted_file_passes

SMS = 132  # the H200
# Qwen3-0.6B at decode batch 64: (N, K) of each projection x [64, K] @ W[N, K]^T
SHAPES_0_6B = {"qkv": ((16 + 2 * 8) * 128, 1024), "o": (1024, 2048), "gate_up": (6144, 1024),
               "down": (1024, 3072), "lm_head": (151936, 1024)}


def programs(n: int, tiles: tuple[int, int, int]) -> int:
    block_n, _, split = tiles
    return -(-n // block_n) * split


@pytest.mark.parametrize("name", sorted(name for name, (n, k) in SHAPES_0_6B.items()
                                         if (64, n, k, SMS) not in sg.TUNED))
def test_plan_keeps_every_sm_busy_on_the_0_6b_shapes(name) -> None:  # noqa: ANN001
    """About 2-4 programs per SM (cuBLAS' 128-wide tiles give o_proj 8); each split a whole
    number of K steps and no split past K; the lm head's 1187 column tiles need no split.
    (A TUNED shape has its measured tiling instead: test_a_tuned_shape_gets_its_measured_tiling.)"""
    n, k = SHAPES_0_6B[name]
    block_n, block_k, split = tiles = sg.plan(64, n, k, SMS)
    assert block_n in sg.BLOCK_NS and sg.MIN_DOT <= block_k <= sg.MAX_BLOCK_K
    assert k % split == 0 and (k // split) % block_k == 0
    if name == "lm_head":
        assert tiles == (128, 64, 1) and programs(n, tiles) > 4 * SMS
    else:
        assert 1.8 * SMS <= programs(n, tiles) <= 4 * SMS, tiles


def test_plan_choices_on_the_0_6b_shapes() -> None:
    """The tiles chosen today (`_extra_reads`: x re-read per column tile vs fp32 partials per
    split): a change here is a change to measure on the GPU."""
    chosen = {name: sg.plan(64, n, k) for name, (n, k) in SHAPES_0_6B.items()}
    assert chosen == {"qkv": (64, 128, 4), "o": (32, 256, 8), "gate_up": (64, 128, 4),
                      "down": (32, 256, 4), "lm_head": (128, 64, 1)}  # down: TUNED


def test_a_tuned_shape_gets_its_measured_tiling() -> None:
    """TUNED (the down projection on 132 SMs) overrides the heuristic for that shape only."""
    for (m, n, k, sms), tiles in sg.TUNED.items():
        assert sg.plan(m, n, k, sms) == tiles
        block_n, block_k, split = tiles
        assert k % split == 0 and (k // split) % block_k == 0
        assert sg.plan(m, n, k, sms + 1) != tiles or tiles == sg.plan(m, n, k + 1, sms)


def test_plan_on_small_shapes() -> None:
    """Tiles no wider than the weight (but tl.dot's 16), no split below MIN_K_CHUNK of K,
    and too many rows refused."""
    for m, n, k in ((1, 16, 32), (5, 40, 80), (64, 96, 80), (128, 1000, 64)):
        block_n, block_k, split = sg.plan(m, n, k)
        assert block_n <= max(sg.MIN_DOT, 1 << (n - 1).bit_length())
        assert block_k >= sg.MIN_DOT and split == 1
    assert sg.plan(64, 1024, 256)[2] <= 2
    with pytest.raises(ValueError, match="rows"):
        sg.plan(sg.MAX_M + 1, 1024, 1024)


def case(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """x [m, k], W [n, k], a residual [m, n]."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=gen).to(dtype)
                 for shape in ((m, k), (n, k), (m, n)))


def test_torch_contract() -> None:
    x, w, r = case(5, 40, 80, torch.float64)
    expected = x @ w.T
    torch.testing.assert_close(sg.linear_by_torch(x, w), expected)
    out = torch.empty(5, 40, dtype=torch.float64)
    assert sg.linear_by_torch(x, w, out=out) is out
    torch.testing.assert_close(out, expected)
    residual = r.clone()
    assert sg.linear_by_torch(x, w, residual=residual) is residual
    torch.testing.assert_close(residual, r + expected)
    with pytest.raises(ValueError, match="not both"):
        sg.linear_by_torch(x, w, out=out, residual=residual)


def test_past_max_m_rows_linear_is_the_torch_path() -> None:
    """More rows than one tile: cuBLAS (no Triton needed, so this runs anywhere)."""
    x, w, r = case(sg.MAX_M + 1, 24, 32, torch.float32)
    residual = r.clone()
    assert sg.linear(x, w, residual=residual) is residual
    torch.testing.assert_close(residual, r + x @ w.T)


def test_without_cuda_or_the_interpreter_the_kernels_are_unusable(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    ok, why = sg.kernel_status(torch.device("cpu"))
    assert not ok and "CUDA" in why


def test_the_kernels_under_the_triton_interpreter() -> None:
    """interpreted_skinny_gemm.py in a fresh process with TRITON_INTERPRET=1: the kernels
    against torch matmul (fp32, bf16; M 1/5/64, N 16/40/96, K 32/80; split-K 1 and 3; new
    tensor, out=, residual=) and the decoder's skinny-down variants against today's path."""
    pytest.importorskip("triton")
    assert_interpreted_file_passes(Path(__file__).with_name("interpreted_skinny_gemm.py"))


def test_the_kernels_compile_for_hopper() -> None:
    """Both kernels through Triton's whole compiler (to a cubin for sm_90, no GPU needed) with
    `plan`'s tiles for the 0.6B shapes: what the interpreter cannot check (tile shapes, dot
    operand types, shared memory at NUM_STAGES)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    gemm, reduce = sg._kernels(False)
    types = ["*bf16", "*bf16", "*fp32", "*bf16"] + ["i32"] * 8
    signature = dict(zip(gemm.arg_names, types + ["constexpr"] * 7, strict=True))
    for n, k in SHAPES_0_6B.values():
        block_n, block_k, split = sg.plan(64, n, k)
        constants = dict(BLOCK_M=64, BLOCK_N=block_n, BLOCK_K=block_k, PARTIAL=split > 1,
                         HAS_RES=True, PRECISION="tf32", UPCAST=False)
        sig = signature | {"out_ptr": "*fp32" if split > 1 else "*bf16"}
        built = triton.compile(ASTSource(gemm, sig, constants), target=target,
                               options=dict(num_warps=sg.NUM_WARPS, num_stages=sg.NUM_STAGES))
        assert built.metadata.shared <= 227 * 1024, (n, k)  # Hopper's limit per block
    types = ["*fp32", "*bf16", "*bf16"] + ["i32"] * 4
    signature = dict(zip(reduce.arg_names, types + ["constexpr"] * 3, strict=True))
    triton.compile(ASTSource(reduce, signature,
                             dict(SPLIT_K=8, BLOCK=sg.REDUCE_BLOCK, HAS_RES=True)),
                   target=target, options=dict(num_warps=sg.NUM_WARPS))
