"""Fast batched sampling for the hf rollout backend: static KV cache + one CUDA graph per step.

transformers' `generate` spends most of a decode step in Python and kernel launches (about
2.3k tokens/s for the Qwen3-0.6B shape at batch 64 on an H200). This module runs the SAME
weights (the parameters of the transformers Llama/Qwen3 model, read in place: a
`load_state_dict` into that model is seen here at once, no copy, no re-capture) through a
hand-written decoder:
  - prefill: one eager pass over the left-padded prompts (SDPA), which fills a static cache;
  - decode: one token per row per step into a preallocated [layers, B, kv_heads, S, d] cache,
    attention by broadcasting matmuls over the KV groups (no GQA copies), and on CUDA the whole
    step (28 layers) is captured once as a CUDA graph and replayed;
  - sampling with transformers' semantics: temperature, then top-k, then top-p (min 1 token
    kept); log-probs are log-softmax(logits / T) of the chosen token before filtering, exactly
    what hf_backend.chosen_log_probs computes.
Rows keep generating after their EOS (static shapes); callers cut with hf_backend.cut_at_eos.
The loop stops early once every row has produced EOS.

Positions follow transformers for left padding: position = index - number of pad tokens.

Decoder variants (issue 20: 6 ms per step at batch 64 on the H200, 0.25 ms of weight reads),
each a switch of `DecodeOptions`, named by `+`-joined features (PPODECK_DECODE=<name> in the
hf backend; bench/gpu_decode_profile.py measures them side by side):
  ref             the reference path (DEFAULT_VARIANT; the hf backend's default on CUDA is
                  BACKEND_VARIANT);
  fused           fewer kernels per layer: fused RMSNorm, RoPE in 3 ops, the score scale and
                  mask in one op, residual adds inside the o/down GEMMs, logits written in place;
  packed          `fused` with q/k/v and gate/up each one GEMM over weights packed side by
                  side (copied from the model's parameters at the start of every call, so loaded
                  weights are still seen; about 0.6 GB more for the 0.6B shape), and the q/k
                  norms and RoPE done once over q and k together;
  sdpa            `fused` with each layer's attention one scaled_dot_product_attention call
                  (memory-efficient kernel with the mask as a bias; a KV group's query heads
                  are its query rows, so no GQA copies) instead of matmul, scale+mask, softmax,
                  cast, matmul;
  decode-attn     `fused` with each layer's attention one Triton kernel made for a single query
                  token (engine/rollout/decode_attention.py: one program per row and KV head,
                  the group's query heads one tile, fp32 online softmax, only the row's filled
                  slots [pad, index] read, so no mask and no buckets; the step's own k/v
                  come in registers and the kernel writes them into the cache, so no
                  cache-write kernels: 306 kernels per step, the wall time as before); where
                  Triton cannot run (no CUDA, not importable) the same maths as batched
                  matmuls, said in a warning and in the PPODECK_DECODE note. Not with `sdpa`;
  decode-attn-split  decode-attn by split-K (flash-decoding): each row's filled slots in
                  equal chunks, one program each (rows x KV heads x splits, the split count
                  from static shapes: decode_attention.split_count), then a small kernel
                  merging the chunks exactly (log-sum-exp); more programs in flight for the
                  cache's bandwidth. Implies decode-attn (its name joins the variant's); no
                  Triton: the same batched matmuls, said the same way;
  window          attention over the filled part of the cache only, in WINDOW-slot buckets (one
                  graph per bucket) instead of the whole cache every step;
  graph-sampling  sampling, log-prob, next token, cache index and EOS flag inside the captured
                  graph (Gumbel-max with exponential noise from a generator registered with the
                  graph: the same draws as torch.multinomial, without its two host syncs), so a
                  step is one replay and no per-step host work;
  fused-sampling  graph-sampling's draw at T=1 without filters in two Triton kernels
                  (engine/rollout/sampling_kernel.py: argmax(logit - log q) with the same noise,
                  the log-prob from an online max and sum) instead of an fp32 softmax and
                  log-softmax over the vocabulary; other sampling settings, or no Triton (said),
                  as graph-sampling. Needs graph-sampling;
  fused-prefill   the prefill (one eager pass over the prompts) in the fused step's building
                  blocks over all B x P tokens at once (packed weights when `packed`): about
                  a third of the reference prefill's kernels per layer;
  compiled        `fused` with each layer's elementwise work compiled by torch.compile
                  (inductor, static shapes, no inductor cudagraphs: our graph captures the
                  compiled kernels): RMSNorm, q/k norms, RoPE and (unless decode-attn writes
                  them) the k/v cache writes before attention in one function (the writes
                  scattered in place), RMSNorm and
                  SiLU*up between the residual GEMMs in another. The GEMMs stay cuBLAS, the
                  o/down ones in place on the residual stream outside the compiled functions
                  (inside, inductor's addmm copied the stream into a new output first: 57
                  device copies per step); attention stays eager (its shape follows the window
                  bucket), so the two functions compile once per model shape and serve every
                  layer and bucket. The compile happens in the capture's warm-up steps (never
                  under capture: a recompile there raises).
  skinny-gemm     `fused` with the decode step's projections (q/k/v, o, gate/up, down, the lm
                  head) by a Triton GEMM made for few rows (engine/rollout/skinny_gemm.py:
                  narrow column tiles and deterministic split-K, about 2-4 programs per SM
                  streaming the weight once; the o/down residuals and the logits written in
                  its epilogue); the prefill keeps cuBLAS. Where Triton cannot run, cuBLAS
                  (said, as decode-attn's fallback is);
  two-streams     the fused layers over two halves of the batch's rows, each half on a CUDA
                  stream of its own (forked from the step's stream and joined back before the
                  final norm, the lm head and sampling): in the captured step two parallel
                  branches, so one half's GEMMs and small kernels, which leave most SMs idle at
                  batch 64, overlap the other half's. Each half reads the weights (the second
                  mostly from L2). Off CUDA the halves run one after the other (the same maths);
  four-streams    two-streams with four row groups;
  attn-rope       decode-attn's one-pass kernel starts from the raw packed q/k/v projection:
                  each program does its heads' q/k RMSNorm and RoPE (rounded as the compiled
                  head rounds) before attending (decode_attention.attend_projection), so no
                  norm/RoPE kernel of its own; slower on the H200 (31.7k tok/s against 33.5k):
                  the longer prologue delays every program's cache stream. Needs packed and
                  decode-attn (one-pass);
  folded-norms    both RMSNorm weights of a layer folded into the packed q/k/v and gate/up
                  weights at each refresh (engine/rollout/folded_norms.py): the GEMMs read the
                  residual stream itself, and the row scales rsqrt(mean(x^2) + eps) are applied
                  by the kernels that read the GEMMs' outputs: project_heads (row scale, q/k
                  norms, RoPE; one program per row and head) before decode-attn's, and
                  folded_norms.gated (row scale, SiLU * up) before the down GEMM. Eight kernels
                  per layer instead of ten, cuBLAS's split-K sum included (250 per step). The
                  rounding order differs from eager's (the weight rounded into W); the
                  prefill uses the folded weights too. Needs packed and decode-attn
                  (one-pass); with attn-rope its kernel applies the row scale;
  pdl             folded-norms' project_heads lets decode-attn's kernel launch before it ends
                  (programmatic dependent launch: the attention kernel waits for its writes
                  with griddepcontrol); CUDA sm_90+ only. No measurable gain on the H200;
  skinny-down     the down projection alone by skinny-gemm's kernel, at its measured tiling
                  (skinny_gemm.TUNED); the other GEMMs stay cuBLAS. 1.4-2.2% faster on the
                  H200. Its log-prob max|diff| vs transformers' bf16 forward is 0.047 where
                  cuBLAS's is 0.031, a step of bf16 rounding of a logit either way: against
                  the same model in fp32 both are as close as transformers' own bf16 forward
                  (0.031 and 0.030 against its 0.036-0.039, means 7.7e-3 against 7.7e-3);
  cdf-sampling    fused-sampling's T=1 draw by inverse CDF (sampling_kernel.sample_cdf): one
                  uniform per row from the same generator instead of a [B, vocab] fp32
                  Exp(1) noise tensor, the token the first whose running softmax mass passes
                  it. The same distribution as torch.multinomial, not its draws (`sampled
                  tokens = ref` no longer holds). Needs fused-sampling;
e.g. `fused+window+graph-sampling`, `packed+sdpa+window+graph-sampling+compiled`,
`packed+decode-attn+graph-sampling+compiled` (one graph: the kernel needs no window buckets),
BACKEND_VARIANT (the hf backend's CUDA default),
`packed+decode-attn+decode-attn-split+graph-sampling+fused-sampling+fused-prefill+compiled`.

`fast_generate(model, rows, ...)` is the entry point; `can_use(model)` says whether a model is
one this decoder understands (Llama / Qwen3 families, default RoPE).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ppodeck.engine.rollout import decode_attention, folded_norms, sampling_kernel, skinny_gemm

SUPPORTED = ("llama", "qwen3")
EARLY_STOP_EVERY = 16  # steps between EOS checks (each is a host sync)
CACHE_ROUND = 64  # KV-cache length granularity (slots past the current step are masked)
WINDOW = 64  # attended-prefix bucket of the `window` variant
VARIANT_ENV = "PPODECK_DECODE"
FEATURES = ("fused", "packed", "sdpa", "decode-attn", "decode-attn-split", "window",
            "graph-sampling", "fused-sampling", "fused-prefill", "compiled", "skinny-gemm",
            "two-streams", "four-streams", "attn-rope", "folded-norms", "pdl", "skinny-down",
            "cdf-sampling")
ROW_STREAMS = {"two-streams": 2, "four-streams": 4}  # feature -> row groups, one stream each
# inductor without its own CUDA graphs (ours capture the step); intermediates rounded to the
# tensor's dtype like eager (bf16 results stay near today's path: log-probs vs the trainer)
COMPILE_OPTIONS = {"emulate_precision_casts": True}


@dataclass(frozen=True)
class DecodeOptions:
    """Which decoder variant runs (module docstring); all off is today's path."""

    fused: bool = False
    packed: bool = False  # implies the fused layer code
    sdpa: bool = False  # implies the fused layer code
    decode_attn: bool = False  # implies the fused layer code; not with sdpa
    decode_attn_split: bool = False  # decode-attn by split-K: sets decode_attn
    window: int = 0  # bucket of the attended cache prefix; 0 = the whole cache every step
    sample_in_graph: bool = False
    fused_sampling: bool = False  # graph-sampling's T=1 draw in Triton kernels
    fused_prefill: bool = False  # the prefill in the fused step's building blocks
    compiled: bool = False  # implies the fused layer code
    skinny_gemm: bool = False  # the decode step's projections by Triton; implies fused code
    row_streams: int = 1  # two-streams/four-streams: row groups decoded side by side
    attn_rope: bool = False  # decode-attn's kernel from the raw q/k/v projection
    folded_norms: bool = False  # RMSNorm weights in the packed weights
    pdl: bool = False  # folded-norms' decode-attn launched programmatically dependent
    skinny_down: bool = False  # the down projection alone by skinny-gemm; implies fused code
    cdf_sampling: bool = False  # fused-sampling's draw by inverse CDF from one uniform per row

    def __post_init__(self) -> None:
        if self.row_streams not in (1, *ROW_STREAMS.values()):
            raise ValueError(f"row_streams must be 1 or one of {sorted(ROW_STREAMS.values())}, "
                             f"got {self.row_streams}")
        if self.decode_attn_split:  # a way of running decode-attn: named with it
            object.__setattr__(self, "decode_attn", True)
        if self.sdpa and self.decode_attn:
            raise ValueError("'sdpa' and 'decode-attn' are two attention kernels: name one")
        if self.fused_sampling and not self.sample_in_graph:
            raise ValueError("'fused-sampling' is graph-sampling's draw: name graph-sampling too")
        if self.cdf_sampling and not self.fused_sampling:
            raise ValueError("'cdf-sampling' is a way of drawing fused-sampling's tokens: name "
                             "fused-sampling (and graph-sampling) too")
        one_pass_packed = self.packed and self.decode_attn and not self.decode_attn_split
        if self.attn_rope and not one_pass_packed:
            raise ValueError("'attn-rope' is decode-attn's one-pass kernel on the packed "
                             "projection: name packed and decode-attn (not decode-attn-split)")
        if self.folded_norms and not one_pass_packed:
            raise ValueError("'folded-norms' folds into the packed weights for decode-attn's "
                             "one-pass kernel: name packed and decode-attn (not "
                             "decode-attn-split)")
        if self.pdl and not (self.folded_norms and not self.attn_rope):
            raise ValueError("'pdl' overlaps folded-norms' project_heads with decode-attn's "
                             "launch: name folded-norms (without attn-rope)")

    @property
    def layers_fused(self) -> bool:
        """Whether the layers run the fused code (every feature but window/graph-sampling)."""
        return self.fused or self.packed or self.sdpa or self.decode_attn or self.compiled \
            or self.skinny_gemm or self.skinny_down or self.row_streams > 1

    @property
    def name(self) -> str:
        flags = (self.fused, self.packed, self.sdpa, self.decode_attn, self.decode_attn_split,
                 self.window > 0, self.sample_in_graph, self.fused_sampling,
                 self.fused_prefill, self.compiled, self.skinny_gemm,
                 self.row_streams == ROW_STREAMS["two-streams"],
                 self.row_streams == ROW_STREAMS["four-streams"], self.attn_rope,
                 self.folded_norms, self.pdl, self.skinny_down, self.cdf_sampling)
        parts = [f for f, on in zip(FEATURES, flags, strict=True) if on]
        return "+".join(parts) or "ref"


