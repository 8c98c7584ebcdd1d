"""Fused RoPE and RMSNorm for Megatron's LOCAL layer spec (no transformer-engine).

Why: without TE, the local spec runs rotary embeddings, RMSNorm (incl. the per-head q/k norms)
and SwiGLU as chains of unfused elementwise kernels, about a third of a train step
(docs/performance.md). Here each op is
one pure function compiled with `torch.compile(fullgraph=True)`; AOTAutograd derives its
backward, so forward and backward are each one or two fused kernels (incl. the norm's weight
gradient reduction, which is slow in torch's generic kernel at the q/k norms' width of 128).

This per-op fusion is the CUDA path with PPODECK_COMPILE_LAYERS=0; by default each whole layer
is compiled instead (engine/train/layer_compile.py), the GPU no longer waiting on the host
between small kernels.

- `fused_rope`: Megatron's unfused bshd RoPE maths, bit-for-bit (see `_ROPE_OPTIONS`);
  `install_fused_rope()` puts it into Megatron's `rope_utils.fused_apply_rotary_pos_emb`
  slot, which `TransformerConfig(apply_rope_fusion=True)` then uses.
- `FusedRMSNorm`: a torch.nn.RMSNorm (what WrappedTorchNorm builds) with a compiled forward;
  `local_spec_norms(spec, normalization)` swaps it into a local layer spec.
- SwiGLU needs no code here: Megatron's own fused path (megatron/core/fusions/
  fused_bias_swiglu.py, compiled by its jit_fuser) runs with `bias_activation_fusion=True`,
  `gated_linear_unit=True`, `activation_func=F.silu`, also without a bias.

`PPODECK_FUSED=0` (engine/train/platform.py's switch for every fast path) turns all of it
off: the install/spec helpers change nothing and already-built modules run the eager maths.
If compiling fails at a first call, that op runs its eager maths from then on and one warning
names it.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..model.compile_budget import own_recompile_budget, raise_global_recompile_limit
from .platform import FUSED_ENV, fused_enabled

if TYPE_CHECKING:
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_config import TransformerConfig

__all__ = [
    "FUSED_ENV",
    "FusedRMSNorm",
    "fused_enabled",
    "fused_ops_available",
    "fused_rope",
    "install_fused_rope",
    "local_spec_norms",
]

# Round every intermediate to the tensor's dtype like eager does (inductor otherwise keeps bf16
# intermediates in fp32): with it, fused RoPE equals Megatron's eager bf16 result bit-for-bit.
_ROPE_OPTIONS = {"emulate_precision_casts": True}


class CompiledOrEager:
    """`fn` compiled on first use; its eager self when disabled or after a compile failure.

    Tensor inputs get their leading dims marked dynamic and their last dim static before each
    compiled call: one graph then serves every token count (batch, sequence, heads) while the
    reduced/rotated width stays a constant for the kernels. Graphs still differ by width, rank,
    strides (q and k views of the fused qkv), dtype and grad mode: ~6 per op in a bf16 PPO run,
    ~10 in our tests, so each op gets its own recompile budget where torch allows it (the
    global default of 8 per function, with fullgraph=True, is a hard error). Should a budget
    still run out, inputs of new shapes run eager (warned once) and the compiled graphs keep
    serving the shapes they have.
    """

    def __init__(self, what: str, fn: Callable[..., Any],
                 options: dict[str, Any] | None = None, all_dynamic: bool = False) -> None:
        self.what = what
        self.eager = fn
        self.options = options
        self.all_dynamic = all_dynamic  # dynamic=True, no per-call marking (e.g. 1-D inputs)
        self.compiled: Callable[..., Tensor] | None = None
        self.failed = False
        self.limit_warned = False

    def __call__(self, *args: Any) -> Tensor:  # noqa: ANN401
        if self.failed or not fused_enabled():
            return self.eager(*args)
        if self.compiled is None:
            raise_global_recompile_limit()
            self.compiled = torch.compile(self.eager, fullgraph=True,
                                          dynamic=True if self.all_dynamic else None,
                                          options=self.options, **own_recompile_budget())
        if not self.all_dynamic:
            for arg in args:
                if isinstance(arg, Tensor) and not isinstance(arg, torch.nn.Parameter):
                    _mark_rows_dynamic(arg)
        try:
            return self.compiled(*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - a compiler failure must not stop training
            # a genuine error (bad shapes, ...) raises again here and keeps the compiled path
            out = self.eager(*args)
            if _hit_recompile_limit(err):
                if not self.limit_warned:
                    self.limit_warned = True
                    warnings.warn(f"{self.what}: torch.compile hit dynamo's recompile limit; "
                                  f"inputs of new shapes/dtypes run the eager maths",
                                  stacklevel=3)
                return out
            self.failed = True
            warnings.warn(f"{self.what}: torch.compile failed ({type(err).__name__}: "
                          f"{str(err)[:300]}); using the eager maths from now on",
                          stacklevel=3)
            return out


def _mark_rows_dynamic(t: Tensor) -> None:
    """Leading dims dynamic (size-0/1 dims may still specialize), the last one static."""
    import torch._dynamo

    for dim in range(t.dim() - 1):
        torch._dynamo.maybe_mark_dynamic(t, dim)
    if t.dim():
        torch._dynamo.mark_static(t, t.dim() - 1)


def _hit_recompile_limit(err: BaseException) -> bool:
    from torch._dynamo.exc import FailOnRecompileLimitHit

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, FailOnRecompileLimitHit):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


# --- availability ------------------------------------------------------------------------------
def fused_ops_available() -> bool:
    """True when fusing is enabled (PPODECK_FUSED) and torch.compile works here, forward and
    backward (CPU inductor needs a C++ compiler, CUDA needs triton). Never raises."""
    return fused_enabled() and _compile_probe()


@functools.cache
def _compile_probe() -> bool:
    """Compile a tiny fwd+bwd once per process; a failure warns once and returns False."""

    def probe(x: Tensor) -> Tensor:
        return (torch.sin(x) * x).sum()

    try:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.linspace(-1.0, 1.0, 16, device=device, requires_grad=True)
        torch.compile(probe, fullgraph=True)(x).backward()
        ok = x.grad is not None and bool(torch.isfinite(x.grad).all())
        if not ok:
            raise RuntimeError("the compiled probe gave no finite gradient")
    except Exception as err:  # noqa: BLE001 - anything the compiler raises means "unavailable"
        warnings.warn(f"fused ops unavailable, torch.compile does not work here "
                      f"({type(err).__name__}: {str(err)[:300]}); the eager ops stay",
                      stacklevel=3)
        return False
    return True


# --- RoPE --------------------------------------------------------------------------------------
def _rope_math(t: Tensor, freqs: Tensor) -> Tensor:
    """Megatron's _apply_rotary_pos_emb_bshd (not interleaved, no MLA, mscale 1), op for op."""
    rot_dim = freqs.shape[-1]
    x, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    # cos/sin in fp32 from freqs, then cast to t's dtype, as Megatron does
    cos_ = torch.cos(freqs).to(t.dtype)
    sin_ = torch.sin(freqs).to(t.dtype)
    x1, x2 = torch.chunk(x, 2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat(((x * cos_) + (rotated * sin_), t_pass), dim=-1)


_ROPE = CompiledOrEager("fused RoPE", _rope_math, _ROPE_OPTIONS)


def fused_rope(t: Tensor, freqs: Tensor, interleaved: bool = False) -> Tensor:
    """RoPE on t [s, b, h, d] (any strides) with freqs [s, 1, 1, rot_dim] fp32, rot_dim <= d
    (the tail of t passes through). Megatron's bshd semantics; a contiguous result."""
    if interleaved:
        raise NotImplementedError("fused_rope supports rotary_interleaved=False only")
    # contiguous input: q and k come as differently strided views, one graph each otherwise
    return _ROPE(t.contiguous(), freqs)


def install_fused_rope() -> bool:
    """Fill Megatron's empty `rope_utils.fused_apply_rotary_pos_emb` slot with `fused_rope`.

    Returns whether ours is in the slot. Never replaces another (TE's) implementation; does
    nothing when `fused_ops_available()` is False; idempotent. Call it before building the
    TransformerConfig: with `apply_rope_fusion=True` its validation refuses an empty slot.

    Only the bshd slot is filled. With `apply_rope_fusion=True`, packed sequences (thd,
    cu_seqlens) go to `fused_apply_rotary_pos_emb_thd`, still None without TE, and Megatron's
    `apply_rotary_pos_emb` stops with "AssertionError: apply_rope_fusion is not available.";
    we never pack (our SDPA attention refuses packed_seq_params anyway). mRoPE with batch > 1
    and mscale != 1 (YaRN) make Megatron itself take its unfused path, with a warning.
    """
    from megatron.core.models.common.embeddings import rope_utils

    current = rope_utils.fused_apply_rotary_pos_emb
    if current is fused_rope:
        return True
    if current is not None or not fused_ops_available():
        return False
    rope_utils.fused_apply_rotary_pos_emb = fused_rope
    return True


# --- RMSNorm -----------------------------------------------------------------------------------
def _rms_norm_math(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """torch's fused RMSNorm numerics (aten._fused_rms_norm): all in fp32, one final cast."""
    upcast = x.to(torch.promote_types(x.dtype, torch.float32))
    rstd = torch.rsqrt(upcast.pow(2).mean(-1, keepdim=True) + eps)
    return (upcast * rstd * weight).to(x.dtype)


_RMS_NORM = CompiledOrEager("fused RMSNorm", _rms_norm_math)


class FusedRMSNorm(torch.nn.RMSNorm):
    """Drop-in for the torch.nn.RMSNorm that Megatron's WrappedTorchNorm builds.

    Same constructor keywords (build_module passes config, hidden_size, eps), same checks,
    same single `weight` parameter (ones, default dtype), same state_dict and sharded
    checkpoint keys (it is a torch.nn.RMSNorm, handled by Megatron's sharded_state_dict_default
    like the stock one); only the forward is compiled.
    """

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5,
                 persist_layer_norm: bool = False, zero_centered_gamma: bool = False,
                 normalization: str = "RMSNorm") -> None:
        _check_like_wrapped_torch_norm(config)
        super().__init__(normalized_shape=hidden_size, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        if self.weight is None or self.eps is None or len(self.normalized_shape) != 1:
            return super().forward(x)
        # 2-D rows of the normalized width: hidden states [s, b, h] and q/k heads
        # [s, b, n, d] (strided views of the fused qkv) then share one graph per width
        rows = x.reshape(-1, x.shape[-1])
        return _RMS_NORM(rows, self.weight, self.eps).reshape(x.shape)


def _check_like_wrapped_torch_norm(config: TransformerConfig) -> None:
    """WrappedTorchNorm's refusals, plus: it would build a LayerNorm for other normalizations."""
    if config.normalization != "RMSNorm":
        raise ValueError(f"FusedRMSNorm needs normalization='RMSNorm', "
                         f"got {config.normalization!r}")
    refused = {"layernorm_zero_centered_gamma": "zero_centered_gamma",
               "persist_layer_norm": "persist_layer_norm",
               "sequence_parallel": "sequence parallel",
               "memory_efficient_layer_norm": "memory_efficient_layer_norm"}
    for flag, what in refused.items():
        if getattr(config, flag, False):
            raise ValueError(f"{what} not supported by torch RMSNorm (nor FusedRMSNorm)")


def local_spec_norms(spec: ModuleSpec, normalization: str) -> ModuleSpec:
    """A copy of a local GPT layer spec with FusedRMSNorm for every stock (WrappedTorchNorm)
    RMSNorm: input_layernorm, pre_mlp_layernorm, q_layernorm, k_layernorm.

    The spec comes back unchanged for other normalizations and when `fused_ops_available()`
    is False. Identity/None/L2Norm entries stay as they are. The decoder's final_layernorm is
    not part of a layer spec (TransformerBlock builds it from its own default) and stays stock.
    """
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    if normalization != "RMSNorm" or not fused_ops_available():
        return spec
    return swap_norms(spec, (WrappedTorchNorm,), FusedRMSNorm)


def swap_norms(spec: ModuleSpec, stock: tuple[type, ...], replacement: type) -> ModuleSpec:
    """A copy of a layer spec whose input, pre-MLP and q/k norms of a `stock` class are
    `replacement` (Identity/None/L2Norm entries stay as they are)."""
    spec = copy.deepcopy(spec)
    layer = spec.submodules
    for name in ("input_layernorm", "pre_mlp_layernorm"):
        if getattr(layer, name, None) in stock:
            setattr(layer, name, replacement)
    attention = getattr(getattr(layer, "self_attention", None), "submodules", None)
    for name in ("q_layernorm", "k_layernorm"):
        if getattr(attention, name, None) in stock:
            setattr(attention, name, replacement)
    return spec
