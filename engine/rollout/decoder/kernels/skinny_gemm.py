"""GEMM for few rows against a big weight (the decoder's `skinny-down`): x [M, K] @ W[N, K]^T.

The decoder runs it for the down projection only, at its measured tiling (TUNED): run for every
projection of the decode step (the removed `skinny-gemm` variant) it was slower than cuBLAS
(docs/performance.md); bench/gpu_gemm_probe.py times it against cuBLAS per shape.

At batch 64 the decode step's projections are [64, K] x [K, N]: cuBLAS tiles of 128 columns
give o_proj ([64, 2048] x [2048, 1024]) 8 programs for a GPU's ~132 SMs, so the weights (the
whole cost: the activations are tiny) stream at a fraction of the memory bandwidth. Here:
  - one tile of rows covers all of M (M <= 128, padded up to tl.dot's 16);
  - N is cut into narrow tiles and K into SPLIT_K chunks, chosen by `plan` so that about 2-4
    programs per SM each stream their slice of the weight once;
  - split-K without atomics (deterministic): kernel 1 writes fp32 partials [SPLIT_K, M, N],
    kernel 2 sums them in a fixed order, adds the residual and casts; SPLIT_K = 1 is one kernel
    with that epilogue. The partial buffer is allocated once per shape and kept (the decode
    step is a CUDA graph: its buffers must not move between replays);
  - fp32 accumulation, the residual added in fp32 and rounded once (as addmm_ does).
Launches are plain Triton launches: capturable by a CUDA graph, with no host sync.

`linear` runs the kernels; `linear_by_torch` is the same contract in torch ops (the fallback and
the tests' reference). `kernel_status(device)` says whether the kernels can run there: on CUDA
with Triton importable, or anywhere under TRITON_INTERPRET=1 (the CPU tests).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from .availability import triton_status
from .decode_attention import multiprocessors

MAX_M = 128  # one row tile covers all of M: the decode batch
MIN_DOT = 16  # tl.dot's smallest tile side
BLOCK_NS = (128, 64, 32, 16)  # column tiles `plan` tries, widest first
SPLITS = (1, 2, 4, 8, 16)
MIN_K_CHUNK = 128  # a split's K range below this streams too little to pay for its partials
TILE_ELEMENTS = 8192  # weight elements per loop step (16 KB bf16): BLOCK_K = this / BLOCK_N
MAX_BLOCK_K = 256  # with M = 64 the x tile is then 32 KB bf16 per pipeline stage
REDUCE_BLOCK = 1024  # columns per program of the split-K sum
NUM_WARPS = 4
NUM_STAGES = 3

# (M, N, K, SMs) -> (BLOCK_N, BLOCK_K, SPLIT_K) measured best, which `plan` returns for that
# shape: the Qwen3-0.6B decode step's down projection, where skinny-down runs it (its times
# against cuBLAS and against `plan`'s own choice: docs/performance.md, bench/gpu_gemm_probe.py)
TUNED = {(64, 1024, 3072, 132): (32, 256, 4)}

# fp32 partials [SPLIT_K, M, N] by (M, N, SPLIT_K, device): allocated at first use, then reused
_PARTIALS: dict[tuple[int, int, int, torch.device], torch.Tensor] = {}


def kernel_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for the Triton kernels on `device`."""
    return triton_status(device, _kernels)