REFERENCE = DecodeOptions()
# the variant used when `options` is not passed: the reference path (tests, CPU callers)
DEFAULT_VARIANT = "ref"
# what the hf backend decodes with on CUDA when PPODECK_DECODE is unset. H200, Qwen3-0.6B
# shape, batch 64 x 256 tokens (bench/gpu_decode_profile.py; the README has the figures and
# the command): folded-norms gained 8% over the variant before it (1.65-1.70 ms per step
# against 1.75-1.84), then skinny-down and cdf-sampling took it under 1.6 ms per step, with
# log-probs as close to the fp32 model's as transformers' own bf16 forward is. Without Triton
# its kernels run as torch ops and the norms stay unfolded, said in a warning.
BACKEND_VARIANT = ("packed+decode-attn+graph-sampling+fused-sampling+fused-prefill+compiled"
                   "+folded-norms+skinny-down+cdf-sampling")


def parse_variant(name: str) -> DecodeOptions:
    """'ref' or a '+'-joined subset of FEATURES -> DecodeOptions (ValueError otherwise)."""
    text = name.strip().lower()
    if text in ("", "ref"):
        return REFERENCE
    parts = [p.strip() for p in text.split("+")]
    unknown = [p for p in parts if p not in FEATURES]
    if unknown:
        raise ValueError(f"unknown decoder feature(s) {unknown}: use 'ref' or a '+'-joined "
                         f"subset of {', '.join(FEATURES)}")
    return DecodeOptions(fused="fused" in parts, packed="packed" in parts, sdpa="sdpa" in parts,
                         decode_attn="decode-attn" in parts,
                         decode_attn_split="decode-attn-split" in parts,
                         window=WINDOW if "window" in parts else 0,
                         sample_in_graph="graph-sampling" in parts,
                         fused_sampling="fused-sampling" in parts,
                         fused_prefill="fused-prefill" in parts,
                         compiled="compiled" in parts,
                         skinny_gemm="skinny-gemm" in parts,
                         row_streams=_named_row_streams(parts),
                         attn_rope="attn-rope" in parts, folded_norms="folded-norms" in parts,
                         pdl="pdl" in parts, skinny_down="skinny-down" in parts,
                         cdf_sampling="cdf-sampling" in parts)


