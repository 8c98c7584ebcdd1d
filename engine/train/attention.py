"""Fused core attention for Megatron's LOCAL layer spec, over torch's SDPA.

Megatron's stock `DotProductAttention` (the local spec's `core_attention`) materializes the full
[b, np, sq, sk] score matrix, runs a separate softmax and a second bmm: at 8 x 1024 tokens on
the Qwen3-0.6B shape that is most of the step's memory and a large share of its time. Without
transformer-engine (absent on our GPU machine, and it cannot be built there), this module
stands in: same constructor signature, same input/output layout, but one
`torch.nn.functional.scaled_dot_product_attention` call, which on CUDA with bf16/fp16 and no
explicit mask dispatches to FlashAttention (causal, GQA without copies via `enable_gqa`).

Inputs, as Megatron's `Attention` hands them over: query [sq, b, np, hn], key/value
[sk, b, ng, hn] (np/ng = heads/query groups of THIS tensor-parallel rank). Output [sq, b, np*hn].

Context parallelism (CP > 1): each rank holds two chunks of every row; keys and values are
all-gathered over the CP group and each chunk attends causally to the global prefix
(engine/train/context_parallel.py).

Mask semantics follow Megatron: `attention_mask is None` with a causal mask type means causal;
a given boolean mask is True where attention is NOT allowed (Megatron's convention), shape
broadcastable to [b, np, sq, sk].

`PPODECK_ATTENTION=unfused` makes `layer_spec()` in engine/train/model.py return Megatron's stock
local spec instead (for side-by-side benchmarks and as an escape hatch).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import divide
from torch import Tensor

ATTENTION_ENV = "PPODECK_ATTENTION"
_HALF = (torch.float16, torch.bfloat16)


def attention_choice() -> str:
    """"sdpa" (ours, default) or "unfused" (Megatron's stock DotProductAttention)."""
    choice = os.environ.get(ATTENTION_ENV, "sdpa").strip().lower() or "sdpa"
    if choice not in ("sdpa", "unfused"):
        raise ValueError(f"{ATTENTION_ENV}={choice!r}: expected 'sdpa' or 'unfused'")
    return choice


class SDPADotProductAttention(MegatronModule):
    """Drop-in for megatron.core.transformer.dot_product_attention.DotProductAttention."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
    ) -> None:
        super().__init__(config=config)
        _check_supported(config, layer_number)
        self.config: TransformerConfig = config
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type
        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"])
        self.pg_collection = pg_collection
        self.tp_group = pg_collection.tp
        # context parallelism: keys/values all-gathered over this group (context_parallel.py)
        self.cp_group = _cp_group(pg_collection) if config.context_parallel_size > 1 else None
        tp_size = pg_collection.tp.size()
        projection = config.kv_channels * config.num_attention_heads
        self.hidden_size_per_partition = divide(projection, tp_size)
        self.hidden_size_per_attention_head = divide(projection, config.num_attention_heads)
        self.num_attention_heads_per_partition = divide(config.num_attention_heads, tp_size)
        self.num_query_groups_per_partition = divide(config.num_query_groups, tp_size)
        # Megatron's apply_query_key_layer_scaling divides by layer_number and multiplies back
        # inside the softmax: the net scale is the plain one, which is what SDPA gets.
        self.softmax_scale = (softmax_scale if softmax_scale is not None
                              else 1.0 / math.sqrt(self.hidden_size_per_attention_head))
        self.dropout_p = float(config.attention_dropout if attention_dropout is None
                               else attention_dropout)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: Tensor | None = None,
        packed_seq_params: Any = None,  # noqa: ANN401
    ) -> Tensor:
        if packed_seq_params is not None:
            raise NotImplementedError("packed sequences (thd) need transformer-engine attention")
        if attention_bias is not None:
            raise NotImplementedError("attention_bias is not supported by SDPA core attention")
        sq, batch = query.shape[0], query.shape[1]
        # [s, b, h, d] -> [b, h, s, d]: views only, the last dim stays contiguous for flash
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        if self.cp_group is not None:
            return self._context_parallel(q, k, v, attention_mask, sq, batch)
        mask, causal = self._sdpa_mask(attention_mask, attn_mask_type, q)
        gqa = self.num_attention_heads_per_partition // self.num_query_groups_per_partition
        use_native_gqa = gqa > 1 and _flash_can_take_gqa(q, mask)
        if gqa > 1 and not use_native_gqa:
            # only the flash backend honours enable_gqa; elsewhere it falls back to the math
            # kernel, so give efficient/math kernels expanded heads instead
            k = k.repeat_interleave(gqa, dim=1)
            v = v.repeat_interleave(gqa, dim=1)
        dropout_p = self.dropout_p if self.training else 0.0
        with _dropout_rng(self.config, dropout_p):
            context = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal,
                scale=self.softmax_scale, **({"enable_gqa": True} if use_native_gqa else {}))
        # [b, h, s, d] -> [s, b, h*d]
        return context.permute(2, 0, 1, 3).reshape(sq, batch, self.hidden_size_per_partition)

    def _context_parallel(self, q: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor | None,
                          sq: int, batch: int) -> Tensor:
        from .context_parallel import cp_attention

        if attention_mask is not None:
            raise NotImplementedError("context parallelism runs causal attention only (right-"
                                      "padded rows, attention_mask None)")
        dropout_p = self.dropout_p if self.training else 0.0
        with _dropout_rng(self.config, dropout_p):
            context = cp_attention(q, k, v, self.cp_group, self.softmax_scale, dropout_p)
        return context.permute(2, 0, 1, 3).reshape(sq, batch, self.hidden_size_per_partition)

    def _sdpa_mask(self, attention_mask: Tensor | None, attn_mask_type: AttnMaskType | None,
                   q: Tensor) -> tuple[Tensor | None, bool]:
        """(attn_mask for SDPA, is_causal). Megatron masks are True where attention is blocked."""
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        if attention_mask is None:
            # Megatron builds the causal mask itself when none is given (only for sq > 1).
            # An `if`, not an expression: under torch.compile with a symbolic length, `if`
            # becomes a guard while `bool(sq > 1)` stays symbolic, and SDPA needs a real bool
            # (else a graph break in every compiled layer)
            causal = mask_type == AttnMaskType.causal
            if q.shape[2] <= 1:
                causal = False
            return None, causal
        if attention_mask.dtype != torch.bool:
            raise TypeError(f"attention_mask must be boolean, got {attention_mask.dtype}")
        # additive, not boolean: a fully masked (padding) row then stays finite instead of NaN,
        # as in Megatron's masked_fill softmax
        additive = torch.zeros(attention_mask.shape, dtype=q.dtype, device=q.device)
        return additive.masked_fill(attention_mask, torch.finfo(q.dtype).min), False

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (),
                           metadata: dict | None = None) -> dict:
        return {}  # no parameters (vanilla softmax only)


def _check_supported(config: TransformerConfig, layer_number: int) -> None:
    """Refuse configurations whose semantics SDPA would silently change."""
    from megatron.core.transformer.utils import is_layer_window_attention

    if getattr(config, "softmax_type", "vanilla") != "vanilla":
        raise ValueError(f"softmax_type={config.softmax_type!r} is not supported by SDPA "
                         f"attention; set {ATTENTION_ENV}=unfused")
    if is_layer_window_attention(config.window_size, config.window_attn_skip_freq,
                                 layer_number):
        raise ValueError(f"sliding-window attention is not supported; set {ATTENTION_ENV}=unfused")


def _cp_group(pg_collection: ProcessGroupCollection):  # noqa: ANN202
    group = getattr(pg_collection, "cp", None)
    if group is None:
        from megatron.core import parallel_state as ps

        group = ps.get_context_parallel_group()
    return group


def _flash_can_take_gqa(q: Tensor, mask: Tensor | None) -> bool:
    return mask is None and q.is_cuda and q.dtype in _HALF


def _dropout_rng(config: TransformerConfig, dropout_p: float):  # noqa: ANN202
    """Megatron forks its model-parallel RNG for attention dropout; do the same when it is on."""
    import contextlib

    if dropout_p == 0.0 or config.sequence_parallel:
        return contextlib.nullcontext()
    return tensor_parallel.get_cuda_rng_tracker().fork()


def local_spec_with_sdpa(shape: Any):  # noqa: ANN201, ANN401
    """Megatron's local GPT layer spec with core_attention = SDPADotProductAttention.

    `shape` is an engine.model.shape.ModelShape (qk_layernorm and normalization are read).
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(qk_layernorm=shape.qk_layernorm,
                                    normalization=shape.normalization)
    spec.submodules.self_attention.submodules.core_attention = SDPADotProductAttention
    return spec
