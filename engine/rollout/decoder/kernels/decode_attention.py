"""Attention for one query token per row over a static KV cache (the decoder's `decode-attn`).

Why: cuDNN's flash kernel is built for long queries; with one query token per row it took about
40% of a batch-64 decode step, reading K/V well below the memory bandwidth (issue 20's profile,
docs/performance.md). Here one Triton program per (row, KV head) streams that head's filled
cache slots once, with:
  - the GQA group's query heads as the rows of one tile (no repeated K/V, no q copy: q's
    strides are passed as they are);
  - only the row's valid slots [pad, index] read: the loop bounds come from the device
    tensors, so no mask tensor and no window buckets (one CUDA graph serves every step);
  - scores and the online softmax in fp32 (the probabilities rounded to the cache dtype only
    for the product with V, as the matmul path rounds them);
  - optionally (`new_kv`) the step's own k/v taken in registers: the program writes them into
    slot `index` and attends them after the cached slots, so the decode step launches no
    cache-write kernels.
Launches are plain Triton launches: capturable by a CUDA graph, with no host sync.

From the raw packed q/k/v projection (the decoder's `folded-norms`): the q/k RMSNorm, RoPE and
the input RMSNorm's row scale, rounded as the compiled head rounds them, as a kernel of their
own, one program per (row, head), before `attend` with new_kv (`project_heads`).
`projection_by_torch` is their maths in torch ops.

`attend` runs the one-pass kernel; `attend_by_matmul` is the same maths by batched matmuls (the
reference the tests compare with). `kernel_status(device)` says whether the kernels can run
there: on CUDA with Triton importable, or anywhere under TRITON_INTERPRET=1 (the CPU tests).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn.functional as F

from .availability import triton_status

BLOCK_L = 64  # cache slots per loop iteration
NUM_WARPS = 4
NUM_STAGES = 2  # K/V tiles in flight per program: 2 x 32 KB of shared memory at block 64
MIN_DOT = 16  # tl.dot's smallest tile side: the group's query heads are padded up to it
NOMINAL_SMS = 132  # `multiprocessors` off CUDA (the interpreter's tests): a large GPU's count
PROJECT_WARPS = 1  # project_heads: one head (128 values) per program


def kernel_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for the Triton kernels (attention and project_heads) on `device`."""
    return triton_status(device, lambda interpret: (_kernel(interpret),
                                                   _project_kernel(interpret)))


@functools.cache
def _kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted one-pass kernel (Triton imported at first use; `interpret` keys the cache as
    sampling_kernel's: the module's kernels were decorated as TRITON_INTERPRET said at import)."""
    del interpret
    from . import decode_attention_triton as kernels

    return kernels.decode_attention_kernel


@functools.cache
def _project_kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted projection kernel of project_heads (`_kernel`'s cache key)."""
    del interpret
    from . import decode_attention_triton as kernels

    return kernels.project_heads_kernel