def _named_row_streams(parts: list[str]) -> int:
    named = [ROW_STREAMS[p] for p in parts if p in ROW_STREAMS]
    if len(named) > 1:
        raise ValueError("'two-streams' and 'four-streams' are two row splits: name one")
    return named[0] if named else 1


def default_options() -> DecodeOptions:
    return parse_variant(DEFAULT_VARIANT)


def options_from_env() -> tuple[DecodeOptions, str | None]:
    """(options, note): the PPODECK_DECODE variant, with a note to show whenever it is set;
    unset, BACKEND_VARIANT, with a note only where a Triton kernel of it cannot run."""
    raw = os.environ.get(VARIANT_ENV)
    if raw is None:
        return parse_variant(BACKEND_VARIANT), _fallback_note(parse_variant(BACKEND_VARIANT))
    try:
        options = parse_variant(raw)
    except ValueError as err:
        return parse_variant(BACKEND_VARIANT), (f"{VARIANT_ENV}={raw!r} ignored ({err}); "
                                                f"decoding with '{BACKEND_VARIANT}'")
    note = f"{VARIANT_ENV}={raw!r}: the hf decoder runs variant '{options.name}'"
    for feature in kernel_features(options):
        note += "; " + kernel_note(feature, torch.device("cuda"))
    return options, note


def _fallback_note(options: DecodeOptions) -> str | None:
    cuda = torch.device("cuda")
    fallbacks = [kernel_note(feature, cuda) for feature in kernel_features(options)
                 if not KERNEL_STATUS[feature](cuda)[0]]
    if not fallbacks:
        return None
    return f"the hf decoder's default variant '{options.name}': " + "; ".join(fallbacks)


# the features that run Triton kernels: what runs instead where they cannot
KERNEL_FALLBACKS = {"decode-attn": "attention runs as batched matmuls (the same maths)",
                    "decode-attn-split": "attention runs as batched matmuls (the same maths)",
                    "fused-sampling": "graph-sampling samples with torch ops (the same draws)",
                    "skinny-gemm": "the projections run as cuBLAS GEMMs (the same maths)",
                    "attn-rope": "the q/k norms and RoPE run before attention (the same maths)",
                    "folded-norms": "the RMSNorm weights stay in their own kernels (the same "
                                    "maths)",
                    "pdl": "the kernels launch one after the other (the same maths)",
                    "skinny-down": "the down projection runs as a cuBLAS GEMM (the same "
                                   "maths)",
                    "cdf-sampling": "graph-sampling samples with torch ops (Gumbel-max draws "
                                    "from the same distribution)"}
# each feature's kernel_status(device) -> (usable, why not); the split kernels and
# sampling_kernel's share decode_attention's
KERNEL_STATUS: dict[str, Callable[[torch.device], tuple[bool, str]]] = {
    "decode-attn": decode_attention.kernel_status,
    "decode-attn-split": decode_attention.kernel_status,
    "fused-sampling": decode_attention.kernel_status,
    "skinny-gemm": skinny_gemm.kernel_status,
    "attn-rope": decode_attention.kernel_status,
    "folded-norms": decode_attention.kernel_status,
    "pdl": decode_attention.pdl_status,
    "skinny-down": skinny_gemm.kernel_status,
    "cdf-sampling": decode_attention.kernel_status}


def kernel_features(options: DecodeOptions) -> list[str]:
    """The Triton features of `options` (decode-attn-split named for its attention, as it
    is the kernel that runs)."""
    attention = "decode-attn-split" if options.decode_attn_split else "decode-attn"
    return [name for name, on in ((attention, options.decode_attn),
                                  ("fused-sampling", options.fused_sampling),
                                  ("skinny-gemm", options.skinny_gemm),
                                  ("attn-rope", options.attn_rope),
                                  ("folded-norms", options.folded_norms),
                                  ("pdl", options.pdl),
                                  ("skinny-down", options.skinny_down),
                                  ("cdf-sampling", options.cdf_sampling)) if on]


def kernel_note(feature: str, device: torch.device) -> str:
    """What a Triton feature runs on `device`: its kernel, or (said why) its torch fallback."""
    ok, why = KERNEL_STATUS[feature](device)
    if ok:
        return f"{feature}: its Triton kernel"
    return f"{feature}: {why}, so {KERNEL_FALLBACKS[feature]}"


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
class Sampling:
    temperature: float
    top_p: float
    top_k: int


@dataclass
class _Layer:
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
Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # x [M, K], W [N, K] -> x W^T


