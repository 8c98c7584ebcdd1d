"""GEMM for few rows against a big weight (fast_generate's `skinny-gemm`): x [M, K] @ W[N, K]^T.

At batch 64 the decode step's projections are [64, K] x [K, N]: cuBLAS tiles of 128 columns
give o_proj ([64, 2048] x [2048, 1024]) 8 programs on the H200's 132 SMs, so the weights (the
whole cost: the activations are tiny) stream at ~1.3 TB/s of 4.8. Here:
  - one tile of rows covers all of M (M <= 128, padded up to tl.dot's 16);
  - N is cut into narrow tiles and K into SPLIT_K chunks, chosen by `plan` so that about 2-4
    programs per SM each stream their slice of the weight once;
  - split-K in the same kernel, deterministic: each split writes its fp32 partial [M, N], and
    the column tile's last split to arrive (an atomic counter per tile) sums all of them in
    split order, adds the residual and casts (the H200 profile: a second kernel for that sum
    cost ~1.4 us per call, at batch 64 a kernel's floor). The buffers are allocated once per
    shape and kept (the decode step is a CUDA graph: they must not move between replays);
  - fp32 accumulation, the residual added in fp32 and rounded once (as addmm_ does);
  - GATED (`gated_linear`, folded-norms' gate/up): each program streams a column tile of gate
    and the same of up, sums the rows' squares from the x tiles it loads, and writes
    SiLU(gate * r) * (up * r): the GEMM, folded_norms.gated's kernel and its [M, 2F] round trip
    in one.
Launches are plain Triton launches: capturable by a CUDA graph, with no host sync.

`linear` and `gated_linear` run the kernel; `linear_by_torch` and `gated_linear_by_torch` are
the same contracts in torch ops (the fallback and the tests' reference). `kernel_status(device)`
says whether the kernel can run there: on CUDA
with Triton importable, or anywhere under TRITON_INTERPRET=1 (the CPU tests).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from engine.rollout.decode_attention import multiprocessors

MAX_M = 128  # one row tile covers all of M: the decode batch
MIN_DOT = 16  # tl.dot's smallest tile side
BLOCK_NS = (128, 64, 32, 16)  # column tiles `plan` tries, widest first
SPLITS = (1, 2, 4, 8, 16)
MIN_K_CHUNK = 128  # a split's K range below this streams too little to pay for its partials
TILE_ELEMENTS = 8192  # weight elements per loop step (16 KB bf16): BLOCK_K = this / BLOCK_N
MAX_BLOCK_K = 256  # with M = 64 the x tile is then 32 KB bf16 per pipeline stage
NUM_WARPS = 4
NUM_STAGES = 3

# (M, N, K, SMs) -> (BLOCK_N, BLOCK_K, SPLIT_K) measured best, which `plan` returns for that
# shape: the Qwen3-0.6B decode step's down projection on the H200, where skinny-down runs it
# (bench/gpu_gemm_probe.py --only down, 2026-12-04: 8.13 us against cuBLAS's 9.51, weights
# cold, residual added; `plan`'s own choice, n64 k64 split16, 9.37)
TUNED = {(64, 1024, 3072, 132): (32, 256, 4)}

# gated_linear's (M, 2F, K, SMs) -> tiles measured best (bench/gpu_gemm_probe.py)
TUNED_GATED: dict[tuple[int, int, int, int], tuple[int, int, int]] = {}

# _scratch's buffers by launch shape, device and stream
_SCRATCH: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def kernel_status(device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for the Triton kernels on `device`."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpret:
        return False, f"its Triton kernels need CUDA (device {device.type})"
    try:
        _kernel(interpret)
    except ImportError as err:
        return False, f"Triton is not importable ({err})"
    return True, "ok"


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
    n = _checked(x, weight).shape[0]
    target = _target(x, n, out, residual)
    _launch(x, weight, target, residual, n, tiles or plan(x.shape[0], n, x.shape[1],
                                                          multiprocessors(x.device)))
    return target


def gated_linear(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 tiles: tuple[int, int, int] | None = None) -> torch.Tensor:
    """folded-norms' MLP input in one kernel (fast_generate's `gated-gemm`): x [M, K] the
    residual stream, weight [2F, K] the packed gate|up weight with the RMSNorm weight folded
    in -> SiLU(gate * r) * (up * r) [M, F], r = rsqrt(mean(x^2) + eps) per row, summed from
    the x tiles the GEMM loads anyway. What folded_norms.gated(x @ weight^T, x, eps) gives
    (the GEMM rounded to the dtype first), without the [M, 2F] round trip and its kernel.
    `tiles`: (BLOCK_N, BLOCK_K, SPLIT_K), BLOCK_N columns of gate and as many of up."""
    if x.shape[0] > MAX_M:
        return gated_linear_by_torch(x, weight, eps)
    ffn = _checked(x, weight).shape[0] // 2
    m, k = x.shape
    out = torch.empty((m, ffn), dtype=x.dtype, device=x.device)
    _launch(x, weight, out, None, ffn, tiles or gated_plan(m, ffn, k, multiprocessors(x.device)),
            eps)
    return out


def gated_plan(m: int, ffn: int, k: int, sms: int = 132) -> tuple[int, int, int]:
    """gated_linear's tiles: TUNED's for a measured shape, else `plan`'s for the packed
    [2F, K] weight with each program's columns halved between gate and up."""
    if (m, 2 * ffn, k, sms) in TUNED_GATED:
        return TUNED_GATED[(m, 2 * ffn, k, sms)]
    block_n, _, split = plan(m, 2 * ffn, k, sms)
    block_n = max(MIN_DOT, block_n // 2)
    return block_n, _block_k(2 * block_n, k, split), split


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


def gated_linear_by_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`gated_linear`'s contract in torch ops: the GEMM, then folded_norms' maths."""
    from engine.rollout.folded_norms import gated_by_torch

    return gated_by_torch(torch.mm(x, weight.t()), x, eps)


def _checked(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if x.stride(1) != 1:
        raise ValueError("skinny GEMM: x's rows must be contiguous")
    if weight.stride(1) != 1:
        raise ValueError("skinny GEMM: the weight's rows must be contiguous")
    return weight


def _launch(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
            residual: torch.Tensor | None, n: int, tiles: tuple[int, int, int],
            eps: float | None = None) -> None:
    """One launch over (column tiles, splits); `eps` given: GATED (n is F, the weight 2F)."""
    m, k = x.shape
    block_n, block_k, split = tiles
    scratch = _scratch(m, n, block_n, split, eps is not None, x.device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    res = residual if residual is not None else target  # unread without HAS_RES
    k_chunk = _cdiv(_cdiv(k, split), block_k) * block_k
    _kernel(interpret)[(_cdiv(n, block_n), split)](
        x, weight, target, res, *scratch, m, n, k, k_chunk, 0.0 if eps is None else eps,
        x.stride(0), weight.stride(0), target.stride(0), res.stride(0),
        BLOCK_M=max(MIN_DOT, _pow2(m)), BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
        HAS_RES=residual is not None, GATED=eps is not None,
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        # the interpreter's tl.dot reads bf16/fp16 bits as integers: fp32 operands there
        UPCAST=interpret and x.dtype != torch.float32,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)


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


def _scratch(m: int, n: int, block_n: int, split: int, gated: bool,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp32 partials [SPLIT_K, m, n or 2n], int32 arrival counters per column tile (zero
    between calls: the last split resets its tile's), fp32 row sums of squares [SPLIT_K, m])
    for one launch shape on the current stream: allocated at first use, then kept (a captured
    decode step replays them), one set per stream (two-streams' halves run at once)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (m, n, block_n, split, gated, device, stream)
    if key not in _SCRATCH:
        width = 2 * n if gated else n
        _SCRATCH[key] = (
            torch.empty((split, m, width) if split > 1 else (1,), dtype=torch.float32,
                        device=device),
            torch.zeros(_cdiv(n, block_n), dtype=torch.int32, device=device),
            torch.empty((split, m), dtype=torch.float32, device=device))
    return _SCRATCH[key]


@functools.cache
def _kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted GEMM kernel, at first use (`interpret` keys the cache, as decode_attention's
    kernels: triton.jit reads TRITON_INTERPRET when it decorates)."""
    del interpret
    from engine.rollout import skinny_gemm_triton

    return skinny_gemm_triton.skinny_gemm_kernel


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@torch.library.custom_op("ppodeck::skinny_linear", mutates_args=())
def linear_op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`linear` into a new tensor as one opaque op, for torch.compile'd code (dynamo would
    otherwise trace into the launches and the partial-buffer cache)."""
    return linear(x, weight)


@linear_op.register_fake
def _linear_fake(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))
