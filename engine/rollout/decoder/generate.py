"""The hf rollout backend's fast decoder: the entry point `fast_generate`, and the variant it runs.

transformers' `generate` spends most of a decode step in Python and kernel launches (its
tokens/s against this decoder's: docs/performance.md). `fast_generate` runs the SAME
weights (the parameters of the transformers Llama/Qwen3 model, read in place: a
`load_state_dict` into that model is seen here at once, no copy, no re-capture) through
static_decoder.StaticDecoder: an eager prefill that fills a static KV cache, then one CUDA
graph replay per decode step, sampling with transformers' semantics (sampling.py). Rows keep
generating after their EOS (static shapes); callers cut with hf_backend.cut_at_eos. The loop
stops early once every row has produced EOS. Positions follow transformers for left padding:
position = index - number of pad tokens.

The variant (features.py: one table of features) is `options`, DEFAULT_VARIANT's (`ref`) when
None; the hf backend passes options_from_env()'s: PPODECK_DECODE, else BACKEND_VARIANT.
`can_use(model)` says whether a model is one the decoder understands.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from . import sampling as samplers
from .features import (
    BACKEND_VARIANT,
    VARIANT_ENV,
    DecodeOptions,
    default_options,
    parse_variant,
)
from .kernels import kernel_note, kernel_status
from .state import DecodeState, KVCache, Sampling
from .static_decoder import DecodeGraph, StaticDecoder, can_use

__all__ = ["can_use", "fast_generate", "options_from_env", "release_decoders"]

EARLY_STOP_EVERY = 16  # steps between EOS checks (each is a host sync)
CACHE_ROUND = 64  # KV-cache length granularity (slots past the current step are masked)


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
                 if not kernel_status(feature, cuda)[0]]
    if not fallbacks:
        return None
    return f"the hf decoder's default variant '{options.name}': " + "; ".join(fallbacks)


def kernel_features(options: DecodeOptions) -> list[str]:
    """The features of `options` that run Triton kernels, in table order."""
    return [feature.name for feature in options.features if feature.kernel is not None]


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
    in_graph = sampling if options.graph_sampling else None
    # capture before prefill: the capture's warm-up steps write K/V that prefill overwrites;
    # none when no decode step follows the first token
    graph = decoder.graph_for(state, in_graph) if use_cuda_graph and max_new_tokens > 1 \
        else None
    logits = decoder.prefill(ids, pad, state.cache)
    call = _Call(decoder, state, graph, sampling, width, max_new_tokens, eos_token_id, hook)
    if options.graph_sampling:
        return _generate_in_graph(call, logits, seed)
    return _generate_host_sampling(call, logits, seed)


@dataclass
class _Call:
    decoder: StaticDecoder
    state: DecodeState
    graph: DecodeGraph | None  # the captured step; None: decode eagerly
    sampling: Sampling
    width: int  # prompt width: the first decode step writes this cache slot
    max_new_tokens: int
    eos_token_id: int | None
    hook: StepHook | None

    def mark(self, label: str, step: int) -> None:
        if self.hook is not None:
            self.hook.mark(label, step)

    def decode(self, sampling: Sampling | None) -> None:
        """One decode step (writing cache slot state.index): its graph, or eagerly."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.decoder.decode_step(self.state, sampling)


def _generate_host_sampling(call: _Call, logits: torch.Tensor,
                            seed: int) -> tuple[list[list[int]], list[list[float]]]:
    """Sample on the host side of the graph each step (today's loop)."""
    state, sampling, device = call.state, call.sampling, call.decoder.device
    generator = torch.Generator(device=device).manual_seed(int(seed))
    tokens, log_probs = [], []
    finished = torch.zeros(state.token.shape[0], dtype=torch.bool, device=device)
    for step in range(call.max_new_tokens):
        call.mark("sample", step)
        token, log_prob = samplers.sample(logits, sampling.temperature, sampling.top_p,
                                          sampling.top_k, generator)
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
        call.decode(None)
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
        samplers.record(state, *samplers.sample_fused(logits, call.sampling, state.generator,
                                                      call.decoder.cdf_kernel))
    else:
        samplers.record(state, *samplers.sample_sync_free(logits, call.sampling, state.generator))
    state.index.fill_(call.width)
    produced = 1
    while produced < call.max_new_tokens:
        if call.eos_token_id is not None and produced % EARLY_STOP_EVERY == 0 \
                and bool(state.finished.all()):
            break
        call.mark("decode", produced)
        call.decode(call.sampling)
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
