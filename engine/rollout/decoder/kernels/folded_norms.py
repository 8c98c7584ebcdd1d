"""RMSNorm weights folded into the packed projections (the decoder's `folded-norms`).

Why: at batch 64 the decode step's kernels are at their latency floors (issue 20's profile,
docs/performance.md), so what is left to win is kernels. Each layer ran
two RMSNorm kernels of its own, one before the packed q/k/v GEMM and one before gate/up.
RMSNorm(x) W^T = diag(r) x (W diag(g))^T, with r = rsqrt(mean(x^2) + eps) per row and g the
norm's weight: the weight goes into the packed weight once per refresh (rounded to its dtype),
the GEMM reads the residual stream itself, and the row scale r is applied by the kernel that
already reads the GEMM's output:
  - before attention, decode_attention.project_heads (ROW_SCALE);
  - before the down projection, `gated` here: one program per (row, column block) takes r from
    the row of x, then SiLU(gate * r) * (up * r) (each product rounded to the dtype, as eager).
Rounding differs from eager's order (the weight rounded into W, the row scale after the GEMM):
the decoder's log-probs against transformers are the bench's to report.

`gated` runs the kernel; `gated_by_torch` is the same maths in torch ops (the tests' reference);
`kernel_status` is decode_attention's (the same Triton requirement).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn.functional as F

BLOCK_F = 1024  # gate/up columns per program
NUM_WARPS = 4


def fold(packed: torch.Tensor, norm_weight: torch.Tensor) -> None:
    """W <- W diag(g) in place: packed [N, hidden], norm_weight [hidden]."""
    packed.mul_(norm_weight)


@functools.cache
def _kernel(interpret: bool) -> Any:  # noqa: ANN401
    """The jitted kernel, at first use (`interpret` keys the cache, as sampling_kernel's); it
    lives beside decode_attention's kernels, whose row-scale and rounding helpers it shares."""
    del interpret
    from . import decode_attention_triton as kernels

    return kernels.scaled_gated_kernel


def gated(gate_up: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """SiLU(gate * r) * (up * r) -> [B, ffn]: gate_up [B, 2 ffn] the GEMM of the residual
    stream x [B, hidden] (unit last strides) with the folded gate/up weight, r x's RMSNorm
    row scale. One launch: capturable, no host sync."""
    b, width = gate_up.shape
    ffn, hidden = width // 2, x.shape[-1]
    if gate_up.stride(-1) != 1 or x.stride(-1) != 1:
        raise ValueError("gate_up and x need a unit last stride")
    out = torch.empty((b, ffn), dtype=gate_up.dtype, device=gate_up.device)
    kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
    kernel[(b, -(-ffn // BLOCK_F))](
        gate_up, x, out, eps, gate_up.stride(0), x.stride(0), out.stride(0), FFN=ffn,
        HIDDEN=hidden, BLOCK_X=1 << max(0, hidden - 1).bit_length(), BLOCK_F=BLOCK_F,
        num_warps=NUM_WARPS)
    return out


def gated_by_torch(gate_up: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """`gated`'s maths in torch ops, rounded as the kernel rounds."""
    scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    scaled = (gate_up.float() * scale).to(gate_up.dtype)
    ffn = gate_up.shape[-1] // 2
    return F.silu(scaled[:, :ffn]) * scaled[:, ffn:]
