"""StaticDecoder: the transformers model's weights (read in place), run by a static-shape decoder.

  - prefill: one eager pass over the left-padded prompts (SDPA), which fills the static cache
    (`fused-prefill`: in the fused step's building blocks);
  - decode: one token per row per step into a preallocated [layers, B, kv_heads, S, d] cache;
    `decode_step` is capturable (no host syncs, static shapes) and DecodeGraph captures it
    once as a CUDA graph. The reference step (`_decode_ref`) attends by broadcasting matmuls
    over the KV groups (no GQA copies); the fused step (every feature in features.FEATURES
    but the sampling ones) runs one of three layer paths: folded-norms' Triton kernels, the
    `compiled` layers, or the eager fused layers (`_layers` picks).
`can_use(model)` says whether a model is one this decoder understands (Llama / Qwen3 families,
default or llama3 RoPE, no biases).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .features import REFERENCE, DecodeOptions
from .kernels import (
    decode_attention,
    folded_norms,
    kernel_note,
    kernel_status,
    skinny_gemm,
)
from .layers import (
    Layer,
    Packed,
    Weights,
    compiled,
    gated_mlp,
    layer_head,
    layer_mlp,
    qkv_projection,
    signed_sin,
)
from .sampling import advance
from .state import DecodeState, KVCache, Sampling

SUPPORTED = ("llama", "qwen3")


def can_use(model: Any) -> tuple[bool, str]:  # noqa: ANN401
    """(ok, reason) for a transformers causal LM."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type == "qwen2":
        return False, "Qwen2's q/k/v biases are not implemented"
    if model_type not in SUPPORTED:
        return False, f"model_type {model_type!r} is not one of {SUPPORTED}"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    # the decoder takes the model's own inv_freq, so a scaling that only changes the
    # frequencies (Llama 3's) is honoured; one that also scales attention is not
    if kind not in ("default", "llama3"):
        return False, f"rope_type {kind!r} is not implemented (default and llama3 are)"
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if float(getattr(rotary, "attention_scaling", 1.0)) != 1.0:
        return False, "RoPE with an attention scaling is not implemented"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return False, "biases are not implemented"
    return True, "ok"


@dataclass(frozen=True)
class _Rows:
    """The step's per-row tensors the layers read and write."""

    x: torch.Tensor  # [B, hidden] residual stream, updated in place
    pad: torch.Tensor  # [B] long
    k: torch.Tensor  # [layers, B, KV, S, d]
    v: torch.Tensor
    rope: tuple[torch.Tensor, torch.Tensor]  # cos, sin_signed [B, 1, d]
    bias: torch.Tensor | None  # [B, 1, 1, S]; None under the decode-attention kernel


