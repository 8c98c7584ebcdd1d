"""Attention for one query token per row over a static KV cache (fast_generate's `decode-attn`).

Issue 20's H200 profile: cuDNN's flash kernel (built for long queries) took 43 us per layer for
a batch-64 decode step, 1.15 ms of the 2.8 ms step, reading the layer's K/V at about 1 TB/s.
Here one Triton program per (row, KV head) streams that head's filled cache slots once, with:
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

Split-K (flash-decoding, fast_generate's `decode-attn-split`): 512 programs (64 rows x 8 KV
heads) each walking ~300 slots in sequence read the cache at about half the H200's bandwidth.
`attend_split` cuts each row's filled slots into `splits` equal chunks, one program each (grid
rows x KV heads x splits), which write their unnormalized fp32 output with its running max and
sum; a second small kernel merges them exactly (log-sum-exp: each chunk weighted by
exp(its max - the row's max)). Chunks past a row's filled range read nothing and write max -inf,
sum 0, which the merge weighs 0. `split_count` picks `splits` from static shapes only (batch, KV
heads, cache length, the device's SM count), so one CUDA graph keeps its launch.

From the raw packed q/k/v projection (fast_generate's `attn-rope` and `folded-norms`): the q/k
RMSNorm, RoPE and (folded-norms) the input RMSNorm's row scale, rounded as the compiled head
rounds them, either inside the one-pass kernel (`attend_projection`: each program does its
heads first; slower on the H200, the longer prologue delays its cache reads) or as a kernel of
their own, one program per (row, head), before `attend` with new_kv (`project_heads`; with
`pdl` it lets the attention kernel launch early, which waits for its writes).
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

BLOCK_L = 64  # cache slots per loop iteration
NUM_WARPS = 4
NUM_STAGES = 2  # K/V tiles in flight per program: 2 x 32 KB of shared memory at block 64
MIN_DOT = 16  # tl.dot's smallest tile side: the group's query heads are padded up to it
# split-K: programs aimed at per SM (about 4 waves of ~4 resident programs: a first guess for
# the H200's bench to tune; the split kernel compiled for sm_90 at block 64 takes 22 KB of
# shared memory), the fewest slots worth a chunk of their own, and a ceiling on the partials
# the merge reads per head
SPLIT_PROGRAMS_PER_SM = 16
MIN_SPLIT_SLOTS = 16
MAX_SPLITS = 16
NOMINAL_SMS = 132  # an H200's SM count: the split count off CUDA (the interpreter's tests)
MERGE_WARPS = 4  # the merge reads SPLITS x HEAD_DIM fp32 per (row, head)
PROJECT_WARPS = 1  # project_heads: one head (128 values) per program


def kernel_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for the Triton kernels (one-pass and split-K) on `device`."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpret:
        return False, f"its Triton kernel needs CUDA (device {device.type})"
    try:
        _kernel(interpret)
        _qkv_kernel(interpret)
        _project_kernel(interpret)
        _split_kernels(interpret)
    except ImportError as err:
        return False, f"Triton is not importable ({err})"
    return True, "ok"


def pdl_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for programmatically dependent launches: the kernels on CUDA (the
    interpreter runs programs one after the other: nothing to overlap), Hopper or newer."""
    ok, why = kernel_status(device)
    if not ok:
        return ok, why
    if device.type != "cuda":
        return False, "programmatic dependent launch needs CUDA (the interpreter has none)"
    major, _ = torch.cuda.get_device_capability(device)
    if major < 9:
        return False, f"programmatic dependent launch needs sm_90 or newer (sm_{major}x here)"
    return True, "ok"


@functools.cache
def _kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted one-pass kernel (Triton imported at first use; `interpret` keys the cache as
    sampling_kernel's: the module's kernels were decorated as TRITON_INTERPRET said at import)."""
    del interpret
    from ppodeck.engine.rollout import decode_attention_triton as kernels

    return kernels.decode_attention_kernel


@functools.cache
def _qkv_kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted one-pass kernel that starts from the raw packed projection (`_kernel`'s
    cache key)."""
    del interpret
    from ppodeck.engine.rollout import decode_attention_triton as kernels

    return kernels.decode_attention_qkv_kernel