def attend(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, pad: torch.Tensor,
           index: torch.Tensor, scale: float, block: int = BLOCK_L,
           num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES,
           new_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q [B, H, d] (any strides with a unit last one) over one layer's cache k, v [B, KV, S, d],
    each row from slot pad[b] [B] long to slot `index` [] long -> [B, H, d] in q's dtype.
    This step's k/v [B, KV, d] (unit last stride): in the cache's slot `index` already, or
    given as `new_kv`, which the kernel writes there itself (the decode step then needs no
    cache-write kernels: two fewer launches per layer). `block`, `num_warps`, `num_stages`:
    the launch (the bench tries others)."""
    b, heads, head_dim = q.shape
    kv_heads = cache_k.shape[1]
    if q.stride(-1) != 1:
        q = q.contiguous()
    k_new, v_new = _unit_last(new_kv) if new_kv is not None else (cache_k, cache_v)
    out = torch.empty((b, heads, head_dim), dtype=q.dtype, device=q.device)
    group = heads // kv_heads
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    kernel = _kernel(interpret)
    kernel[(b, kv_heads)](
        q, cache_k, cache_v, out, pad, index, k_new, v_new, scale,
        q.stride(0), q.stride(1), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2),
        cache_v.stride(0), cache_v.stride(1), cache_v.stride(2), out.stride(0), out.stride(1),
        k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        GROUP=group, BLOCK_G=max(MIN_DOT, _pow2(group)), HEAD_DIM=head_dim,
        BLOCK_D=max(MIN_DOT, _pow2(head_dim)), BLOCK=block,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # the interpreter's tl.dot reads bf16/fp16 bits as integers: fp32 operands there
        UPCAST=interpret and q.dtype != torch.float32, WRITE=new_kv is not None,
        num_warps=num_warps, num_stages=num_stages)
    return out


def project_heads(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                  norm: torch.Tensor | None, eps: float, heads: int, kv_heads: int,
                  x: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """folded-norms' work between the packed q/k/v GEMM and attention: the step's raw packed
    projection qkv [B, (H + 2 KV) d] (unit last stride) -> q [B, H, d], k [B, KV, d], v [B, KV,
    d] (views of one [B, H + 2 KV, d] output), for `attend` with new_kv. q/k RMSNorm by `norm`
    [H + KV, d] (None: the model has none), RoPE by `rope` (cos, sin_signed) [B, d] each (unit
    last stride; x * cos + roll(x, d / 2) * sin_signed); `x` [B, hidden] (unit last stride):
    the residual stream whose RMSNorm row scale rsqrt(mean(x^2) + eps) the projection lacks
    (the norm's weight is folded into the packed weight), applied to q, k and v first. Results
    rounded as the compiled head rounds them. One launch, one program per (row, head)."""
    b = qkv.shape[0]
    width = heads + 2 * kv_heads
    head_dim = qkv.shape[1] // width
    cos, sin_signed = _check_projection(qkv, rope, heads, kv_heads, head_dim)
    out = torch.empty((b, width, head_dim), dtype=qkv.dtype, device=qkv.device)
    constants = _projection_constants(heads, kv_heads, head_dim, norm, x)
    _project_kernel(os.environ.get("TRITON_INTERPRET") == "1")[(b, width)](
        qkv, qkv if norm is None else norm, cos, sin_signed, qkv if x is None else x, out, eps,
        qkv.stride(0), cos.stride(0), sin_signed.stride(0), 0 if x is None else x.stride(0),
        out.stride(0), **constants, num_warps=PROJECT_WARPS)
    return out[:, :heads], out[:, heads:heads + kv_heads], out[:, heads + kv_heads:]


def _check_projection(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], heads: int,
                      kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The RoPE tables as [B, d]; ValueError unless qkv is [B, (H + 2 KV) d], unit last stride."""
    if qkv.shape[1] != (heads + 2 * kv_heads) * head_dim or qkv.stride(-1) != 1:
        raise ValueError(f"qkv must be [B, {(heads + 2 * kv_heads) * head_dim}] with a unit "
                         f"last stride, got {tuple(qkv.shape)} strides {qkv.stride()}")
    return tuple(t.reshape(qkv.shape[0], head_dim) for t in rope)  # type: ignore[return-value]


def _projection_constants(heads: int, kv_heads: int, head_dim: int, norm: torch.Tensor | None,
                          x: torch.Tensor | None) -> dict[str, Any]:
    """project_heads' kernel constexprs."""
    hidden = 1 if x is None else x.shape[-1]
    return dict(HEADS=heads, KV_HEADS=kv_heads, HEAD_DIM=head_dim,
                BLOCK_D=max(MIN_DOT, _pow2(head_dim)), HIDDEN=hidden, BLOCK_X=_pow2(hidden),
                NORM=norm is not None, ROW_SCALE=x is not None)


def projection_by_torch(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                        norm: torch.Tensor | None, eps: float, heads: int, kv_heads: int,
                        x: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """project_heads' work in torch ops, rounded as it rounds: the raw
    projection [B, (H + 2 KV) d] -> q [B, H, d], k [B, KV, d], v [B, KV, d] (the tests'
    reference)."""
    b = qkv.shape[0]
    d = qkv.shape[1] // (heads + 2 * kv_heads)
    if x is not None:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        qkv = (qkv.float() * scale).to(qkv.dtype)
    qk = qkv[:, :(heads + kv_heads) * d].reshape(b, heads + kv_heads, d)
    v = qkv[:, (heads + kv_heads) * d:].reshape(b, kv_heads, d)
    if norm is not None:
        qk = F.rms_norm(qk, (d,), None, eps) * norm
    cos, sin_signed = (t.reshape(b, 1, d) for t in rope)
    qk = torch.addcmul(qk * cos, torch.roll(qk, d // 2, -1), sin_signed)
    return qk[:, :heads], qk[:, heads:], v


def _unit_last(new_kv: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """new_kv's k and v as [B, KV, d] with a unit last stride (a copy only where it is not)."""
    k, v = new_kv
    return tuple(t if t.stride(-1) == 1 else t.contiguous() for t in (k, v))  # type: ignore[return-value]


def multiprocessors(device: torch.device) -> int:
    """The device's SM count (NOMINAL_SMS off CUDA)."""
    if device.type != "cuda":
        return NOMINAL_SMS
    return _cuda_multiprocessors(device.index if device.index is not None
                                 else torch.cuda.current_device())


@functools.cache
def _cuda_multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


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
