"""Attention for one query token per row over a static KV cache (fast_generate's `decode-attn`).

Issue 20's H200 profile: cuDNN's flash kernel (built for long queries) took 43 us per layer for
a batch-64 decode step, 1.15 ms of the 2.8 ms step, reading the layer's K/V at about 1 TB/s.
Here one Triton program per (row, KV head) streams that head's filled cache slots once, with:
  - the GQA group's query heads as the rows of one tile (no repeated K/V, no q copy: q's
    strides are passed as they are);
  - only the row's valid slots [pad, index] read: the loop bounds come from the device
    tensors, so no mask tensor and no window buckets (one CUDA graph serves every step);
  - scores and the online softmax in fp32 (the probabilities rounded to the cache dtype only
    for the product with V, as the matmul path rounds them).
Launches are plain Triton launches: capturable by a CUDA graph, with no host sync.

`attend` runs the kernel; `attend_by_matmul` is the same maths by batched matmuls (the reference
the tests compare with). `kernel_status(device)` says whether the kernel can run there: on CUDA
with Triton importable, or anywhere under TRITON_INTERPRET=1 (the CPU tests).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

BLOCK_L = 64  # cache slots per loop iteration
NUM_WARPS = 4
NUM_STAGES = 2  # K/V tiles in flight per program: 2 x 32 KB of shared memory at block 64
MIN_DOT = 16  # tl.dot's smallest tile side: the group's query heads are padded up to it


def kernel_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for the Triton kernel on `device`."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpret:
        return False, f"its Triton kernel needs CUDA (device {device.type})"
    try:
        _kernel(interpret)
    except ImportError as err:
        return False, f"Triton is not importable ({err})"
    return True, "ok"


@functools.cache
def _kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted kernel, built at first use (Triton imported lazily; `interpret` keys the cache:
    triton.jit reads TRITON_INTERPRET when it decorates)."""
    del interpret
    import triton
    import triton.language as tl

    @triton.jit
    def decode_attention_kernel(
            q_ptr, k_ptr, v_ptr, out_ptr, pad_ptr, index_ptr, scale,
            q_stride_b, q_stride_h, k_stride_b, k_stride_h, k_stride_s,
            v_stride_b, v_stride_h, v_stride_s, out_stride_b, out_stride_h,
            GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr,
            BLOCK_D: tl.constexpr, BLOCK: tl.constexpr, PRECISION: tl.constexpr,
            UPCAST: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # row x stride passes 2**31 in large caches
        kv = tl.program_id(1).to(tl.int64)
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, BLOCK_D)
        head_ok = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
        heads = kv * GROUP + g
        q = tl.load(q_ptr + row * q_stride_b + heads[:, None] * q_stride_h + d[None, :],
                    mask=head_ok, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        first = tl.load(pad_ptr + row)  # left padding: slots before it are not the row's
        end = tl.load(index_ptr) + 1  # this step's slot, written just before, is the last
        k_row = k_ptr + row * k_stride_b + kv * k_stride_h
        v_row = v_ptr + row * v_stride_b + kv * v_stride_h
        best = tl.full([BLOCK_G], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
        for start in range(first, end, BLOCK):
            slots = start + tl.arange(0, BLOCK)
            slot_ok = slots < end
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
        total = tl.where(total > 0, total, 1.0)  # no valid slot (a capture warm-up): zeros
        out = acc / total[:, None]
        tl.store(out_ptr + row * out_stride_b + heads[:, None] * out_stride_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=head_ok)

    return decode_attention_kernel


def attend(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, pad: torch.Tensor,
           index: torch.Tensor, scale: float, block: int = BLOCK_L,
           num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES) -> torch.Tensor:
    """q [B, H, d] (any strides with a unit last one) over one layer's cache k, v [B, KV, S, d]
    (this step's k/v already in slot `index` [] long), each row from slot pad[b] [B] long on
    -> [B, H, d] in q's dtype. `block`, `num_warps`, `num_stages`: the launch (the bench
    tries others)."""
    b, heads, head_dim = q.shape
    kv_heads = cache_k.shape[1]
    if q.stride(-1) != 1:
        q = q.contiguous()
    out = torch.empty((b, heads, head_dim), dtype=q.dtype, device=q.device)
    group = heads // kv_heads
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    kernel = _kernel(interpret)
    kernel[(b, kv_heads)](
        q, cache_k, cache_v, out, pad, index, scale,
        q.stride(0), q.stride(1), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2),
        cache_v.stride(0), cache_v.stride(1), cache_v.stride(2), out.stride(0), out.stride(1),
        GROUP=group, BLOCK_G=max(MIN_DOT, _pow2(group)), HEAD_DIM=head_dim,
        BLOCK_D=max(MIN_DOT, _pow2(head_dim)), BLOCK=block,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # the interpreter's tl.dot reads bf16/fp16 bits as integers: fp32 operands there
        UPCAST=interpret and q.dtype != torch.float32, num_warps=num_warps,
        num_stages=num_stages)
    return out


def attend_by_matmul(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                     pad: torch.Tensor, index: torch.Tensor, scale: float) -> torch.Tensor:
    """`attend`'s maths by batched matmuls over the KV groups (fp32 scores and softmax)."""
    b, heads, head_dim = q.shape
    kv_heads = cache_k.shape[1]
    wide = torch.promote_types(q.dtype, torch.float32)  # fp32 at least
    qg = q.reshape(b, kv_heads, heads // kv_heads, head_dim).to(wide)
    scores = torch.matmul(qg, cache_k.to(wide).transpose(-1, -2)) * scale  # [B, KV, G, S]
    slots = torch.arange(cache_k.shape[2], device=q.device)
    valid = (slots[None, :] >= pad[:, None]) & (slots[None, :] <= index)
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs.to(q.dtype).to(wide), cache_v.to(wide))
    return out.to(q.dtype).reshape(b, heads, head_dim)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
