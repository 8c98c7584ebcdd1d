"""The per-phase memory estimate against what the H200 measured (engine/config/memory.py)."""

from __future__ import annotations

import os

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.memory import (
    CONTEXT_GIB,
    DRIVER_RESERVED_GIB,
    TRAINER_RUNTIME_GIB,
    _layer_bytes_per_token,
    count_params,
    memory_estimate,
    packed_decoder,
)
from ppodeck.engine.config.resolve import resolve
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.conftest import GPU_MACHINE

# torch's peak allocated bytes on the H200, bench/gpu_bench.py, Qwen3-0.6B shape, 8 x 1024 tokens
# (the preset's --max-tokens-per-gpu), bf16, default fast paths; 2026-12-02
MEASURED_GIB = {"actor_train": ("actor", 30.1), "critic_train": ("critic", 21.0)}


@pytest.mark.parametrize("phase", sorted(MEASURED_GIB))
def test_qwen3_06b_estimate_is_within_20_percent_of_the_h200(phase: str) -> None:
    role, measured = MEASURED_GIB[phase]
    derived = check(resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")), GPU_MACHINE).derived
    estimate = derived.memory_gib[phase][role]
    assert abs(estimate - measured) / measured <= 0.20, (phase, estimate, measured)


def test_plain_gpt_working_set_is_close_to_korthikanti() -> None:
    """groups = heads, heads*kv = h, ffn = 4h, gelu: 38 bytes per token per hidden unit."""
    h = 1024
    r = {"hidden_size": h, "num_attention_heads": 16, "num_query_groups": 16, "kv_channels": 64,
         "ffn_hidden_size": 4 * h, "swiglu": False, "num_experts": None,
         "moe_ffn_hidden_size": None}
    assert _layer_bytes_per_token(r) == 38 * h


# ---- the 1.7B table: NVML on the H200 (bench/preset_memory.py, 2026-12-03) -----------------
# NVML peak per phase, GiB, less what the fix since made returns: the actor's freed 3.2 GiB
# export buffer that stayed in its cache while it slept (engine/train/worker.py
# release_cached_device_memory); that run decoded with PPODECK_DECODE=packed+...
PACKED_DECODER = {"PPODECK_DECODE": "packed+decode-attn+graph-sampling"}
REF_DECODER = {"PPODECK_DECODE": "ref"}
EXPORT_BUFFER_GIB = 3_441_150_464 / 2**30
MEASURED_1_7B_GIB = {"generate": 22.02 - EXPORT_BUFFER_GIB,
                     "critic_train": 60.28 - EXPORT_BUFFER_GIB, "actor_train": 61.83}


def _resolved(preset: str, **changes: object) -> dict:
    config = resolve_preset(load_preset(preset))
    return resolve(config.with_values(**changes) if changes else config, os.environ)


def _estimate(r: dict, env: dict | None = None) -> dict:
    """The estimate with the reference decoder unless `env` names another (the figures below
    were checked with and without the packed copy)."""
    return memory_estimate(r, count_params(r), REF_DECODER if env is None else env)


@pytest.mark.parametrize("phase", sorted(MEASURED_1_7B_GIB))
def test_qwen3_1_7b_estimate_is_within_15_percent_of_nvml(phase: str) -> None:
    total = _estimate(_resolved("qwen3-1.7b-ppo-1gpu"), PACKED_DECODER)[phase]["total"]
    measured = MEASURED_1_7B_GIB[phase]
    assert abs(total - measured) / measured <= 0.15, (phase, total, measured)


def test_a_sleeping_trainer_costs_its_process_and_the_actor_what_it_keeps() -> None:
    r = _resolved("qwen3-1.7b-ppo-1gpu")
    generate = _estimate(r)["generate"]
    assert generate["critic"] == CONTEXT_GIB + TRAINER_RUNTIME_GIB
    kept = 3 * 8192 * 151936 / 2**30  # --max-tokens-per-gpu x vocab
    assert generate["actor"] == pytest.approx(CONTEXT_GIB + TRAINER_RUNTIME_GIB + kept, abs=0.01)
    parts = generate["actor"] + generate["critic"] + generate["rollout"] + DRIVER_RESERVED_GIB
    assert generate["total"] == pytest.approx(parts, abs=0.02)


def test_hf_rollout_terms_follow_the_batch_lengths_and_the_variant() -> None:
    """KV cache 2 x 2 B x L x rows x groups x kv x S, S rounded up to 64; packed copies."""
    r = _resolved("qwen3-1.7b-ppo-1gpu")
    base = _estimate(r)["generate"]["rollout"]
    weights = 2 * count_params(r) / 2**30
    kv = 2 * 2 * 28 * 64 * 8 * 128 * 320 / 2**30  # 16 + 256 slots -> 320
    sampling = 26 * 64 * 151936 / 2**30
    assert base == pytest.approx(weights + kv + sampling + CONTEXT_GIB, abs=0.01)
    longer = _estimate(_resolved("qwen3-1.7b-ppo-1gpu", rollout_max_response_len=576))
    assert longer["generate"]["rollout"] - base == pytest.approx(kv, abs=0.01)  # 640 slots
    packed = _estimate(r, PACKED_DECODER)["generate"]["rollout"] - base
    assert packed == pytest.approx(2 * 28 * 2048 * (32 * 128 + 2 * 6144) / 2**30, abs=0.01)
    assert not packed_decoder({"PPODECK_DECODE": "fused+decode-attn"})
    assert packed_decoder({"PPODECK_DECODE": " Fused + PACKED "})


def test_the_default_decoder_counts_its_packed_copy() -> None:
    """PPODECK_DECODE unset runs the backend's default variant: the estimate follows it."""
    from ppodeck.engine.rollout.decoder.features import BACKEND_VARIANT

    assert packed_decoder({}) == ("packed" in BACKEND_VARIANT.split("+"))
    r = _resolved("qwen3-1.7b-ppo-1gpu")
    assert _estimate(r, {}) == _estimate(r, PACKED_DECODER)


def test_the_actor_export_peak_counts_only_when_it_beats_training() -> None:
    """Tiny micro-batches: the HF tensors + flat buffer (4 B/param) set the actor's peak."""
    tiny = _resolved("qwen3-1.7b-ppo-1gpu", max_tokens_per_gpu=16)
    ipc = _estimate(tiny)["actor_train"]["actor"]
    host_path = _estimate(_resolved("qwen3-1.7b-ppo-1gpu", max_tokens_per_gpu=16,
                                    colocate=False))["actor_train"]["actor"]
    assert ipc - host_path == pytest.approx(4 * count_params(tiny) / 2**30, rel=0.02)


def test_other_presets_stay_sane() -> None:
    """0.6B fits its H200 with room; the 4B seed recipe's train phases stay under an 80 GB
    GPU; every phase of every preset is positive."""
    small = _estimate(_resolved("qwen3-0.6b-ppo-1gpu"))
    assert max(p["total"] for p in small.values()) < 40
    seed = _estimate(_resolved("qwen3-4b-ppo"))
    assert seed["actor_train"]["total"] < 75 and seed["critic_train"]["total"] < 75
    assert all(v > 0 for est in (small, seed) for p in est.values() for v in p.values())


def test_context_parallelism_divides_the_activations_of_fixed_micro_batches() -> None:
    """Each CP rank holds 1/CP of every row; --max-tokens-per-gpu already counts one rank's."""
    fixed = {"use_dynamic_batch_size": False, "micro_batch_size": 2,
             "actor_num_gpus_per_node": 2, "num_gpus_per_node": 2}
    one, two = (_estimate(_resolved("qwen3-0.6b-ppo-1gpu", context_parallel_size=cp, **fixed))
                for cp in (1, 2))
    assert two["actor_train"]["actor"] < one["actor_train"]["actor"]
    dynamic = {"actor_num_gpus_per_node": 2, "num_gpus_per_node": 2}
    one, two = (_estimate(_resolved("qwen3-0.6b-ppo-1gpu", context_parallel_size=cp, **dynamic))
                for cp in (1, 2))
    assert two["actor_train"]["actor"] == pytest.approx(one["actor_train"]["actor"])