@functools.cache
def _project_kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted projection kernel of project_heads (`_kernel`'s cache key)."""
    del interpret
    from ppodeck.engine.rollout import decode_attention_triton as kernels

    return kernels.project_heads_kernel


@functools.cache
def _split_kernels(interpret: bool) -> tuple[Any, Any]:
    """(split, merge): split-K's two jitted kernels. The partials are contiguous fp32
    [B, H, SPLITS(, HEAD_DIM)]: (row, head, split) at (row * heads + head) * SPLITS + split."""
    del interpret
    from ppodeck.engine.rollout import decode_attention_triton as kernels

    return kernels.decode_attention_split_kernel, kernels.decode_attention_merge_kernel


def attend(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, pad: torch.Tensor,
           index: torch.Tensor, scale: float, block: int = BLOCK_L,
           num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES,
           new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
           pdl: bool = False) -> torch.Tensor:
    """q [B, H, d] (any strides with a unit last one) over one layer's cache k, v [B, KV, S, d],
    each row from slot pad[b] [B] long to slot `index` [] long -> [B, H, d] in q's dtype.
    This step's k/v [B, KV, d] (unit last stride): in the cache's slot `index` already, or
    given as `new_kv`, which the kernel writes there itself (the decode step then needs no
    cache-write kernels: two fewer launches per layer). `block`, `num_warps`, `num_stages`:
    the launch (the bench tries others). `pdl` (CUDA only): launched programmatically
    dependent on the kernel before it (project_heads with pdl), which lets it launch early;
    the kernel waits for that one's writes before it reads q and new_kv."""
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
        UPCAST=interpret and q.dtype != torch.float32, WRITE=new_kv is not None, PDL=pdl,
        num_warps=num_warps, num_stages=num_stages, **_pdl_launch(pdl))
    return out


