"""The per-phase memory estimate against what the H200 measured (engine/config/derived.py)."""

from __future__ import annotations

import pytest

from engine.config import check
from engine.config.derived import _layer_bytes_per_token
from engine.presets import load_preset, resolve_preset

# torch's peak allocated bytes on the H200, bench/gpu_bench.py, Qwen3-0.6B shape, 8 x 1024 tokens
# (the preset's --max-tokens-per-gpu), bf16, default fast paths; 2026-12-02
MEASURED_GIB = {"actor_train": ("actor", 30.1), "critic_train": ("critic", 21.0)}


@pytest.mark.parametrize("phase", sorted(MEASURED_GIB))
def test_qwen3_06b_estimate_is_within_20_percent_of_the_h200(phase: str) -> None:
    role, measured = MEASURED_GIB[phase]
    derived = check(resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu"))).derived
    estimate = derived.memory_gib[phase][role]
    assert abs(estimate - measured) / measured <= 0.20, (phase, estimate, measured)


def test_plain_gpt_working_set_is_close_to_korthikanti() -> None:
    """groups = heads, heads*kv = h, ffn = 4h, gelu: 38 bytes per token per hidden unit."""
    h = 1024
    r = {"hidden_size": h, "num_attention_heads": 16, "num_query_groups": 16, "kv_channels": 64,
         "ffn_hidden_size": 4 * h, "swiglu": False, "num_experts": None,
         "moe_ffn_hidden_size": None}
    assert _layer_bytes_per_token(r) == 38 * h
