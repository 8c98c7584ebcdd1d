"""skinny_gemm's Triton kernel (imported at first use: Triton is optional; it is imported here
at module level, so the kernel is decorated once, as TRITON_INTERPRET says at this import).
skinny_gemm.py says what it does; the rounding helper is decode_attention's."""

from __future__ import annotations

import triton
import triton.language as tl

from engine.rollout.decode_attention_triton import rounded


@triton.jit
def finish(acc, acc_up, sumsq, rows, cols, ok, k, eps, out_ptr, res_ptr, out_stride,
           res_stride, HAS_RES: tl.constexpr, GATED: tl.constexpr):
    # the epilogue: + the residual in fp32, rounded once; or GATED, as the GEMM into the
    # dtype then folded_norms.gated: the row scale rsqrt(mean(x^2) + eps), SiLU * up
    dtype: tl.constexpr = out_ptr.dtype.element_ty
    if GATED:
        scale = tl.rsqrt(sumsq / k + eps)[:, None]
        gate = rounded(rounded(acc, dtype) * scale, dtype)
        up = rounded(rounded(acc_up, dtype) * scale, dtype)
        acc = rounded(gate / (1.0 + tl.exp(-gate)), dtype) * up
    if HAS_RES:
        acc += tl.load(res_ptr + rows[:, None] * res_stride + cols[None, :], mask=ok,
                       other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * out_stride + cols[None, :], acc.to(dtype), mask=ok)

@triton.jit
def skinny_gemm_kernel(
        x_ptr, w_ptr, out_ptr, res_ptr, part_ptr, count_ptr, sumsq_ptr, m, n, k, k_chunk,
        eps, x_stride, w_stride, out_stride, res_stride, BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
        HAS_RES: tl.constexpr, GATED: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < m, cols < n
    ok = row_ok[:, None] & col_ok[None, :]
    x_rows = x_ptr + rows[:, None] * x_stride
    w_rows = w_ptr + cols[:, None].to(tl.int64) * w_stride
    up_rows = w_rows + n.to(tl.int64) * w_stride  # GATED: the up half's rows follow
    first = split * k_chunk
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)
    for start in range(0, k_chunk, BLOCK_K):  # k_chunk is a multiple of BLOCK_K
        ks = first + start + tl.arange(0, BLOCK_K)
        k_ok = ks < k
        a = tl.load(x_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_ok = col_ok[:, None] & k_ok[None, :]
        b = tl.load(w_rows + ks[None, :], mask=w_ok, other=0.0)
        if UPCAST:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc += tl.dot(a, tl.trans(b), input_precision=PRECISION)
        if GATED:
            b_up = tl.load(up_rows + ks[None, :], mask=w_ok, other=0.0)
            if UPCAST:
                b_up = b_up.to(tl.float32)
            acc_up += tl.dot(a, tl.trans(b_up), input_precision=PRECISION)
            a32 = a.to(tl.float32)
            sumsq += tl.sum(a32 * a32, 1)
    if SPLIT_K == 1:
        finish(acc, acc_up, sumsq, rows, cols, ok, k, eps, out_ptr, res_ptr, out_stride,
               res_stride, HAS_RES, GATED)
    else:
        # split-K in one kernel: each split stores its fp32 partial; the tile's last split
        # to arrive (a counter per column tile) sums all of them in split order (the same
        # sum every run, whoever arrives last), finishes, and resets the counter
        width = 2 * n if GATED else n
        at = part_ptr + (split * m + rows[:, None]).to(tl.int64) * width + cols[None, :]
        tl.store(at, acc, mask=ok)
        if GATED:
            tl.store(at + n, acc_up, mask=ok)
            tl.store(sumsq_ptr + split * m + rows, sumsq, mask=row_ok)  # same in all tiles
        tl.debug_barrier()  # every thread's partial stored before the count goes up
        if tl.atomic_add(count_ptr + tile, 1, sem="acq_rel") == SPLIT_K - 1:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            sumsq = tl.zeros([BLOCK_M], tl.float32)
            for s in tl.static_range(SPLIT_K):
                at = part_ptr + (s * m + rows[:, None]).to(tl.int64) * width + cols[None, :]
                acc += tl.load(at, mask=ok, other=0.0, cache_modifier=".cg")
                if GATED:
                    acc_up += tl.load(at + n, mask=ok, other=0.0, cache_modifier=".cg")
                    sumsq += tl.load(sumsq_ptr + s * m + rows, mask=row_ok, other=0.0,
                                     cache_modifier=".cg")
            finish(acc, acc_up, sumsq, rows, cols, ok, k, eps, out_ptr, res_ptr,
                   out_stride, res_stride, HAS_RES, GATED)
            tl.atomic_xchg(count_ptr + tile, 0)  # ready for the next call (graph replay)
