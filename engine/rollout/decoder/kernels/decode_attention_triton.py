"""decode_attention's Triton kernels, and folded_norms' SiLU kernel, which shares their helpers
(imported at first use: Triton is optional; it is imported here at module level, so the
kernels are decorated once, as TRITON_INTERPRET says at this import). Helpers are
@triton.jit functions that Triton inlines into the kernels; decode_attention.py says what each
kernel does."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def group_query(q_ptr, row, heads, q_stride_b, q_stride_h, GROUP: tl.constexpr,
                HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                UPCAST: tl.constexpr):
    # the tile of one row's KV head: its group's query heads [BLOCK_G, BLOCK_D], zeros past
    # the group and the head dim (fp32 under UPCAST: the interpreter's tl.dot)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    head_ok = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + row * q_stride_b + heads[:, None] * q_stride_h + d[None, :],
                mask=head_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    return q


@triton.jit
def online_softmax(q, k_row, v_row, lo, hi, scale, k_stride_s, v_stride_s,
                   HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    # q over the slots [lo, hi) of one row's KV head -> (running max, sum of exp(score - max),
    # unnormalized output), fp32; nothing read outside [lo, hi); (-inf, 0, 0) when it is empty
    d = tl.arange(0, BLOCK_D)
    best = tl.full([BLOCK_G], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK):
        slots = start + tl.arange(0, BLOCK)
        slot_ok = slots < hi
        tile_ok = slot_ok[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(k_row + slots[:, None] * k_stride_s + d[None, :], mask=tile_ok,
                    other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        scores = tl.where(slot_ok[None, :], scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, 1))
        probs = tl.exp(scores - new_best[:, None])
        rescale = tl.exp(best - new_best)
        total = total * rescale + tl.sum(probs, 1)
        v = tl.load(v_row + slots[:, None] * v_stride_s + d[None, :], mask=tile_ok,
                    other=0.0)
        probs = probs.to(v.dtype)  # rounded like the matmul path's probabilities
        if UPCAST:
            probs, v = probs.to(tl.float32), v.to(tl.float32)
        acc = acc * rescale[:, None] + tl.dot(probs, v, input_precision=PRECISION)
        best = new_best
    return best, total, acc


@triton.jit
def new_slot(q, best, total, acc, k_new, v_new, valid, scale, UPCAST: tl.constexpr):
    # online_softmax's state after one more slot whose k/v [BLOCK_D] are in registers (this
    # step's, which the kernel also writes into the cache); `valid` False leaves it as it is.
    # The product as tl.dot takes it (exact products, fp32 sums), the probability rounded to
    # the cache dtype as online_softmax rounds it
    score = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], 1) * scale
    score = tl.where(valid, score, float("-inf"))
    new_best = tl.maximum(best, score)
    anchor = tl.where(new_best > float("-inf"), new_best, 0.0)  # no -inf - -inf = NaN
    prob = tl.exp(score - anchor)
    rescale = tl.exp(best - anchor)
    prob = prob.to(v_new.dtype)
    if UPCAST:
        prob = prob.to(tl.float32)
    total = total * rescale + prob.to(tl.float32)
    acc = acc * rescale[:, None] + prob.to(tl.float32)[:, None] * v_new.to(tl.float32)[None, :]
    return new_best, total, acc


@triton.jit
def attend_with_new_slot(q, k_row, v_row, k_new, v_new, first, index, scale, k_stride_s,
                         v_stride_s, HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr,
                         BLOCK_D: tl.constexpr, BLOCK: tl.constexpr, PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr):
    # this step's k/v [BLOCK_D] come in registers: written into slot `index` of the cache here
    # (no cache-write kernels before), attended from the registers after the cached slots
    # [first, index) -> (sum of exp, unnormalized output)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    tl.store(k_row + index * k_stride_s + d, k_new, mask=d_ok)
    tl.store(v_row + index * v_stride_s + d, v_new, mask=d_ok)
    best, total, acc = online_softmax(q, k_row, v_row, first, index, scale, k_stride_s,
                                      v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D, BLOCK,
                                      PRECISION, UPCAST)
    _, total, acc = new_slot(q, best, total, acc, k_new, v_new, index >= first, scale, UPCAST)
    return total, acc


@triton.jit
def store_heads(out_ptr, row, heads, head_ok, total, acc, out_stride_b, out_stride_h,
                BLOCK_D: tl.constexpr):
    # the normalized output of the group's heads; no valid slot (a capture warm-up): zeros
    d = tl.arange(0, BLOCK_D)
    total = tl.where(total > 0, total, 1.0)
    out = acc / total[:, None]
    tl.store(out_ptr + row * out_stride_b + heads[:, None] * out_stride_h + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=head_ok)


@triton.jit
def decode_attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, pad_ptr, index_ptr, k_new_ptr, v_new_ptr, scale,
        q_stride_b, q_stride_h, k_stride_b, k_stride_h, k_stride_s,
        v_stride_b, v_stride_h, v_stride_s, out_stride_b, out_stride_h,
        k_new_stride_b, k_new_stride_h, v_new_stride_b, v_new_stride_h,
        GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr, WRITE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # row x stride passes 2**31 in large caches
    kv = tl.program_id(1).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    head_ok = (g < GROUP)[:, None] & d_ok[None, :]
    heads = kv * GROUP + g
    q = group_query(q_ptr, row, heads, q_stride_b, q_stride_h, GROUP, HEAD_DIM, BLOCK_G,
                    BLOCK_D, UPCAST)
    first = tl.load(pad_ptr + row)  # left padding: slots before it are not the row's
    index = tl.load(index_ptr)  # this step's slot: the last one attended
    k_row = k_ptr + row * k_stride_b + kv * k_stride_h
    v_row = v_ptr + row * v_stride_b + kv * v_stride_h
    if WRITE:
        k_new = tl.load(k_new_ptr + row * k_new_stride_b + kv * k_new_stride_h + d,
                        mask=d_ok, other=0.0)
        v_new = tl.load(v_new_ptr + row * v_new_stride_b + kv * v_new_stride_h + d,
                        mask=d_ok, other=0.0)
        total, acc = attend_with_new_slot(q, k_row, v_row, k_new, v_new, first, index, scale,
                                          k_stride_s, v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D,
                                          BLOCK, PRECISION, UPCAST)
    else:  # this step's slot was written before the launch
        _, total, acc = online_softmax(q, k_row, v_row, first, index + 1, scale, k_stride_s,
                                       v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D, BLOCK,
                                       PRECISION, UPCAST)
    store_heads(out_ptr, row, heads, head_ok, total, acc, out_stride_b, out_stride_h, BLOCK_D)


@triton.jit
def rounded(x, dtype: tl.constexpr):
    # x (fp32) rounded to `dtype` and back: where an eager op in `dtype` rounds its result
    return x.to(dtype).to(tl.float32)


@triton.jit
def load_scaled(ptrs, ok, row_scale, dtype: tl.constexpr, ROW_SCALE: tl.constexpr):
    # fp32 values of the projection, times the row's RMSNorm scale (rounded) under ROW_SCALE
    x = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    if ROW_SCALE:
        x = rounded(x * row_scale, dtype)
    return x


@triton.jit
def projected_heads(row_ptr, heads, ok, norm_ptr, cos, sin_signed, row_scale, eps,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, NORM: tl.constexpr,
                    ROW_SCALE: tl.constexpr):
    # heads [R] of one row's packed projection (head h at h * HEAD_DIM) -> [R, BLOCK_D] fp32,
    # each value one of the projection dtype's, as the compiled head rounds them: times the
    # row scale; the q/k RMSNorm by the per-head weights [heads, HEAD_DIM] (normalize, round,
    # weight, round); RoPE as x * cos + roll(x, HEAD_DIM / 2) * sin_signed (x * cos rounded,
    # then the sum: addcmul's one rounding)
    dtype: tl.constexpr = row_ptr.dtype.element_ty
    d = tl.arange(0, BLOCK_D)
    rolled = (d + HEAD_DIM // 2) % HEAD_DIM
    at = heads[:, None] * HEAD_DIM
    x = load_scaled(row_ptr + at + d[None, :], ok, row_scale, dtype, ROW_SCALE)
    xr = load_scaled(row_ptr + at + rolled[None, :], ok, row_scale, dtype, ROW_SCALE)
    if NORM:
        rstd = tl.rsqrt(tl.sum(x * x, 1) / HEAD_DIM + eps)[:, None]
        w = tl.load(norm_ptr + at + d[None, :], mask=ok, other=0.0).to(tl.float32)
        wr = tl.load(norm_ptr + at + rolled[None, :], mask=ok, other=0.0).to(tl.float32)
        x = rounded(rounded(x * rstd, dtype) * w, dtype)
        xr = rounded(rounded(xr * rstd, dtype) * wr, dtype)
    return rounded(rounded(x * cos[None, :], dtype) + xr * sin_signed[None, :], dtype)


@triton.jit
def row_inputs(cos_ptr, sin_ptr, x_ptr, row, cos_stride_b, sin_stride_b, x_stride_b, eps,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HIDDEN: tl.constexpr,
               BLOCK_X: tl.constexpr, ROW_SCALE: tl.constexpr):
    # one row's RoPE tables [BLOCK_D] fp32 and, under ROW_SCALE, its residual stream's RMSNorm
    # scale rsqrt(mean(x^2) + eps) (else 1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    cos = tl.load(cos_ptr + row * cos_stride_b + d, mask=d_ok, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + row * sin_stride_b + d, mask=d_ok, other=0.0).to(tl.float32)
    row_scale = 1.0
    if ROW_SCALE:
        row_scale = rms_scale(x_ptr + row * x_stride_b, eps, HIDDEN, BLOCK_X)
    return cos, sin, row_scale


@triton.jit
def rms_scale(x_row, eps, HIDDEN: tl.constexpr, BLOCK_X: tl.constexpr):
    # RMSNorm's scale of one row of the residual stream: rsqrt(mean(x^2) + eps), fp32
    xs = tl.arange(0, BLOCK_X)
    x = tl.load(x_row + xs, mask=xs < HIDDEN, other=0.0).to(tl.float32)
    return tl.rsqrt(tl.sum(x * x, 0) / HIDDEN + eps)


@triton.jit
def project_heads_kernel(
        qkv_ptr, norm_ptr, cos_ptr, sin_ptr, x_ptr, out_ptr, eps, qkv_stride_b, cos_stride_b,
        sin_stride_b, x_stride_b, out_stride_b,
        HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, HIDDEN: tl.constexpr, BLOCK_X: tl.constexpr,
        NORM: tl.constexpr, ROW_SCALE: tl.constexpr):
    # folded-norms' work between the packed q/k/v GEMM and attention, one program per (row,
    # head of q|k|v): out [B, H + 2 KV, d] (contiguous) gets the head normed and rotated (q, k)
    # or scaled (v)
    dtype: tl.constexpr = qkv_ptr.dtype.element_ty
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    cos, sin, row_scale = row_inputs(cos_ptr, sin_ptr, x_ptr, row, cos_stride_b, sin_stride_b,
                                     x_stride_b, eps, HEAD_DIM, BLOCK_D, HIDDEN, BLOCK_X,
                                     ROW_SCALE)
    row_ptr = qkv_ptr + row * qkv_stride_b
    out_at = out_ptr + row * out_stride_b + head * HEAD_DIM + d
    if head < HEADS + KV_HEADS:  # a q or k head: normed and rotated
        heads = tl.full([1], 0, tl.int64) + head
        rotated = projected_heads(row_ptr, heads, d_ok[None, :], norm_ptr, cos, sin, row_scale,
                                  eps, HEAD_DIM, BLOCK_D, NORM, ROW_SCALE)
        tl.store(out_at, tl.reshape(rotated, [BLOCK_D]).to(dtype), mask=d_ok)
    else:  # a v head: the row scale only
        v = load_scaled(row_ptr + head * HEAD_DIM + d, d_ok, row_scale, dtype, ROW_SCALE)
        tl.store(out_at, v.to(dtype), mask=d_ok)


@triton.jit
def scaled_gated_kernel(gate_up_ptr, x_ptr, out_ptr, eps, gate_up_stride, x_stride, out_stride,
                        FFN: tl.constexpr, HIDDEN: tl.constexpr, BLOCK_X: tl.constexpr,
                        BLOCK_F: tl.constexpr):
    # folded_norms.gated: one program per (row, column block), the row's RMSNorm scale from
    # the residual stream, then SiLU(gate * scale) * (up * scale), each product rounded
    dtype: tl.constexpr = gate_up_ptr.dtype.element_ty
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    ok = cols < FFN
    scale = rms_scale(x_ptr + row * x_stride, eps, HIDDEN, BLOCK_X)
    at = gate_up_ptr + row * gate_up_stride + cols
    gate = load_scaled(at, ok, scale, dtype, True)
    up = load_scaled(at + FFN, ok, scale, dtype, True)
    silu = rounded(gate / (1.0 + tl.exp(-gate)), dtype)
    tl.store(out_ptr + row * out_stride + cols, (silu * up).to(dtype), mask=ok)

