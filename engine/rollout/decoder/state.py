"""The static buffers one decode step reads and writes (the captured graph's inputs and
outputs), and the sampling settings a graph is captured for."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    top_k: int


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
