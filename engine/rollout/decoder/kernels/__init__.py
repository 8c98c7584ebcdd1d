"""The decoder's Triton kernels, one module per feature family, each with its torch twin (the
fallback where Triton cannot run, and the tests' reference) and a `kernel_status(device)`:

  decode_attention.py         decode-attn's attention for one query token per row, and
                              folded-norms' project_heads (row scale, q/k norms, RoPE);
  decode_attention_triton.py  the @triton.jit code of both, and of folded_norms.gated (they
                              share helpers); imported at first use: Triton is optional;
  folded_norms.py             folded-norms: the weight folding and the row scale + SiLU * up;
  sampling_kernel.py          fused-sampling's and cdf-sampling's T=1 draw, and `record`;
  skinny_gemm.py              skinny-down's GEMM for few rows (bench/gpu_gemm_probe.py tunes it);
  availability.py             what every module's kernel_status asks (CUDA or the interpreter,
                              Triton importable).

They live in a sub-package beside the decoder so that the decoder's own modules (features,
generate, static_decoder, layers, sampling, state) read without the kernels' launch details.
`kernel_status(feature, device)` and `kernel_note(feature, device)` say, per Triton feature of
features.FEATURES, whether its kernels run on a device and what runs instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..features import BY_NAME
from . import decode_attention, skinny_gemm

# features.Feature.kernel -> that module's kernel_status (sampling_kernel and folded_norms
# share decode_attention's: the same Triton requirement)
_STATUS: dict[str, Callable[[torch.device], tuple[bool, str]]] = {
    "decode_attention": decode_attention.kernel_status,
    "sampling_kernel": decode_attention.kernel_status,
    "skinny_gemm": skinny_gemm.kernel_status,
}


def kernel_status(feature: str, device: torch.device) -> tuple[bool, str]:
    """(usable, why not) for a Triton feature's kernels on `device`."""
    return _STATUS[BY_NAME[feature].kernel](device)


def kernel_note(feature: str, device: torch.device) -> str:
    """What a Triton feature runs on `device`: its kernel, or (said why) its torch fallback."""
    ok, why = kernel_status(feature, device)
    if ok:
        return f"{feature}: its Triton kernel"
    return f"{feature}: {why}, so {BY_NAME[feature].fallback}"
