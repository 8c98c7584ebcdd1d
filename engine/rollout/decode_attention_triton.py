"""decode_attention's Triton kernels (imported by it at first use: Triton is optional; it is
imported here at module level, so the kernels are decorated once, as TRITON_INTERPRET says at
this import). The one-pass kernel and split-K's split kernel share the query tile and the
online-softmax loop (Triton inlines them); decode_attention.py says what each does."""

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
        # this step's k/v come in registers: written into slot `index` of the cache here (no
        # cache-write kernels before), attended from the registers after the cached slots
        k_new = tl.load(k_new_ptr + row * k_new_stride_b + kv * k_new_stride_h + d,
                        mask=d_ok, other=0.0)
        v_new = tl.load(v_new_ptr + row * v_new_stride_b + kv * v_new_stride_h + d,
                        mask=d_ok, other=0.0)
        tl.store(k_row + index * k_stride_s + d, k_new, mask=d_ok)
        tl.store(v_row + index * v_stride_s + d, v_new, mask=d_ok)
        best, total, acc = online_softmax(q, k_row, v_row, first, index, scale, k_stride_s,
                                          v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D, BLOCK,
                                          PRECISION, UPCAST)
        _, total, acc = new_slot(q, best, total, acc, k_new, v_new, index >= first, scale,
                                 UPCAST)
    else:  # this step's slot was written before the launch
        _, total, acc = online_softmax(q, k_row, v_row, first, index + 1, scale, k_stride_s,
                                       v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D, BLOCK,
                                       PRECISION, UPCAST)
    total = tl.where(total > 0, total, 1.0)  # no valid slot (a capture warm-up): zeros
    out = acc / total[:, None]
    tl.store(out_ptr + row * out_stride_b + heads[:, None] * out_stride_h + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=head_ok)


@triton.jit
def decode_attention_split_kernel(
        q_ptr, k_ptr, v_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, pad_ptr, index_ptr,
        scale, heads_total, q_stride_b, q_stride_h, k_stride_b, k_stride_h, k_stride_s,
        v_stride_b, v_stride_h, v_stride_s,
        SPLITS: tl.constexpr, GROUP: tl.constexpr, BLOCK_G: tl.constexpr,
        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK: tl.constexpr,
        PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    kv = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    group_ok = g < GROUP
    heads = kv * GROUP + g
    q = group_query(q_ptr, row, heads, q_stride_b, q_stride_h, GROUP, HEAD_DIM, BLOCK_G,
                    BLOCK_D, UPCAST)
    first = tl.load(pad_ptr + row)
    end = tl.load(index_ptr) + 1
    # the row's filled slots [first, end) in SPLITS equal chunks: this program's is
    # [lo, hi), empty once the chunks before it have covered the row
    chunk = (tl.maximum(end - first, 0) + SPLITS - 1) // SPLITS
    lo = first + split * chunk
    hi = tl.minimum(lo + chunk, end)
    k_row = k_ptr + row * k_stride_b + kv * k_stride_h
    v_row = v_ptr + row * v_stride_b + kv * v_stride_h
    best, total, acc = online_softmax(q, k_row, v_row, lo, hi, scale, k_stride_s,
                                      v_stride_s, HEAD_DIM, BLOCK_G, BLOCK_D, BLOCK,
                                      PRECISION, UPCAST)
    part = (row * heads_total + heads) * SPLITS + split  # [BLOCK_G]
    tl.store(part_max_ptr + part, best, mask=group_ok)
    tl.store(part_sum_ptr + part, total, mask=group_ok)
    tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], acc,
             mask=group_ok[:, None] & (d < HEAD_DIM)[None, :])


@triton.jit
def decode_attention_merge_kernel(
        part_out_ptr, part_max_ptr, part_sum_ptr, out_ptr, heads_total, out_stride_b,
        out_stride_h, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    split_ok = s < SPLITS
    part = (row * heads_total + head) * SPLITS + s
    maxes = tl.load(part_max_ptr + part, mask=split_ok, other=float("-inf"))
    sums = tl.load(part_sum_ptr + part, mask=split_ok, other=0.0)
    outs = tl.load(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :],
                   mask=split_ok[:, None] & (d < HEAD_DIM)[None, :], other=0.0)
    best = tl.max(maxes, 0)
    # each chunk weighed by exp(its max - the row's): an empty one (max -inf) by 0; a row
    # without slots (every max -inf) subtracts 0, not -inf (no -inf - -inf = NaN)
    weight = tl.exp(maxes - tl.where(best > float("-inf"), best, 0.0))
    total = tl.sum(weight * sums, 0)
    total = tl.where(total > 0, total, 1.0)  # no valid slot (a capture warm-up): zeros
    out = tl.sum(weight[:, None] * outs, 0) / total
    tl.store(out_ptr + row * out_stride_b + head * out_stride_h + d,
             out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)