def plan(m: int, n: int, k: int, sms: int = 132) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, SPLIT_K) for x [m, k] @ W[n, k]^T with about 2-4 programs per SM
    (more only unsplit: a big weight's column tiles alone), the cheapest by `_extra_reads`;
    a weight too small for that gets the most programs allowed. A shape in TUNED gets its
    measured tiling."""
    if m > MAX_M:
        raise ValueError(f"skinny GEMM rows {m} > {MAX_M}")
    if (m, n, k, sms) in TUNED:
        return TUNED[(m, n, k, sms)]
    want = int(1.8 * sms)  # "about 2 x": 256 programs on 132 SMs still count
    fits, others = [], []
    for split in SPLITS:
        if split > 1 and k // split < MIN_K_CHUNK:
            break
        for block_n in BLOCK_NS:
            if block_n > max(MIN_DOT, _pow2(n)):
                continue  # wider than the weight: the same programs, wasted lanes
            programs = _cdiv(n, block_n) * split
            cost = (_extra_reads(m, k, block_n, split), split)
            if programs >= want and (split == 1 or programs <= 4 * sms):
                fits.append((cost, (block_n, split)))
            else:
                others.append(((-programs, *cost), (block_n, split)))
    block_n, split = min(fits)[1] if fits else min(others)[1]
    return block_n, _block_k(block_n, k, split), split


def _extra_reads(m: int, k: int, block_n: int, split: int) -> float:
    """L2 traffic besides the weight, in weight bytes: each column tile reads all of x
    (m / block_n), each split writes and reads an fp32 [m, n] partial (4 split m / k)."""
    return m / block_n + (4 * split * m / k if split > 1 else 0.0)


def _block_k(block_n: int, k: int, split: int) -> int:
    """K per loop step: about a fixed weight tile, a power of two dividing the split's K range
    where one does (so no split runs past K), at least tl.dot's 16."""
    chunk = _cdiv(k, split)
    block_k = min(MAX_BLOCK_K, TILE_ELEMENTS // block_n, _pow2(chunk))
    while block_k > MIN_DOT and chunk % block_k:
        block_k //= 2
    return max(MIN_DOT, block_k)


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
           residual: torch.Tensor | None = None,
           tiles: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x [M, K] @ weight[N, K]^T in x's dtype (fp32 accumulation), rows contiguous: into a new
    tensor, into `out` [M, N], or added in place to `residual` [M, N] (what the decoder's
    x.addmm_(h, W.t()) does) and returned. Past MAX_M rows (not skinny: cuBLAS tiles fill the
    GPU) by linear_by_torch. `tiles`: (BLOCK_N, BLOCK_K, SPLIT_K) instead of `plan`'s."""
    if x.shape[0] > MAX_M:
        return linear_by_torch(x, weight, out, residual)
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        raise ValueError("skinny GEMM: the weight's rows must be contiguous")
    m, k = x.shape
    n = weight.shape[0]
    target = _target(x, n, out, residual)
    block_n, block_k, split = tiles or plan(m, n, k, multiprocessors(x.device))
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    gemm, reduce = _kernels(interpret)
    partial = _partials(m, n, split, x.device) if split > 1 else target
    res = residual if residual is not None else target  # unread without HAS_RES
    k_chunk = _cdiv(_cdiv(k, split), block_k) * block_k
    gemm[(_cdiv(n, block_n), split)](
        x, weight, partial, res, m, n, k, k_chunk, x.stride(0), weight.stride(0),
        target.stride(0), res.stride(0),
        BLOCK_M=max(MIN_DOT, _pow2(m)), BLOCK_N=block_n, BLOCK_K=block_k, PARTIAL=split > 1,
        HAS_RES=residual is not None,
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        # the interpreter's tl.dot reads bf16/fp16 bits as integers: fp32 operands there
        UPCAST=interpret and x.dtype != torch.float32,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if split > 1:
        reduce[(m, _cdiv(n, REDUCE_BLOCK))](
            partial, res, target, m, n, target.stride(0), res.stride(0), SPLIT_K=split,
            BLOCK=REDUCE_BLOCK, HAS_RES=residual is not None, num_warps=NUM_WARPS)
    return target


def linear_by_torch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                    residual: torch.Tensor | None = None) -> torch.Tensor:
    """`linear`'s contract in torch ops (the fallback where the kernels cannot run)."""
    if out is not None and residual is not None:
        raise ValueError("skinny GEMM: pass `out` or `residual`, not both")
    if residual is not None:
        return residual.addmm_(x, weight.t())
    if out is not None:
        return torch.mm(x, weight.t(), out=out)
    return torch.mm(x, weight.t())


def _target(x: torch.Tensor, n: int, out: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
    """Where the result goes (shapes checked on the host: no sync, no data read)."""
    if out is not None and residual is not None:
        raise ValueError("skinny GEMM: pass `out` or `residual`, not both")
    m = x.shape[0]
    target = residual if residual is not None else out
    if target is None:
        return torch.empty((m, n), dtype=x.dtype, device=x.device)
    if target.shape != (m, n) or target.stride(1) != 1 or target.dtype != x.dtype:
        raise ValueError(f"skinny GEMM output {tuple(target.shape)} {target.dtype}: want "
                         f"({m}, {n}) {x.dtype} with unit column stride")
    return target


def _partials(m: int, n: int, split: int, device: torch.device) -> torch.Tensor:
    key = (m, n, split, device)
    if key not in _PARTIALS:
        _PARTIALS[key] = torch.empty((split, m, n), dtype=torch.float32, device=device)
    return _PARTIALS[key]


@functools.cache
def _kernels(interpret: bool) -> tuple[Any, Any]:
    """The jitted (GEMM, split-K sum) kernels, built at first use (Triton imported lazily;
    `interpret` keys the cache: triton.jit reads TRITON_INTERPRET when it decorates)."""
    del interpret
    import triton
    import triton.language as tl

    @triton.jit
    def skinny_gemm_kernel(
            x_ptr, w_ptr, out_ptr, res_ptr, m, n, k, k_chunk, x_stride, w_stride, out_stride,
            res_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            PARTIAL: tl.constexpr, HAS_RES: tl.constexpr, PRECISION: tl.constexpr,
            UPCAST: tl.constexpr):
        split = tl.program_id(1)
        rows = tl.arange(0, BLOCK_M)
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok, col_ok = rows < m, cols < n
        x_rows = x_ptr + rows[:, None] * x_stride
        w_rows = w_ptr + cols[:, None].to(tl.int64) * w_stride
        first = split * k_chunk
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for start in range(0, k_chunk, BLOCK_K):  # k_chunk is a multiple of BLOCK_K
            ks = first + start + tl.arange(0, BLOCK_K)
            k_ok = ks < k
            a = tl.load(x_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(w_rows + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            if UPCAST:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc += tl.dot(a, tl.trans(b), input_precision=PRECISION)
        ok = row_ok[:, None] & col_ok[None, :]
        if PARTIAL:  # [SPLIT_K, m, n] fp32, summed by the second kernel
            at = split.to(tl.int64) * m * n + rows[:, None] * n + cols[None, :]
            tl.store(out_ptr + at, acc, mask=ok)
        else:
            if HAS_RES:
                acc += tl.load(res_ptr + rows[:, None] * res_stride + cols[None, :], mask=ok,
                               other=0.0).to(tl.float32)
            tl.store(out_ptr + rows[:, None] * out_stride + cols[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def split_k_sum_kernel(
            part_ptr, res_ptr, out_ptr, m, n, out_stride, res_stride, SPLIT_K: tl.constexpr,
            BLOCK: tl.constexpr, HAS_RES: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < n
        acc = tl.zeros([BLOCK], tl.float32)
        for s in tl.static_range(SPLIT_K):  # a fixed order: the same sum every run
            acc += tl.load(part_ptr + (s * m + row).to(tl.int64) * n + cols, mask=ok, other=0.0)
        if HAS_RES:
            acc += tl.load(res_ptr + row * res_stride + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * out_stride + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)

    return skinny_gemm_kernel, split_k_sum_kernel


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()

