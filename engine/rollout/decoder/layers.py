"""The decoder's layer maths in plain functions (what the fused step and the fused prefill are
built from), the model's weights per layer (Layer) and packed side by side (Packed), and
CompiledOrEager: the `compiled` feature's torch.compile of the elementwise work around the
GEMMs (layer_head, layer_mlp)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .kernels import folded_norms

# inductor without its own CUDA graphs (ours capture the step); intermediates rounded to the
# tensor's dtype like eager (bf16 results stay near today's path: log-probs vs the trainer)
COMPILE_OPTIONS = {"emulate_precision_casts": True}


@dataclass
class Layer:
    """One transformers decoder layer's weights, read in place (loads are seen at once)."""

    in_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


Weights = tuple[torch.Tensor, ...]  # one packed weight, or the separate ones


def qkv_projection(h: torch.Tensor, weights: Weights, norms: Weights | None,
                   rope: tuple[torch.Tensor, torch.Tensor], dims: tuple[int, int, int],
                   eps: float) -> tuple[torch.Tensor, ...]:
    """h [B, hidden] -> q [B, H, d], k [B, KV, d], v [B, KV, 1, d] (normed, rotated); `weights`
    (q, k, v) or packed (qkv,), `norms` (q_norm, k_norm), packed per head, or None."""
    heads, kv, d = dims
    b = h.shape[0]
    cos, sin_signed = rope
    if len(weights) == 1:
        qkv = F.linear(h, weights[0])
        qk = qkv[:, :(heads + kv) * d].view(b, heads + kv, d)
        v = qkv[:, (heads + kv) * d:].view(b, kv, 1, d)
        if norms is not None:  # transformers' order: normalize, round, weight
            qk = F.rms_norm(qk, (d,), None, eps) * norms[0]
        qk = torch.addcmul(qk * cos, torch.roll(qk, d // 2, -1), sin_signed)
        return qk[:, :heads], qk[:, heads:], v
    q = F.linear(h, weights[0]).view(b, heads, d)
    k = F.linear(h, weights[1]).view(b, kv, d)
    v = F.linear(h, weights[2]).view(b, kv, 1, d)
    if norms is not None:
        q = F.rms_norm(q, (d,), norms[0], eps)
        k = F.rms_norm(k, (d,), norms[1], eps)
    q = torch.addcmul(q * cos, torch.roll(q, d // 2, -1), sin_signed)
    k = torch.addcmul(k * cos, torch.roll(k, d // 2, -1), sin_signed)
    return q, k, v


def gated_mlp(h: torch.Tensor, weights: Weights) -> torch.Tensor:
    """silu(gate(h)) * up(h), from (gate, up) or packed (gate_up,)."""
    if len(weights) == 1:
        gate_up = F.linear(h, weights[0])
        ffn = gate_up.shape[-1] // 2
        return F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:]
    return F.silu(F.linear(h, weights[0])) * F.linear(h, weights[1])


def layer_head(x: torch.Tensor, in_norm: torch.Tensor, weights: Weights,
               norms: Weights | None, rope: tuple[torch.Tensor, torch.Tensor],
               dims: tuple[int, int, int], eps: float,
               cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`compiled`, before attention: RMSNorm, q/k/v, q/k norms, RoPE -> q [B, H, d], k
    [B, KV, d], v [B, KV, 1, d]; with `cache` (the layer's k [B, KV, S, d], v, slot [1]) k/v
    also written there (inductor scatters them in place, no copy of the cache), None where the
    decode-attention kernel writes them itself."""
    h = F.rms_norm(x, (x.shape[-1],), in_norm, eps)
    q, k, v = qkv_projection(h, weights, norms, rope, dims, eps)
    if cache is not None:
        cache_k, cache_v, slot = cache
        cache_k.index_copy_(2, slot, k.unsqueeze(2))
        cache_v.index_copy_(2, slot, v)
    return q, k, v


def layer_mlp(x: torch.Tensor, post_norm: torch.Tensor, weights: Weights,
              eps: float) -> torch.Tensor:
    """`compiled`, between the two residual GEMMs: RMSNorm, gate/up, SiLU * up -> the down
    projection's input. The residual GEMMs run outside, in place (x += a W^T): inductor's
    addmm would first copy x into a new output, one device copy per GEMM (57 per step)."""
    h = F.rms_norm(x, (x.shape[-1],), post_norm, eps)
    return gated_mlp(h, weights)


class CompiledOrEager:
    """`fn` under torch.compile, built at its first call: static shapes (one graph per model
    shape and dtype), fullgraph (a graph break raises instead of splitting the step unseen).
    Should the compile fail (no C compiler on a CPU host, an inductor bug), `fn` runs its
    eager maths from then on and one warning says so; under CUDA graph capture nothing is
    caught (the capture's warm-ups compiled it: an error there is a real one).

    The trainer's engine.train.fused.CompiledOrEager is a different wrapper: dynamic leading
    dims marked per call, gated by PPODECK_FUSED, new shapes run eager once the recompile
    budget is spent. Here shapes are static and a failure under capture must raise."""

    def __init__(self, fn: Any) -> None:  # noqa: ANN401
        from ...model.compile_budget import (
            own_recompile_budget,
            raise_global_recompile_limit,
        )

        raise_global_recompile_limit()
        self.eager = fn
        self.compiled = torch.compile(fn, fullgraph=True, dynamic=False,
                                      options=COMPILE_OPTIONS, **own_recompile_budget())
        self.failed = False

    def __call__(self, *args: Any) -> Any:  # noqa: ANN401
        if self.failed:
            return self.eager(*args)
        try:
            return self.compiled(*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - the decoder must still generate
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise
            self.failed = True
            warnings.warn(f"the hf decoder's 'compiled': torch.compile of {self.eager.__name__} "
                          f"failed ({type(err).__name__}: {str(err)[:300]}); its eager maths "
                          f"run instead", stacklevel=2)
            return self.eager(*args)


_COMPILED: dict[str, CompiledOrEager] = {}


def compiled(fn: Any) -> CompiledOrEager:  # noqa: ANN401
    """`fn`'s CompiledOrEager, one per process (dynamo keeps its graphs across decoders)."""
    if fn.__name__ not in _COMPILED:
        _COMPILED[fn.__name__] = CompiledOrEager(fn)
    return _COMPILED[fn.__name__]


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with the first half of its last dim negated: rotate(x) * sin == roll(x, d / 2) *
    signed_sin(sin), RoPE as x * cos, a roll and an addcmul."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


@dataclass
class Packed:
    """One layer's q/k/v and gate/up weights side by side, and the q/k norm weights per head."""

    qkv: torch.Tensor  # [(H + 2 KV) d, hidden]
    gate_up: torch.Tensor  # [2 ffn, hidden]
    qk_norm: torch.Tensor | None  # [H + KV, d]

    @classmethod
    def empty_like(cls, layer: Layer) -> Packed:
        qkv = torch.empty((layer.q.shape[0] + layer.k.shape[0] + layer.v.shape[0],
                           layer.q.shape[1]), dtype=layer.q.dtype, device=layer.q.device)
        gate_up = torch.empty((2 * layer.gate.shape[0], layer.gate.shape[1]),
                              dtype=layer.gate.dtype, device=layer.gate.device)
        qk_norm = None
        if layer.q_norm is not None:
            d = layer.q_norm.shape[0]
            heads = (layer.q.shape[0] + layer.k.shape[0]) // d
            qk_norm = torch.empty((heads, d), dtype=layer.q_norm.dtype,
                                  device=layer.q_norm.device)
        return cls(qkv, gate_up, qk_norm)

    def fill(self, layer: Layer, folded: bool = False) -> None:
        """The layer's weights packed; `folded`: the RMSNorm weights folded in (folded-norms)."""
        torch.cat((layer.q, layer.k, layer.v), out=self.qkv)
        torch.cat((layer.gate, layer.up), out=self.gate_up)
        if folded:
            folded_norms.fold(self.qkv, layer.in_norm)
            folded_norms.fold(self.gate_up, layer.post_norm)
        if self.qk_norm is not None:
            q_heads = layer.q.shape[0] // layer.q_norm.shape[0]
            self.qk_norm[:q_heads].copy_(layer.q_norm.expand(q_heads, -1))
            self.qk_norm[q_heads:].copy_(layer.k_norm.expand(self.qk_norm.shape[0] - q_heads, -1))