class StaticDecoder:
    """The transformers model's weights, run by a static-shape decoder."""

    def __init__(self, model: Any, options: DecodeOptions = REFERENCE) -> None:  # noqa: ANN401
        ok, why = can_use(model)
        if not ok:
            raise ValueError(f"the hf decoder cannot run this model: {why}")
        config = model.config
        inner = model.model
        self.options = options
        self.eps = float(config.rms_norm_eps)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None)
                            or config.hidden_size // self.heads)
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight  # the embedding itself when tied
        self.inv_freq = inner.rotary_emb.inv_freq.float()
        self.dims = (self.heads, self.kv_heads, self.head_dim)
        self.layers = [self._layer(layer) for layer in inner.layers]
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        self.packed = [Packed.empty_like(layer) for layer in self.layers] \
            if options.packed else []
        # each Triton feature where its kernel runs here (a fallback is said on CUDA)
        self.attention_kernel = options.decode_attn and self._kernel_usable("decode-attn")
        self.sampling_kernel = options.fused_sampling and self._kernel_usable("fused-sampling")
        self.cdf_kernel = options.cdf_sampling and self.sampling_kernel \
            and self._kernel_usable("cdf-sampling")
        self.down_kernel = options.skinny_down and self._kernel_usable("skinny-down")
        # folded-norms: the norms' weights in the packed ones, read by project_heads before
        # decode-attn's kernel (only where both run; elsewhere the `compiled` layers it implies)
        self.folded = options.folded_norms and self._kernel_usable("folded-norms") \
            and self.attention_kernel
        self._graph_state: DecodeState | None = None  # the buffers the graph below points at
        self._graphs: dict[Sampling | None, DecodeGraph] = {}
        self._pool: Any = None  # the graphs' memory pool

    def _kernel_usable(self, feature: str) -> bool:
        """Whether `feature`'s Triton kernel runs here; on CUDA a fallback is said."""
        ok, _ = kernel_status(feature, self.device)
        if not ok and self.device.type == "cuda":
            warnings.warn(f"the hf decoder's {kernel_note(feature, self.device)}", stacklevel=3)
        return ok

    @staticmethod
    def _layer(layer: Any) -> Layer:  # noqa: ANN401
        attn, mlp = layer.self_attn, layer.mlp
        q_norm = getattr(attn, "q_norm", None)
        k_norm = getattr(attn, "k_norm", None)
        return Layer(layer.input_layernorm.weight, attn.q_proj.weight, attn.k_proj.weight,
                     attn.v_proj.weight, attn.o_proj.weight,
                     None if q_norm is None else q_norm.weight,
                     None if k_norm is None else k_norm.weight,
                     layer.post_attention_layernorm.weight, mlp.gate_proj.weight,
                     mlp.up_proj.weight, mlp.down_proj.weight)

    def refresh(self) -> None:
        """Copy the model's current weights into the packed ones (each call: loads are seen)."""
        for packed, layer in zip(self.packed, self.layers, strict=False):  # none unless packed
            packed.fill(layer, self.folded)

    # ---- building blocks (transformers' numerics) ----------------------------------------
    def rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [..., head_dim] for integer positions [...]."""
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin_signed) [2 length, head_dim], row i for position i - length: `rope`'s
        values, elementwise the same ops, so a row is what `rope` gives for its position;
        sin_signed is sin with its first half negated (RoPE as a roll, decode_fused)."""
        cos, sin = self.rope(torch.arange(-length, length, device=self.device))
        return cos, signed_sin(sin)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def qkv(self, layer: Layer, h: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """h [B, T, hidden] -> q [B, H, T, d], k and v [B, KV, T, d] (normed, rotated)."""
        b, t = h.shape[:2]
        q = F.linear(h, layer.q).view(b, t, self.heads, self.head_dim)
        k = F.linear(h, layer.k).view(b, t, self.kv_heads, self.head_dim)
        v = F.linear(h, layer.v).view(b, t, self.kv_heads, self.head_dim)
        if layer.q_norm is not None:
            q, k = self.rms(q, layer.q_norm), self.rms(k, layer.k_norm)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, T, d]
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin), v

    def mlp(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        h = self.rms(x, layer.post_norm)
        return F.linear(F.silu(F.linear(h, layer.gate)) * F.linear(h, layer.up), layer.down)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.rms(x, self.norm), self.lm_head)

    # ---- prefill (eager) -----------------------------------------------------------------
    def prefill(self, ids: torch.Tensor, pad: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Left-padded prompts [B, P] (pad[b] pad tokens first) -> last-position logits [B, V]."""
        if self.options.fused_prefill:
            return self._prefill_fused(ids, pad, cache)
        b, p = ids.shape
        positions = (torch.arange(p, device=ids.device)[None, :] - pad[:, None]).clamp(min=0)
        cos, sin = self.rope(positions)
        mask = self._prefill_mask(p, pad)
        group = self.heads // self.kv_heads
        x = F.embedding(ids, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self.qkv(layer, self.rms(x, layer.in_norm), cos, sin)
            cache.k[i, :, :, :p] = k
            cache.v[i, :, :, :p] = v
            attn = F.scaled_dot_product_attention(
                q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                attn_mask=mask, scale=self.head_dim ** -0.5)
            x = x + F.linear(attn.transpose(1, 2).reshape(b, p, -1), layer.o)
            x = x + self.mlp(layer, x)
        return self.logits(x[:, -1])

    def _prefill_mask(self, p: int, pad: torch.Tensor) -> torch.Tensor:
        """[B, 1, P(q), P(k)] in the model's dtype: 0 where causal and past the row's pads."""
        index = torch.arange(p, device=pad.device)
        allowed = (index[None, None, :] <= index[None, :, None]) & \
            (index[None, None, :] >= pad[:, None, None])
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=pad.device)
        return mask.masked_fill(~allowed, torch.finfo(self.dtype).min).unsqueeze(1)

    def _prefill_fused(self, ids: torch.Tensor, pad: torch.Tensor,
                       cache: KVCache) -> torch.Tensor:
        """`fused-prefill`: prefill with the fused step's blocks over all B x P tokens at once
        (F.rms_norm, packed q/k/v and gate/up when `packed`, RoPE by roll + addcmul, the
        residual adds inside the o/down GEMMs): about a third of the kernels per layer."""
        b, p = ids.shape
        heads, kv, d = self.dims
        positions = (torch.arange(p, device=ids.device)[None, :] - pad[:, None]).clamp(min=0)
        cos, sin = self.rope(positions.reshape(-1))  # [B*P, d]
        rope = (cos[:, None, :], signed_sin(sin)[:, None, :])
        mask = self._prefill_mask(p, pad)
        x = F.embedding(ids.reshape(-1), self.embed)  # [B*P, hidden]
        hidden = x.shape[-1]
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (hidden,), self._unfolded(layer.in_norm), self.eps)
            weights, norms = self._projections(i, layer)
            q, k, v = qkv_projection(h, weights, norms, rope, self.dims, self.eps)
            q = q.reshape(b, p, heads, d).transpose(1, 2)
            k = k.reshape(b, p, kv, d).transpose(1, 2)
            v = v.reshape(b, p, kv, d).transpose(1, 2)
            cache.k[i, :, :, :p] = k
            cache.v[i, :, :, :p] = v
            attn = F.scaled_dot_product_attention(
                q, k.repeat_interleave(heads // kv, dim=1),
                v.repeat_interleave(heads // kv, dim=1), attn_mask=mask, scale=d ** -0.5)
            x.addmm_(attn.transpose(1, 2).reshape(b * p, heads * d), layer.o.t())
            h = F.rms_norm(x, (hidden,), self._unfolded(layer.post_norm), self.eps)
            x.addmm_(gated_mlp(h, self._mlp_weights(i, layer)), layer.down.t())
        last = F.rms_norm(x.view(b, p, hidden)[:, -1], (hidden,), self.norm, self.eps)
        return F.linear(last, self.lm_head)

    # ---- one decode step (graph-capturable: no host syncs, static shapes) ----------------
    def decode_step(self, state: DecodeState, sampling: Sampling | None) -> None:
        """Reads state.token/index/pad, writes the new K/V and state.logits; with `sampling`
        (graph-sampling) it also samples the next token."""
        if self.options.layers_fused:
            self._decode_fused(state)
        else:
            self._decode_ref(state)
        if sampling is not None:
            advance(state, sampling, self.sampling_kernel, self.cdf_kernel)

    def _decode_ref(self, state: DecodeState) -> None:
        b = state.token.shape[0]
        positions = (state.index - state.pad).unsqueeze(1)  # [B, 1]
        cos, sin = self.rope(positions)
        key_index = state.key_index
        allowed = (key_index[None, :] <= state.index) & (key_index[None, :] >= state.pad[:, None])
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
        bias = bias.masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None, None, :]
        group = self.heads // self.kv_heads
        x = F.embedding(state.token.unsqueeze(1), self.embed)  # [B, 1, hidden]
        slot = state.index.view(1)
        for i, layer in enumerate(self.layers):
            q, k, v = self.qkv(layer, self.rms(x, layer.in_norm), cos, sin)
            state.cache.k[i].index_copy_(2, slot, k)
            state.cache.v[i].index_copy_(2, slot, v)
            # GQA without copies: [B, KV, group, d] x [B, KV, d, S] -> [B, KV, group, S]
            qg = q.view(b, self.kv_heads, group, self.head_dim)
            keys, values = state.cache.k[i], state.cache.v[i]
            scores = torch.matmul(qg, keys.transpose(-1, -2)).float()
            probs = torch.softmax(scores * self.head_dim ** -0.5 + bias, dim=-1)
            out = torch.matmul(probs.to(self.dtype), values)  # [B, KV, group, d]
            x = x + F.linear(out.reshape(b, 1, -1), layer.o)
            x = x + self.mlp(layer, x)
        state.logits.copy_(self.logits(x[:, 0]))

    def _decode_fused(self, state: DecodeState) -> None:
        """_decode_ref's maths in fewer kernels (the residual stream is [B, hidden])."""
        # rotate(x) * sin == roll(x, half) * sin_signed: RoPE is x*cos, roll, addcmul; both
        # [B, d] rows of the state's tables (rope_tables), two gathers instead of ten kernels;
        # row index + rope_shift is position index - pad (negative in the capture's warm-ups)
        rows = state.index + state.rope_shift
        cos, sin_signed = (F.embedding(rows, table) for table in state.rope)
        rope = (cos[:, None, :], sin_signed[:, None, :])  # [B, 1, d] over heads
        bias = None if self.attention_kernel else self._attention_bias(state)
        x = F.embedding(state.token, self.embed)  # [B, hidden]
        self._layers(state, _Rows(x, state.pad, state.cache.k, state.cache.v, rope, bias))
        h = F.rms_norm(x, (x.shape[-1],), self.norm, self.eps)
        torch.mm(h, self.lm_head.t(), out=state.logits)

    def _unfolded(self, norm_weight: torch.Tensor) -> torch.Tensor | None:
        """An RMSNorm's weight, None where folded-norms put it into the packed weights."""
        return None if self.folded else norm_weight

    def _layers(self, state: DecodeState, rows: _Rows) -> None:
        """Every layer in place on the residual stream rows.x: folded-norms' kernels where they
        run, else the `compiled` layers (folded-norms implies them), else the eager fused ones."""
        if self.folded:
            self._folded_layers(state, rows)
        elif self.options.compiled:
            self._compiled_layers(state, rows)
        else:
            for i, layer in enumerate(self.layers):
                self._fused_layer(state, i, layer, rows)

    def _add_down(self, x: torch.Tensor, gated: torch.Tensor, weight: torch.Tensor) -> None:
        """x += gated W_down^T in place (the residual add in the GEMM's epilogue), by
        skinny-down's kernel where it runs, else cuBLAS."""
        if self.down_kernel:
            skinny_gemm.linear(gated, weight, residual=x)
        else:
            x.addmm_(gated, weight.t())

    def _attention_bias(self, state: DecodeState) -> torch.Tensor:
        """[B, 1, 1, S]: 0 on each row's filled slots, the float min elsewhere."""
        bias = state.pad_bias.masked_fill(state.key_index > state.index,
                                          torch.finfo(torch.float32).min)
        return bias[:, None, None, :]

    def _projections(self, i: int, layer: Layer) -> tuple[Weights, Weights | None]:
        """(q/k/v weights: the packed one or the three, q/k norm weights or None)."""
        if self.packed:
            packed = self.packed[i]
            return (packed.qkv,), None if packed.qk_norm is None else (packed.qk_norm,)
        norms = None if layer.q_norm is None else (layer.q_norm, layer.k_norm)
        return (layer.q, layer.k, layer.v), norms

    def _mlp_weights(self, i: int, layer: Layer) -> Weights:
        return (self.packed[i].gate_up,) if self.packed else (layer.gate, layer.up)

    def _fused_layer(self, state: DecodeState, i: int, layer: Layer, rows: _Rows) -> None:
        """One layer in place on the residual stream rows.x [B, hidden]."""
        x = rows.x
        b, hidden = x.shape
        h = F.rms_norm(x, (hidden,), layer.in_norm, self.eps)
        weights, norms = self._projections(i, layer)
        q, k, v = qkv_projection(h, weights, norms, rows.rope, self.dims, self.eps)
        if not self.attention_kernel:
            slot = state.index.view(1)
            rows.k[i].index_copy_(2, slot, k.unsqueeze(2))
            rows.v[i].index_copy_(2, slot, v)
        out = self._attend_cache(state, i, rows, q, (k, v))
        x.addmm_(out.view(b, -1), layer.o.t())
        h = F.rms_norm(x, (hidden,), layer.post_norm, self.eps)
        self._add_down(x, gated_mlp(h, self._mlp_weights(i, layer)), layer.down)

    def _compiled_layers(self, state: DecodeState, rows: _Rows) -> None:
        """All layers with their elementwise work compiled (`compiled`), in place on rows.x;
        the residual GEMMs in place outside the compiled functions (layer_mlp says why)."""
        head, mlp = compiled(layer_head), compiled(layer_mlp)
        x = rows.x
        slot = state.index.view(1)
        for i, layer in enumerate(self.layers):
            weights, norms = self._projections(i, layer)
            cache = None if self.attention_kernel else (rows.k[i], rows.v[i], slot)
            q, k, v = head(x, layer.in_norm, weights, norms, rows.rope, self.dims, self.eps,
                           cache)
            out = self._attend_cache(state, i, rows, q, (k, v))
            x.addmm_(out.view(x.shape[0], -1), layer.o.t())
            gated = mlp(x, layer.post_norm, self._mlp_weights(i, layer), self.eps)
            self._add_down(x, gated, layer.down)

    def _folded_layers(self, state: DecodeState, rows: _Rows) -> None:
        """folded-norms: per layer the packed q/k/v GEMM on the residual stream itself (the
        input norm's weight folded in), project_heads (its row scale, q/k norms, RoPE),
        decode-attn's kernel, the o GEMM in place, the gate/up GEMM on the residual stream,
        folded_norms.gated (the row scale, SiLU * up in one kernel) and the down GEMM."""
        x = rows.x
        scale = self.head_dim ** -0.5
        for i, layer in enumerate(self.layers):
            packed = self.packed[i]
            qkv = F.linear(x, packed.qkv)
            q, k, v = decode_attention.project_heads(qkv, rows.rope, packed.qk_norm, self.eps,
                                                     self.heads, self.kv_heads, x=x)
            out = decode_attention.attend(q, rows.k[i], rows.v[i], rows.pad, state.index,
                                          scale, new_kv=(k, v))
            x.addmm_(out.view(x.shape[0], -1), layer.o.t())
            gated = folded_norms.gated(F.linear(x, packed.gate_up), x, self.eps)
            self._add_down(x, gated, layer.down)

    def _attend_cache(self, state: DecodeState, i: int, rows: _Rows, q: torch.Tensor,
                      new_kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """q [B, H, d] over layer i's cache -> [B, KV, group, d]. This step's k [B, KV, d] and
        v [B, KV, 1, d] (`new_kv`) are in slot state.index already, unless decode-attn's
        kernel runs: then it writes them there itself (and bounds itself by pad and index)."""
        b, d = q.shape[0], self.head_dim
        keys, values = rows.k[i], rows.v[i]
        if self.attention_kernel:
            k, v = new_kv
            out = decode_attention.attend(q, keys, values, rows.pad, state.index, d ** -0.5,
                                          new_kv=(k, v.view(k.shape)))
            return out.view(b, self.kv_heads, self.heads // self.kv_heads, d)
        qg = q.reshape(b, self.kv_heads, self.heads // self.kv_heads, d)
        scores = torch.matmul(qg, keys.transpose(-1, -2))
        probs = torch.softmax(torch.add(rows.bias, scores, alpha=d ** -0.5), dim=-1)
        return torch.matmul(probs.to(self.dtype), values)  # [B, KV, group, d]

    # ---- graphs --------------------------------------------------------------------------
    def graph_for(self, state: DecodeState, sampling: Sampling | None) -> DecodeGraph | None:
        """The captured decode step for these buffers and in-graph sampling (CUDA only; None
        elsewhere)."""
        if self.device.type != "cuda":
            return None
        if self._graph_state is not state:  # one shape at a time: caches are large
            self._graphs, self._graph_state = {}, state
            self._pool = torch.cuda.graph_pool_handle()
        graph = self._graphs.get(sampling)
        if graph is None:
            graph = DecodeGraph(self, state, sampling, self._pool)
            self._graphs[sampling] = graph
        return graph


class DecodeGraph:
    def __init__(self, decoder: StaticDecoder, state: DecodeState, sampling: Sampling | None,
                 pool: Any) -> None:  # noqa: ANN401
        self.state = state
        # warm up on a side stream (allocator and lazy inits), then capture; the warm-ups'
        # writes (slot 0, output column 0) are overwritten before any read
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                state.index.zero_()
                state.step.zero_()
                decoder.decode_step(state, sampling)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        if sampling is not None:  # its draws advance the generator's offset at each replay
            self.graph.register_generator_state(state.generator)
        # the warm-ups compiled `compiled`'s functions: a recompile under capture must raise
        with torch.compiler.set_stance("fail_on_recompile"), \
                torch.cuda.graph(self.graph, pool=pool):
            decoder.decode_step(state, sampling)

    def replay(self) -> None:
        self.graph.replay()