def qkv_projection(h: torch.Tensor, weights: Weights, norms: Weights | None,
                   rope: tuple[torch.Tensor, torch.Tensor], dims: tuple[int, int, int],
                   eps: float, linear: Linear = F.linear) -> tuple[torch.Tensor, ...]:
    """h [B, hidden] -> q [B, H, d], k [B, KV, d], v [B, KV, 1, d] (normed, rotated); `weights`
    (q, k, v) or packed (qkv,), `norms` (q_norm, k_norm), packed per head, or None; `linear`
    the GEMM (skinny-gemm's in the decode step)."""
    heads, kv, d = dims
    b = h.shape[0]
    cos, sin_signed = rope
    if len(weights) == 1:
        qkv = linear(h, weights[0])
        qk = qkv[:, :(heads + kv) * d].view(b, heads + kv, d)
        v = qkv[:, (heads + kv) * d:].view(b, kv, 1, d)
        if norms is not None:  # transformers' order: normalize, round, weight
            qk = F.rms_norm(qk, (d,), None, eps) * norms[0]
        qk = torch.addcmul(qk * cos, torch.roll(qk, d // 2, -1), sin_signed)
        return qk[:, :heads], qk[:, heads:], v
    q = linear(h, weights[0]).view(b, heads, d)
    k = linear(h, weights[1]).view(b, kv, d)
    v = linear(h, weights[2]).view(b, kv, 1, d)
    if norms is not None:
        q = F.rms_norm(q, (d,), norms[0], eps)
        k = F.rms_norm(k, (d,), norms[1], eps)
    q = torch.addcmul(q * cos, torch.roll(q, d // 2, -1), sin_signed)
    k = torch.addcmul(k * cos, torch.roll(k, d // 2, -1), sin_signed)
    return q, k, v


def gated_mlp(h: torch.Tensor, weights: Weights, linear: Linear = F.linear) -> torch.Tensor:
    """silu(gate(h)) * up(h), from (gate, up) or packed (gate_up,)."""
    if len(weights) == 1:
        gate_up = linear(h, weights[0])
        ffn = gate_up.shape[-1] // 2
        return F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:]
    return F.silu(linear(h, weights[0])) * linear(h, weights[1])


def layer_head(x: torch.Tensor, in_norm: torch.Tensor, weights: Weights,
               norms: Weights | None, rope: tuple[torch.Tensor, torch.Tensor],
               dims: tuple[int, int, int], eps: float,
               cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
               skinny: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`compiled`, before attention: RMSNorm, q/k/v, q/k norms, RoPE -> q [B, H, d], k
    [B, KV, d], v [B, KV, 1, d]; with `cache` (the layer's k [B, KV, S, d], v, slot [1]) k/v
    also written there (inductor scatters them in place, no copy of the cache), None where the
    decode-attention kernel writes them itself. `skinny`: skinny-gemm's GEMM."""
    h = F.rms_norm(x, (x.shape[-1],), in_norm, eps)
    q, k, v = qkv_projection(h, weights, norms, rope, dims, eps, _compiled_linear(skinny))
    if cache is not None:
        cache_k, cache_v, slot = cache
        cache_k.index_copy_(2, slot, k.unsqueeze(2))
        cache_v.index_copy_(2, slot, v)
    return q, k, v


def layer_qkv(x: torch.Tensor, in_norm: torch.Tensor, weight: torch.Tensor, eps: float,
              skinny: bool = False) -> torch.Tensor:
    """`compiled` under attn-rope, before attention: RMSNorm and the packed q/k/v GEMM -> its
    raw output (decode-attn's kernel does the q/k norms and RoPE)."""
    h = F.rms_norm(x, (x.shape[-1],), in_norm, eps)
    return _compiled_linear(skinny)(h, weight)


def layer_mlp(x: torch.Tensor, post_norm: torch.Tensor, weights: Weights, eps: float,
              skinny: bool = False) -> torch.Tensor:
    """`compiled`, between the two residual GEMMs: RMSNorm, gate/up, SiLU * up -> the down
    projection's input. The residual GEMMs run outside, in place (x += a W^T): inductor's
    addmm would first copy x into a new output, one device copy per GEMM (57 per step)."""
    h = F.rms_norm(x, (x.shape[-1],), post_norm, eps)
    return gated_mlp(h, weights, _compiled_linear(skinny))


def _compiled_linear(skinny: bool) -> Linear:
    """The GEMM inside compiled code: skinny-gemm's as one opaque custom op (dynamo does not
    trace into its launches; the residual add is then inductor's), else F.linear."""
    return skinny_gemm.linear_op if skinny else F.linear


class CompiledOrEager:
    """`fn` under torch.compile, built at its first call: static shapes (one graph per model
    shape and dtype), fullgraph (a graph break raises instead of splitting the step unseen).
    Should the compile fail (no C compiler on a CPU host, an inductor bug), `fn` runs its
    eager maths from then on and one warning says so; under CUDA graph capture nothing is
    caught (the capture's warm-ups compiled it: an error there is a real one)."""

    def __init__(self, fn: Any) -> None:  # noqa: ANN401
        from ppodeck.engine.train.fused import _own_recompile_budget, raise_global_recompile_limit

        raise_global_recompile_limit()
        self.eager = fn
        self.compiled = torch.compile(fn, fullgraph=True, dynamic=False,
                                      options=COMPILE_OPTIONS, **_own_recompile_budget())
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
            warnings.warn(f"fast_generate 'compiled': torch.compile of {self.eager.__name__} "
                          f"failed ({type(err).__name__}: {str(err)[:300]}); its eager maths "
                          f"run instead", stacklevel=2)
            return self.eager(*args)


_COMPILED: dict[str, CompiledOrEager] = {}


def compiled(fn: Any) -> CompiledOrEager:  # noqa: ANN401
    """`fn`'s CompiledOrEager, one per process (dynamo keeps its graphs across decoders)."""
    if fn.__name__ not in _COMPILED:
        _COMPILED[fn.__name__] = CompiledOrEager(fn)
    return _COMPILED[fn.__name__]


@dataclass(frozen=True)
class _Rows:
    """One group of the batch's rows in a decode step: views of the step's per-row tensors
    (the whole batch unless two-streams/four-streams splits it)."""

    x: torch.Tensor  # [b, hidden] residual stream, updated in place
    pad: torch.Tensor  # [b] long
    k: torch.Tensor  # [layers, b, KV, S, d]
    v: torch.Tensor
    rope: tuple[torch.Tensor, torch.Tensor]  # cos, sin_signed [b, 1, d]
    bias: torch.Tensor | None  # [b, 1, 1, span]; None under the decode-attention kernel


def row_groups(batch: int, groups: int) -> list[slice]:
    """`groups` contiguous slices of the batch's rows, as equal as they go (fewer when the
    batch has fewer rows)."""
    groups = max(1, min(groups, batch))
    bounds = [batch * g // groups for g in range(groups + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


class StaticDecoder:
    """The transformers model's weights, run by a static-shape decoder."""

    def __init__(self, model: Any, options: DecodeOptions = REFERENCE) -> None:  # noqa: ANN401
        ok, why = can_use(model)
        if not ok:
            raise ValueError(f"fast_generate cannot run this model: {why}")
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
        self.packed = [_Packed.empty_like(layer) for layer in self.layers] \
            if options.packed else []
        self.attention_kernel = options.decode_attn and self._kernel_usable(
            "decode-attn-split" if options.decode_attn_split else "decode-attn")
        self.sampling_kernel = options.fused_sampling and self._kernel_usable("fused-sampling")
        self.cdf_kernel = options.cdf_sampling and self.sampling_kernel \
            and self._kernel_usable("cdf-sampling")
        self.gemm_kernel = options.skinny_gemm and self._kernel_usable("skinny-gemm")
        self.down_kernel = self.gemm_kernel or (options.skinny_down
                                                and self._kernel_usable("skinny-down"))
        # decode-attn's one-pass kernel writes the step's k/v into the cache itself
        self.kernel_writes_cache = self.attention_kernel and not options.decode_attn_split
        # attn-rope: that kernel starts from the raw projection; folded-norms: and the norms'
        # weights are in the packed ones (both only where the kernel runs: the same maths)
        self.projection_kernel = options.attn_rope and self._kernel_usable("attn-rope") \
            and self.kernel_writes_cache
        self.folded = options.folded_norms and self._kernel_usable("folded-norms") \
            and self.kernel_writes_cache
        self.pdl = options.pdl and self.folded and self._kernel_usable("pdl")
        self._graph_state: DecodeState | None = None  # the buffers the graphs below point at
        self._graphs: dict[tuple[int, Sampling | None], _DecodeGraph] = {}
        self._pool: Any = None  # one memory pool shared by the bucket graphs
        self._streams: list[torch.cuda.Stream] = []  # two-streams/four-streams' row streams

    def _kernel_usable(self, feature: str) -> bool:
        """Whether `feature`'s Triton kernel runs here; on CUDA a fallback is said."""
        ok, _ = KERNEL_STATUS[feature](self.device)
        if not ok and self.device.type == "cuda":
            warnings.warn(f"fast_generate {kernel_note(feature, self.device)}", stacklevel=3)
        return ok

    @staticmethod
    def _layer(layer: Any) -> _Layer:  # noqa: ANN401
        attn, mlp = layer.self_attn, layer.mlp
        q_norm = getattr(attn, "q_norm", None)
        k_norm = getattr(attn, "k_norm", None)
        return _Layer(layer.input_layernorm.weight, attn.q_proj.weight, attn.k_proj.weight,
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

    def qkv(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor,
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

    def mlp(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
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
    def span(self, slot: int, length: int) -> int:
        """Cache slots a step writing `slot` attends: the bucket holding it, or all of them."""
        window = self.options.window
        if window <= 0:
            return length
        return min(length, (slot // window + 1) * window)

    def decode_step(self, state: DecodeState, span: int, sampling: Sampling | None) -> None:
        """Reads state.token/index/pad, writes the new K/V and state.logits over the first
        `span` cache slots; with `sampling` (graph-sampling) it also samples the next token."""
        if self.options.layers_fused:
            self._decode_fused(state, span)
        else:
            self._decode_ref(state, span)
        if sampling is not None:
            advance(state, sampling, self.sampling_kernel, self.cdf_kernel)

    def _decode_ref(self, state: DecodeState, span: int) -> None:
        b = state.token.shape[0]
        positions = (state.index - state.pad).unsqueeze(1)  # [B, 1]
        cos, sin = self.rope(positions)
        key_index = state.key_index[:span]
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
            keys, values = state.cache.k[i][:, :, :span], state.cache.v[i][:, :, :span]
            scores = torch.matmul(qg, keys.transpose(-1, -2)).float()
            probs = torch.softmax(scores * self.head_dim ** -0.5 + bias, dim=-1)
            out = torch.matmul(probs.to(self.dtype), values)  # [B, KV, group, d]
            x = x + F.linear(out.reshape(b, 1, -1), layer.o)
            x = x + self.mlp(layer, x)
        state.logits.copy_(self.logits(x[:, 0]))

    def _decode_fused(self, state: DecodeState, span: int) -> None:
        """_decode_ref's maths in fewer kernels (the residual stream is [B, hidden])."""
        # rotate(x) * sin == roll(x, half) * sin_signed: RoPE is x*cos, roll, addcmul; both
        # [B, d] rows of the state's tables (rope_tables), two gathers instead of ten kernels;
        # row index + rope_shift is position index - pad (negative in the capture's warm-ups)
        rows = state.index + state.rope_shift
        cos, sin_signed = (F.embedding(rows, table) for table in state.rope)
        rope = (cos[:, None, :], sin_signed[:, None, :])  # [B, 1, d] over heads
        bias = None if self.attention_kernel else self._attention_bias(state, span)
        x = F.embedding(state.token, self.embed)  # [B, hidden]
        self._layers_by_row_group(state, x, rope, bias, span)
        h = F.rms_norm(x, (x.shape[-1],), self.norm, self.eps)
        if self.gemm_kernel:
            skinny_gemm.linear(h, self.lm_head, out=state.logits)
        else:
            torch.mm(h, self.lm_head.t(), out=state.logits)

    def _layers_by_row_group(self, state: DecodeState, x: torch.Tensor,
                             rope: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor | None,
                             span: int) -> None:
        """Every layer on the residual stream x [B, hidden] in place, the rows in
        options.row_streams groups. On CUDA each group runs on a stream of its own, forked from
        the current one and joined back: in the captured step, parallel branches whose kernels
        overlap (a batch-64 step's GEMMs and small kernels leave most SMs idle). Elsewhere the
        groups run one after the other: the same maths."""
        groups = row_groups(x.shape[0], self.options.row_streams)
        streams = self._row_streams(len(groups))
        main = torch.cuda.current_stream(self.device) if streams else None
        for stream in streams:
            stream.wait_stream(main)
        for n, rows in enumerate(groups):
            with torch.cuda.stream(streams[n]) if streams else contextlib.nullcontext():
                self._layers(state, self._rows(state, rows, x, rope, bias), span)
        for stream in streams:
            main.wait_stream(stream)

    def _row_streams(self, groups: int) -> list[torch.cuda.Stream]:
        """One stream per row group on CUDA (made once: the capture's warm-ups set up each
        stream's cuBLAS workspace before the capture); none for one group or off CUDA."""
        if groups == 1 or self.device.type != "cuda":
            return []
        while len(self._streams) < groups:
            self._streams.append(torch.cuda.Stream(self.device))
        return self._streams[:groups]

    @staticmethod
    def _rows(state: DecodeState, rows: slice, x: torch.Tensor,
              rope: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor | None) -> _Rows:
        return _Rows(x[rows], state.pad[rows], state.cache.k[:, rows], state.cache.v[:, rows],
                     (rope[0][rows], rope[1][rows]), None if bias is None else bias[rows])

    def _unfolded(self, norm_weight: torch.Tensor) -> torch.Tensor | None:
        """An RMSNorm's weight, None where folded-norms put it into the packed weights."""
        return None if self.folded else norm_weight

    def _layers(self, state: DecodeState, rows: _Rows, span: int) -> None:
        if self.projection_kernel or self.folded:
            self._projection_layers(state, rows)
        elif self.options.compiled:
            self._compiled_layers(state, rows, span)
        else:
            for i, layer in enumerate(self.layers):
                self._fused_layer(state, i, layer, rows, span)

    def _step_linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The decode step's GEMM x W^T: skinny-gemm's kernel where it runs, else cuBLAS."""
        return skinny_gemm.linear(x, weight) if self.gemm_kernel else F.linear(x, weight)

    @staticmethod
    def _add_linear(x: torch.Tensor, a: torch.Tensor, weight: torch.Tensor,
                    skinny: bool) -> None:
        """x += a W^T in place (the residual add in the GEMM's epilogue), by skinny-gemm's
        kernel under `skinny` (gemm_kernel for o, down_kernel for down), else cuBLAS."""
        if skinny:
            skinny_gemm.linear(a, weight, residual=x)
        else:
            x.addmm_(a, weight.t())

    def _attention_bias(self, state: DecodeState, span: int) -> torch.Tensor:
        """[B, 1, 1, span]: 0 on each row's filled slots, the float min elsewhere."""
        bias = state.pad_bias[:, :span].masked_fill(
            state.key_index[:span] > state.index, torch.finfo(torch.float32).min)
        bias = bias[:, None, None, :]
        if self.options.sdpa:  # SDPA takes the bias in the query's dtype
            bias = bias.clamp(min=torch.finfo(self.dtype).min).to(self.dtype)
        return bias

    def _projections(self, i: int, layer: _Layer) -> tuple[Weights, Weights | None]:
        """(q/k/v weights: the packed one or the three, q/k norm weights or None)."""
        if self.packed:
            packed = self.packed[i]
            return (packed.qkv,), None if packed.qk_norm is None else (packed.qk_norm,)
        norms = None if layer.q_norm is None else (layer.q_norm, layer.k_norm)
        return (layer.q, layer.k, layer.v), norms

    def _mlp_weights(self, i: int, layer: _Layer) -> Weights:
        return (self.packed[i].gate_up,) if self.packed else (layer.gate, layer.up)

    def _fused_layer(self, state: DecodeState, i: int, layer: _Layer, rows: _Rows,
                     span: int) -> None:
        """One layer in place on the rows' residual stream rows.x [b, hidden]."""
        x = rows.x
        b, hidden = x.shape
        h = F.rms_norm(x, (hidden,), layer.in_norm, self.eps)
        weights, norms = self._projections(i, layer)
        q, k, v = qkv_projection(h, weights, norms, rows.rope, self.dims, self.eps,
                                 self._step_linear)
        if not self.kernel_writes_cache:
            slot = state.index.view(1)
            rows.k[i].index_copy_(2, slot, k.unsqueeze(2))
            rows.v[i].index_copy_(2, slot, v)
        out = self._attend_cache(state, i, rows, q, span, (k, v))
        self._add_linear(x, out.view(b, -1), layer.o, self.gemm_kernel)
        h = F.rms_norm(x, (hidden,), layer.post_norm, self.eps)
        self._add_linear(x, gated_mlp(h, self._mlp_weights(i, layer), self._step_linear),
                         layer.down, self.down_kernel)

    def _compiled_layers(self, state: DecodeState, rows: _Rows, span: int) -> None:
        """All layers with their elementwise work compiled (`compiled`), in place on rows.x;
        the residual GEMMs in place outside the compiled functions (layer_mlp says why)."""
        head, mlp = compiled(layer_head), compiled(layer_mlp)
        x = rows.x
        slot = state.index.view(1)
        for i, layer in enumerate(self.layers):
            weights, norms = self._projections(i, layer)
            cache = None if self.kernel_writes_cache else (rows.k[i], rows.v[i], slot)
            q, k, v = head(x, layer.in_norm, weights, norms, rows.rope, self.dims, self.eps,
                           cache, self.gemm_kernel)
            out = self._attend_cache(state, i, rows, q, span, (k, v))
            self._add_linear(x, out.view(x.shape[0], -1), layer.o, self.gemm_kernel)
            gated = mlp(x, layer.post_norm, self._mlp_weights(i, layer), self.eps,
                        self.gemm_kernel)
            self._add_linear(x, gated, layer.down, self.down_kernel)

    def _projection_layers(self, state: DecodeState, rows: _Rows) -> None:
        """attn-rope and/or folded-norms: per layer the packed q/k/v GEMM (after RMSNorm, or on
        the residual stream itself where folded), the q/k norms and RoPE from its raw output
        (_attend_projection), the o GEMM in place, then the MLP: `compiled`'s (compiled
        under `compiled`), or where folded the gate/up GEMM on the residual stream and
        folded_norms.gated (the row scale, SiLU * up in one kernel)."""
        x = rows.x
        head, mlp = (compiled(layer_qkv), compiled(layer_mlp)) if self.options.compiled \
            else (layer_qkv, layer_mlp)
        for i, layer in enumerate(self.layers):
            packed = self.packed[i]
            qkv = self._step_linear(x, packed.qkv) if self.folded \
                else head(x, layer.in_norm, packed.qkv, self.eps, self.gemm_kernel)
            out = self._attend_projection(state, i, rows, qkv)
            self._add_linear(x, out.view(x.shape[0], -1), layer.o, self.gemm_kernel)
            if self.folded:
                gated = folded_norms.gated(self._step_linear(x, packed.gate_up), x, self.eps)
            else:
                gated = mlp(x, layer.post_norm, (packed.gate_up,), self.eps, self.gemm_kernel)
            self._add_linear(x, gated, layer.down, self.down_kernel)

    def _attend_projection(self, state: DecodeState, i: int, rows: _Rows,
                           qkv: torch.Tensor) -> torch.Tensor:
        """Layer i's attention from the raw packed projection qkv [b, (H + 2 KV) d]: its q/k
        norms, RoPE (and where folded the input RMSNorm's row scale, from rows.x) inside the
        attention kernel (attn-rope), else in a kernel of their own (project_heads) before
        decode-attn's with new_kv -> [b, H, d]."""
        norm = self.packed[i].qk_norm
        x = rows.x if self.folded else None
        scale = self.head_dim ** -0.5
        if self.projection_kernel:
            return decode_attention.attend_projection(
                qkv, rows.k[i], rows.v[i], rows.pad, state.index, scale, rows.rope, norm,
                self.eps, self.heads, x=x)
        q, k, v = decode_attention.project_heads(qkv, rows.rope, norm, self.eps, self.heads,
                                                 self.kv_heads, x=x, pdl=self.pdl)
        return decode_attention.attend(q, rows.k[i], rows.v[i], rows.pad, state.index, scale,
                                       new_kv=(k, v), pdl=self.pdl)

    def _attend_cache(self, state: DecodeState, i: int, rows: _Rows, q: torch.Tensor,
                      span: int, new_kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """q [b, H, d] over the first `span` slots of layer i's cache -> [b, KV, group, d]
        (rows.bias None: a decode-attention kernel, which bounds itself by pad and index).
        This step's k [b, KV, d] and v [b, KV, 1, d] (`new_kv`) are in slot state.index
        already, unless kernel_writes_cache: then the one-pass kernel writes them there."""
        b, d = q.shape[0], self.head_dim
        keys, values = rows.k[i], rows.v[i]
        if self.kernel_writes_cache:
            k, v = new_kv
            out = decode_attention.attend(q, keys, values, rows.pad, state.index, d ** -0.5,
                                          new_kv=(k, v.view(k.shape)))
            return out.view(b, self.kv_heads, self.heads // self.kv_heads, d)
        if rows.bias is None:
            out = decode_attention.attend_split(q, keys, values, rows.pad, state.index,
                                                d ** -0.5)
            return out.view(b, self.kv_heads, self.heads // self.kv_heads, d)
        qg = q.reshape(b, self.kv_heads, self.heads // self.kv_heads, d)
        keys, values = keys[:, :, :span], values[:, :, :span]
        if self.options.sdpa:
            return F.scaled_dot_product_attention(qg, keys, values, attn_mask=rows.bias,
                                                  scale=d ** -0.5)
        scores = torch.matmul(qg, keys.transpose(-1, -2))
        probs = torch.softmax(torch.add(rows.bias, scores, alpha=d ** -0.5), dim=-1)
        return torch.matmul(probs.to(self.dtype), values)  # [b, KV, group, d]

    # ---- graphs --------------------------------------------------------------------------
    def graph_for(self, state: DecodeState, span: int,
                  sampling: Sampling | None) -> _DecodeGraph | None:
        """The captured decode step for these buffers, span and in-graph sampling (CUDA only;
        None elsewhere)."""
        if self.device.type != "cuda":
            return None
        if self._graph_state is not state:  # one shape at a time: caches are large
            self._graphs, self._graph_state = {}, state
            self._pool = torch.cuda.graph_pool_handle()
        key = (span, sampling)
        graph = self._graphs.get(key)
        if graph is None:
            graph = _DecodeGraph(self, state, span, sampling, self._pool)
            self._graphs[key] = graph
        return graph


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with the first half of its last dim negated: rotate(x) * sin == roll(x, d / 2) *
    signed_sin(sin), RoPE as x * cos, a roll and an addcmul."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


@dataclass
class _Packed:
    """One layer's q/k/v and gate/up weights side by side, and the q/k norm weights per head."""

    qkv: torch.Tensor  # [(H + 2 KV) d, hidden]
    gate_up: torch.Tensor  # [2 ffn, hidden]
    qk_norm: torch.Tensor | None  # [H + KV, d]

    @classmethod
    def empty_like(cls, layer: _Layer) -> _Packed:
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

    def fill(self, layer: _Layer, folded: bool = False) -> None:
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


@dataclass
class KVCache:
    k: torch.Tensor  # [layers, B, KV, S, d]
    v: torch.Tensor


@dataclass
class DecodeState:
    """Static buffers one decode step reads and writes (the graph's inputs and outputs)."""

    token: torch.Tensor  # [B] long
    index: torch.Tensor  # [] long: cache slot of this step's token
    pad: torch.Tensor  # [B] long
    key_index: torch.Tensor  # [S] long
    logits: torch.Tensor  # [B, V]
    cache: KVCache
    pad_bias: torch.Tensor  # [B, S] fp32: 0, or the float min on a row's pad slots
    # graph-sampling: step's column in the outputs, EOS id (-1: none), rows that ended
    step: torch.Tensor  # [] long
    eos: torch.Tensor  # [] long
    finished: torch.Tensor  # [B] bool
    out_tokens: torch.Tensor  # [B, S] long
    out_log_probs: torch.Tensor  # [B, S] fp32
    rope: tuple[torch.Tensor, torch.Tensor]  # [2S, d] cos, sin_signed (rope_tables)
    rope_shift: torch.Tensor  # [B] long: S - pad, so index + rope_shift is the tables' row
    generator: torch.Generator = field(repr=False)


class _DecodeGraph:
    def __init__(self, decoder: StaticDecoder, state: DecodeState, span: int,
                 sampling: Sampling | None, pool: Any) -> None:  # noqa: ANN401
        self.state = state
        # warm up on a side stream (allocator and lazy inits), then capture; the warm-ups'
        # writes (slot 0, output column 0) are overwritten before any read
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                state.index.zero_()
                state.step.zero_()
                decoder.decode_step(state, span, sampling)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        if sampling is not None:  # its draws advance the generator's offset at each replay
            self.graph.register_generator_state(state.generator)
        # the warm-ups compiled `compiled`'s functions: a recompile under capture must raise
        with torch.compiler.set_stance("fail_on_recompile"), \
                torch.cuda.graph(self.graph, pool=pool):
            decoder.decode_step(state, span, sampling)

    def replay(self) -> None:
        self.graph.replay()


# --------------------------------------------------------------------------------------------
# sampling, as transformers' warpers: temperature -> top-k -> top-p
# --------------------------------------------------------------------------------------------
def filter_logits(logits: torch.Tensor, temperature: float, top_p: float,
                  top_k: int) -> torch.Tensor:
    scores = logits.float()
    if temperature > 0 and temperature != 1.0:
        scores = scores / temperature
    if top_k and top_k > 0 and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        cumulative = sorted_scores.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_scores.softmax(-1) >= top_p  # keep the token crossing top_p
        drop[..., 0] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def chosen_log_probs(logits: torch.Tensor, tokens: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    """log-softmax(logits / T) of the chosen tokens (hf_backend.chosen_log_probs)."""
    raw = logits.float()
    if temperature not in (0.0, 1.0) and temperature > 0:
        raw = raw / temperature
    return torch.log_softmax(raw, -1).gather(-1, tokens[:, None]).squeeze(-1)


def sample(logits: torch.Tensor, temperature: float, top_p: float, top_k: int,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B], log-probs [B]) with hf_backend.chosen_log_probs' definition."""
    if temperature <= 0:
        tokens = logits.argmax(-1)
    else:
        probs = filter_logits(logits, temperature, top_p, top_k).softmax(-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, chosen_log_probs(logits, tokens, temperature)


def sample_sync_free(logits: torch.Tensor, sampling: Sampling,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` without host syncs (graph-capturable): torch.multinomial draws one sample as
    argmax(p / q), q ~ Exp(1), after checking p on the host; the same draws without the check.
    At T=1 without filters the fp32 softmax/log-softmax read the logits as they are (dtype=):
    the same values without a float copy of [B, vocab] each."""
    temperature = sampling.temperature
    plain = temperature == 1.0 and sampling.top_p >= 1.0 and not 0 < sampling.top_k < \
        logits.shape[-1]
    if temperature <= 0:
        tokens = logits.argmax(-1)
    else:
        probs = torch.softmax(logits, -1, dtype=torch.float32) if plain else \
            filter_logits(logits, temperature, sampling.top_p, sampling.top_k).softmax(-1)
        noise = torch.empty_like(probs).exponential_(1, generator=generator)
        tokens = (probs / noise).argmax(-1)
    if temperature <= 0 or temperature == 1.0:
        log_probs = torch.log_softmax(logits, -1, dtype=torch.float32)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, chosen_log_probs(logits, tokens, temperature)


def record(state: DecodeState, tokens: torch.Tensor, log_probs: torch.Tensor) -> None:
    """Write a step's tokens into the output column state.step and feed them back."""
    column = state.step.view(1)
    state.out_tokens.index_copy_(1, column, tokens[:, None])
    state.out_log_probs.index_copy_(1, column, log_probs[:, None])
    state.finished |= tokens == state.eos
    state.token.copy_(tokens)
    state.step += 1


def sample_fused(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator,
                 cdf: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused-sampling`: sample_sync_free's draw, at T=1 without filters by the Triton kernels
    (engine/rollout/sampling_kernel.py: the same noise, no softmax/log-softmax written out);
    `cdf` (cdf-sampling): by inverse CDF from one uniform per row, no noise tensor."""
    if sampling.temperature != 1.0 or sampling.top_p < 1.0 or \
            0 < sampling.top_k < logits.shape[-1]:
        return sample_sync_free(logits, sampling, generator)
    if cdf:
        uniform = torch.rand(logits.shape[0], generator=generator, device=logits.device)
        return sampling_kernel.sample_cdf(logits, uniform)
    noise = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    return sampling_kernel.sample_plain(logits, noise.exponential_(1, generator=generator))


def advance(state: DecodeState, sampling: Sampling, kernel: bool = False,
            cdf: bool = False) -> None:
    """The in-graph tail of a graph-sampling step: sample from state.logits (`kernel`: by
    fused-sampling's kernels, `cdf`: cdf-sampling's), record, and move the cache index to the
    next slot (`kernel`: both in sampling_kernel.record's one launch)."""
    if kernel:  # the draw and its bookkeeping in fused-sampling's kernels
        tokens, log_probs = sample_fused(state.logits, sampling, state.generator, cdf)
        sampling_kernel.record(tokens, log_probs, state.token, state.out_tokens,
                               state.out_log_probs, state.finished, state.step, state.index,
                               state.eos)
        return
    record(state, *sample_sync_free(state.logits, sampling, state.generator))
    state.index += 1


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------
class StepHook(Protocol):
    """Called at the phase boundaries of each decode step (bench/gpu_decode_profile.py)."""

    def mark(self, label: str, step: int) -> None: ...


_DECODERS: dict[tuple[int, DecodeOptions], tuple[tuple[int, ...], StaticDecoder]] = {}


def storage_key(model: Any) -> tuple[int, ...]:  # noqa: ANN401
    """Where every parameter's data lives now. Moving a model (`model.to()`, or the storage
    resize of the rollout onload) keeps the Parameter objects but may re-allocate their data,
    and a captured CUDA graph still points at the old addresses: replaying it then reads freed
    memory. The rollout offload also drops the decoders (`release_decoders`); this key guards
    every other way weights move."""
    return tuple(p.data_ptr() for p in model.parameters())


def decoder_for(model: Any, options: DecodeOptions | None = None) -> StaticDecoder:  # noqa: ANN401
    """One StaticDecoder (and its captured graphs) per model, variant (DEFAULT_VARIANT's when
    None) and parameter placement."""
    options = default_options() if options is None else options
    key = storage_key(model)
    cached = _DECODERS.get((id(model), options))
    if cached is None or cached[0] != key:
        _DECODERS.clear()
        _DECODERS[(id(model), options)] = (key, StaticDecoder(model, options))
    return _DECODERS[(id(model), options)][1]


def release_decoders() -> None:
    """Drop the cached decoders with their KV caches and captured graphs (the rollout offload:
    they hold gigabytes, and the weights they point at are about to move)."""
    _DECODERS.clear()


@torch.no_grad()
def fast_generate(model: Any, rows: Sequence[Sequence[int]], *, temperature: float,  # noqa: ANN401
                  top_p: float, top_k: int, max_new_tokens: int, eos_token_id: int | None,
                  pad_token_id: int, seed: int, use_cuda_graph: bool = True,
                  options: DecodeOptions | None = None,
                  hook: StepHook | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """(new tokens, their log-probs) per row, max_new_tokens each (or fewer when every row
    has produced EOS); cut them with hf_backend.cut_at_eos. `options`: the decoder variant
    (DEFAULT_VARIANT's when None)."""
    if not rows or max_new_tokens <= 0:
        return [[] for _ in rows], [[] for _ in rows]
    options = default_options() if options is None else options
    decoder = decoder_for(model, options)
    decoder.refresh()
    ids, pad = left_padded(rows, pad_token_id, decoder.device)
    width = ids.shape[1]
    # cache length rounded up so rollouts with slightly different prompt widths reuse one graph
    length = -(-(width + max_new_tokens) // CACHE_ROUND) * CACHE_ROUND
    state = _state_for(decoder, len(rows), length, pad)
    sampling = Sampling(float(temperature), float(top_p), int(top_k))
    in_graph = sampling if options.sample_in_graph else None
    # capture before prefill: the capture's warm-up steps write K/V that prefill overwrites
    graphs: dict[int, _DecodeGraph | None] = {}
    for slot in range(width, width + max_new_tokens - 1):
        span = decoder.span(slot, length)
        if span not in graphs:
            graphs[span] = decoder.graph_for(state, span, in_graph) if use_cuda_graph else None
    logits = decoder.prefill(ids, pad, state.cache)
    call = _Call(decoder, state, graphs, sampling, width, max_new_tokens, eos_token_id, hook)
    if options.sample_in_graph:
        return _generate_in_graph(call, logits, seed)
    return _generate_host_sampling(call, logits, seed)


@dataclass
class _Call:
    decoder: StaticDecoder
    state: DecodeState
    graphs: dict[int, _DecodeGraph | None]  # by attended span
    sampling: Sampling
    width: int  # prompt width: the first decode step writes this cache slot
    max_new_tokens: int
    eos_token_id: int | None
    hook: StepHook | None

    def mark(self, label: str, step: int) -> None:
        if self.hook is not None:
            self.hook.mark(label, step)

    def decode(self, slot: int, sampling: Sampling | None) -> None:
        """One decode step writing cache slot `slot`: its graph, or eagerly without one."""
        span = self.decoder.span(slot, self.state.key_index.shape[0])
        graph = self.graphs[span]
        if graph is not None:
            graph.replay()
        else:
            self.decoder.decode_step(self.state, span, sampling)


def _generate_host_sampling(call: _Call, logits: torch.Tensor,
                            seed: int) -> tuple[list[list[int]], list[list[float]]]:
    """Sample on the host side of the graph each step (today's loop)."""
    state, sampling, device = call.state, call.sampling, call.decoder.device
    generator = torch.Generator(device=device).manual_seed(int(seed))
    tokens, log_probs = [], []
    finished = torch.zeros(state.token.shape[0], dtype=torch.bool, device=device)
    for step in range(call.max_new_tokens):
        call.mark("sample", step)
        token, log_prob = sample(logits, sampling.temperature, sampling.top_p, sampling.top_k,
                                 generator)
        tokens.append(token)
        log_probs.append(log_prob)
        if call.eos_token_id is not None:
            finished |= token == call.eos_token_id
            if (step + 1) % EARLY_STOP_EVERY == 0 and bool(finished.all()):
                break
        if step + 1 == call.max_new_tokens:
            break
        state.token.copy_(token)
        state.index.fill_(call.width + step)
        call.mark("decode", step)
        call.decode(call.width + step, None)
        logits = state.logits
    call.mark("end", len(tokens))
    return torch.stack(tokens, dim=1).tolist(), torch.stack(log_probs, dim=1).tolist()


def _generate_in_graph(call: _Call, logits: torch.Tensor,
                       seed: int) -> tuple[list[list[int]], list[list[float]]]:
    """The first token sampled here, every later one inside the step's graph: the host only
    replays (and reads the EOS flags every EARLY_STOP_EVERY steps)."""
    state = call.state
    state.generator.manual_seed(int(seed))
    state.eos.fill_(-1 if call.eos_token_id is None else int(call.eos_token_id))
    state.finished.zero_()
    state.step.zero_()
    call.mark("sample", 0)
    if call.decoder.sampling_kernel:
        record(state, *sample_fused(logits, call.sampling, state.generator,
                                    call.decoder.cdf_kernel))
    else:
        record(state, *sample_sync_free(logits, call.sampling, state.generator))
    state.index.fill_(call.width)
    produced = 1
    while produced < call.max_new_tokens:
        if call.eos_token_id is not None and produced % EARLY_STOP_EVERY == 0 \
                and bool(state.finished.all()):
            break
        call.mark("decode", produced)
        call.decode(call.width + produced - 1, call.sampling)
        produced += 1
    call.mark("end", produced)
    return (state.out_tokens[:, :produced].tolist(),
            state.out_log_probs[:, :produced].tolist())


def left_padded(rows: Sequence[Sequence[int]], pad_token_id: int,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [B, width] left-padded, pad counts [B]) on the device."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
    pad = torch.tensor([width - len(r) for r in rows], dtype=torch.long)
    return ids.to(device), pad.to(device)


def _state_for(decoder: StaticDecoder, batch: int, length: int,
               pad: torch.Tensor) -> DecodeState:
    """Reuse the previous buffers (and so the captured graphs) when the shape allows."""
    state = decoder._graph_state
    if state is None or state.token.shape[0] != batch or state.key_index.shape[0] != length:
        state = _new_state(decoder, batch, length)
    state.pad.copy_(pad)
    state.rope_shift.copy_(length - pad)
    state.pad_bias.copy_(pad_bias(pad, length))
    return state


def pad_bias(pad: torch.Tensor, length: int) -> torch.Tensor:
    """[B, length] fp32: the float min on each row's left-pad slots, 0 elsewhere."""
    slots = torch.arange(length, device=pad.device)
    bias = torch.zeros((pad.shape[0], length), dtype=torch.float32, device=pad.device)
    return bias.masked_fill(slots[None, :] < pad[:, None], torch.finfo(torch.float32).min)


def _new_state(decoder: StaticDecoder, batch: int, length: int) -> DecodeState:
    device, dtype = decoder.device, decoder.dtype
    shape = (len(decoder.layers), batch, decoder.kv_heads, length, decoder.head_dim)
    vocab = decoder.lm_head.shape[0]

    def longs(*size: int) -> torch.Tensor:
        return torch.zeros(size, dtype=torch.long, device=device)

    return DecodeState(
        token=longs(batch), index=longs(), pad=longs(batch),
        key_index=torch.arange(length, device=device),
        logits=torch.zeros(batch, vocab, dtype=dtype, device=device),
        cache=KVCache(torch.zeros(shape, dtype=dtype, device=device),
                      torch.zeros(shape, dtype=dtype, device=device)),
        pad_bias=torch.zeros(batch, length, dtype=torch.float32, device=device),
        step=longs(), eos=longs(), finished=torch.zeros(batch, dtype=torch.bool, device=device),
        out_tokens=longs(batch, length),
        out_log_probs=torch.zeros(batch, length, dtype=torch.float32, device=device),
        rope=decoder.rope_tables(length), rope_shift=longs(batch),
        generator=torch.Generator(device=device))