def attend_projection(qkv: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      pad: torch.Tensor, index: torch.Tensor, scale: float,
                      rope: tuple[torch.Tensor, torch.Tensor], norm: torch.Tensor | None,
                      eps: float, heads: int, x: torch.Tensor | None = None,
                      block: int = BLOCK_L, num_warps: int = NUM_WARPS,
                      num_stages: int = NUM_STAGES) -> torch.Tensor:
    """`attend` with new_kv from the step's raw packed projection qkv [B, (H + 2 KV) d] (unit
    last stride), the work between the GEMM and attention done in the kernel: each program
    takes its heads' q/k RMSNorm by `norm` [H + KV, d] (None: the model has none), RoPE by
    `rope` (cos, sin_signed) [B, d] each (unit last stride; the rotation is x * cos +
    roll(x, d / 2) * sin_signed), writes k/v into slot `index` and attends. `x` [B, hidden]
    (unit last stride): the residual stream whose RMSNorm row scale rsqrt(mean(x^2) + eps)
    the projection lacks (folded-norms: the norm's weight is in the packed weight), applied
    to q, k and v first. Results rounded as the compiled head rounds them -> [B, H, d]."""
    b = qkv.shape[0]
    kv_heads, head_dim = cache_k.shape[1], cache_k.shape[3]
    cos, sin_signed = _check_projection(qkv, rope, heads, kv_heads, head_dim)
    out = torch.empty((b, heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    _qkv_kernel(interpret)[(b, kv_heads)](
        qkv, qkv if norm is None else norm, cos, sin_signed, qkv if x is None else x, cache_k,
        cache_v, out, pad, index, scale, eps, qkv.stride(0), cos.stride(0), sin_signed.stride(0),
        0 if x is None else x.stride(0), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2),
        cache_v.stride(0), cache_v.stride(1), cache_v.stride(2), out.stride(0), out.stride(1),
        **_projection_constants(heads, kv_heads, head_dim, norm, x), BLOCK=block,
        PRECISION="ieee" if qkv.dtype == torch.float32 else "tf32",
        UPCAST=interpret and qkv.dtype != torch.float32, num_warps=num_warps,
        num_stages=num_stages)
    return out


def project_heads(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                  norm: torch.Tensor | None, eps: float, heads: int, kv_heads: int,
                  x: torch.Tensor | None = None, pdl: bool = False) -> tuple[torch.Tensor, ...]:
    """attend_projection's work before attention as a kernel of its own (folded-norms without
    attn-rope): qkv [B, (H + 2 KV) d] -> q [B, H, d], k [B, KV, d], v [B, KV, d] (views of one
    [B, H + 2 KV, d] output), for `attend` with new_kv. One launch, one program per (row,
    head). `pdl` (CUDA only): each program first lets the next kernel launch (`attend` with
    pdl, which waits for these writes)."""
    b = qkv.shape[0]
    width = heads + 2 * kv_heads
    head_dim = qkv.shape[1] // width
    cos, sin_signed = _check_projection(qkv, rope, heads, kv_heads, head_dim)
    out = torch.empty((b, width, head_dim), dtype=qkv.dtype, device=qkv.device)
    constants = _projection_constants(heads, kv_heads, head_dim, norm, x, group_tile=False)
    _project_kernel(os.environ.get("TRITON_INTERPRET") == "1")[(b, width)](
        qkv, qkv if norm is None else norm, cos, sin_signed, qkv if x is None else x, out, eps,
        qkv.stride(0), cos.stride(0), sin_signed.stride(0), 0 if x is None else x.stride(0),
        out.stride(0), **constants, PDL=pdl, num_warps=PROJECT_WARPS)
    return out[:, :heads], out[:, heads:heads + kv_heads], out[:, heads + kv_heads:]


def _pdl_launch(pdl: bool) -> dict[str, bool]:
    """The launch option of a programmatically dependent launch (none otherwise: Triton builds
    without it still launch the rest)."""
    return {"launch_pdl": True} if pdl else {}


def _check_projection(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], heads: int,
                      kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The RoPE tables as [B, d]; ValueError unless qkv is [B, (H + 2 KV) d], unit last stride."""
    if qkv.shape[1] != (heads + 2 * kv_heads) * head_dim or qkv.stride(-1) != 1:
        raise ValueError(f"qkv must be [B, {(heads + 2 * kv_heads) * head_dim}] with a unit "
                         f"last stride, got {tuple(qkv.shape)} strides {qkv.stride()}")
    return tuple(t.reshape(qkv.shape[0], head_dim) for t in rope)  # type: ignore[return-value]


def _projection_constants(heads: int, kv_heads: int, head_dim: int, norm: torch.Tensor | None,
                          x: torch.Tensor | None, group_tile: bool = True) -> dict[str, Any]:
    """The projection kernels' constexprs; `group_tile`: with the GQA group's query tile
    (attend_projection's; project_heads takes one head per program)."""
    hidden = 1 if x is None else x.shape[-1]
    constants = dict(HEADS=heads, KV_HEADS=kv_heads, HEAD_DIM=head_dim,
                     BLOCK_D=max(MIN_DOT, _pow2(head_dim)), HIDDEN=hidden,
                     BLOCK_X=_pow2(hidden), NORM=norm is not None, ROW_SCALE=x is not None)
    if group_tile:
        constants["BLOCK_G"] = max(MIN_DOT, _pow2(heads // kv_heads))
    return constants


def projection_by_torch(qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                        norm: torch.Tensor | None, eps: float, heads: int, kv_heads: int,
                        x: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """attend_projection's work before attention in torch ops, rounded as it rounds: the raw
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


def attend_split(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                 pad: torch.Tensor, index: torch.Tensor, scale: float, splits: int | None = None,
                 block: int = BLOCK_L, num_warps: int = NUM_WARPS,
                 num_stages: int = NUM_STAGES) -> torch.Tensor:
    """`attend` by split-K: each row's filled slots in `splits` chunks (None: split_count's
    choice for these shapes on q's device), one program each, then their exact merge. Two
    launches and fp32 partials from the caching allocator: capturable, no host sync."""
    b, heads, head_dim = q.shape
    kv_heads, slots = cache_k.shape[1], cache_k.shape[2]
    if splits is None:
        splits = split_count(b, kv_heads, slots, multiprocessors(q.device))
    if not 1 <= splits <= slots:
        raise ValueError(f"splits must be in [1, {slots}] (cache slots), got {splits}")
    if q.stride(-1) != 1:
        q = q.contiguous()
    part_out = torch.empty((b, heads, splits, head_dim), dtype=torch.float32, device=q.device)
    part_max = torch.empty((b, heads, splits), dtype=torch.float32, device=q.device)
    part_sum = torch.empty_like(part_max)
    out = torch.empty((b, heads, head_dim), dtype=q.dtype, device=q.device)
    group = heads // kv_heads
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    split_kernel, merge_kernel = _split_kernels(interpret)
    block_d = max(MIN_DOT, _pow2(head_dim))
    split_kernel[(b, kv_heads, splits)](
        q, cache_k, cache_v, part_out, part_max, part_sum, pad, index, scale, heads,
        q.stride(0), q.stride(1), cache_k.stride(0), cache_k.stride(1), cache_k.stride(2),
        cache_v.stride(0), cache_v.stride(1), cache_v.stride(2),
        SPLITS=splits, GROUP=group, BLOCK_G=max(MIN_DOT, _pow2(group)), HEAD_DIM=head_dim,
        BLOCK_D=block_d, BLOCK=block,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST=interpret and q.dtype != torch.float32, num_warps=num_warps,
        num_stages=num_stages)
    merge_kernel[(b, heads)](
        part_out, part_max, part_sum, out, heads, out.stride(0), out.stride(1),
        SPLITS=splits, BLOCK_S=_pow2(splits), HEAD_DIM=head_dim, BLOCK_D=block_d,
        num_warps=MERGE_WARPS)
    return out


def split_count(batch: int, kv_heads: int, slots: int, sms: int) -> int:
    """Chunks per (row, KV head) from static shapes: enough programs for SPLIT_PROGRAMS_PER_SM
    per SM, no chunk of a full cache under MIN_SPLIT_SLOTS slots, at most MAX_SPLITS."""
    wanted = -(-sms * SPLIT_PROGRAMS_PER_SM // (batch * kv_heads))
    return max(1, min(wanted, slots // MIN_SPLIT_SLOTS, MAX_SPLITS))


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
