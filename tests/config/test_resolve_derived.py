"""resolve() fallbacks and derived values (topology, batch arithmetic, memory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppodeck.engine.config import derive, resolve
from ppodeck.engine.config.memory import CONTEXT_GIB, PHASES, ROLES, TRAINER_RUNTIME_GIB

from .conftest import make_config

QWEN3_4B = dict(
    swiglu=True, num_layers=36, hidden_size=2560, ffn_hidden_size=9728, num_attention_heads=32,
    group_query_attention=True, num_query_groups=8, use_rotary_position_embeddings=True,
    disable_bias_linear=True, normalization="RMSNorm", vocab_size=151936, kv_channels=128,
    qk_layernorm=True)


def test_miles_fallbacks() -> None:
    r = resolve(make_config(advantage_estimator="ppo", lr=1e-6, save="/c/run1/",
                            ref_load="/ref", actor_num_gpus_per_node=4, colocate=True,
                            critic_num_gpus_per_node=2, eps_clip=0.3), os.environ)
    assert r["use_critic"] and r["critic_lr"] == 1e-6
    assert r["critic_save"] == "/c/run1_critic"
    assert r["load"] == "/ref" and r["critic_load"] == "/ref" and not r["resume"]
    assert r["critic_num_gpus_per_node"] == 4 and r["critic_num_nodes"] == 1
    assert r["offload_train"] is True and r["offload_rollout"] is True
    assert r["rollout_num_gpus"] == 4 and r["eps_clip_high"] == 0.3


def test_resume_prefers_critic_sibling(tmp_path: Path) -> None:
    save = tmp_path / "ckpt"
    for d in (save, tmp_path / "ckpt_critic"):
        d.mkdir()
        (d / "latest_checkpointed_iteration.txt").write_text("3")
    r = resolve(make_config(advantage_estimator="ppo", save=str(save), load=str(save)), os.environ)
    assert r["resume"] and r["critic_resume"]
    assert r["critic_load"] == str(tmp_path / "ckpt_critic")


def test_no_offload_train_respected_and_debug_rollout_only() -> None:
    assert resolve(make_config(advantage_estimator="ppo", offload_train=False), os.environ)[
        "offload_train"] is False
    r = resolve(make_config(debug_rollout_only=True, colocate=True, offload=True), os.environ)
    assert r["colocate"] is False and r["offload_train"] is False


def test_paths_expand_ppodeck_home_and_run_dir(isolated_env: Path) -> None:
    r = resolve(make_config(ref_load="${PPODECK_HOME}/models/x", run_dir="/runs/r1",
                            save="${RUN_DIR}/checkpoints"), os.environ)
    assert r["ref_load"] == str(isolated_env / "home" / "models" / "x")
    assert r["save"] == "/runs/r1/checkpoints"
    assert r["critic_save"] == "/runs/r1/checkpoints_critic"


def test_seed_derived_values() -> None:
    d = derive(make_config(**QWEN3_4B, actor_num_gpus_per_node=4, pipeline_model_parallel_size=2,
                           context_parallel_size=2, colocate=True, rollout_batch_size=8,
                           n_samples_per_prompt=8, global_batch_size=32, num_rollout=300,
                           advantage_estimator="ppo", use_dynamic_batch_size=True,
                           max_tokens_per_gpu=16384, recompute_granularity="full"), os.environ)
    assert (d.world_size, d.dp_size, d.rollout_engines, d.gpus_needed) == (4, 1, 4, 4)
    assert (d.samples_per_rollout, d.samples_trimmed) == (64, 0)
    assert (d.actor_steps_per_rollout, d.critic_steps_per_rollout) == (2, 2)
    assert d.total_train_iters == 600
    assert 3.9e9 < d.params < 4.1e9  # Qwen3-4B is 4.0B with tied embeddings
    for phase in PHASES:
        assert set(d.memory_gib[phase]) == set(ROLES)
    mem = d.memory_gib
    assert mem["generate"]["rollout"] == pytest.approx(64.0)
    assert mem["actor_train"]["actor"] > mem["critic_train"]["critic"] > 5
    # asleep: its process only (context, NCCL and library memory), the state is on the host;
    # the actor also keeps 3 B per logit of a micro-batch (16384 x 151936)
    assert mem["generate"]["critic"] == CONTEXT_GIB + TRAINER_RUNTIME_GIB
    kept = 3 * 16384 * 151936 / 2**30
    assert mem["generate"]["actor"] == pytest.approx(CONTEXT_GIB + TRAINER_RUNTIME_GIB + kept,
                                                     abs=0.01)


def test_unknown_shape_gives_none() -> None:
    d = derive(make_config(advantage_estimator="ppo", rollout_batch_size=8,
                           global_batch_size=8), os.environ)
    assert d.params is None
    assert all(v is None for roles in d.memory_gib.values() for v in roles.values())
    assert d.actor_steps_per_rollout == 1


def test_disaggregated_gpus_needed() -> None:
    d = derive(make_config(actor_num_gpus_per_node=2, rollout_num_gpus=4), os.environ)
    assert d.gpus_needed == 6 and d.rollout_engines == 4
    assert derive(make_config(actor_num_gpus_per_node=2, rollout_num_gpus=4,
                              colocate=True), os.environ).gpus_needed == 2


def test_no_offload_keeps_models_resident() -> None:
    base = dict(**QWEN3_4B, actor_num_gpus_per_node=4, colocate=True, rollout_batch_size=8,
                n_samples_per_prompt=8, global_batch_size=32, advantage_estimator="ppo",
                use_dynamic_batch_size=True, max_tokens_per_gpu=4096)
    on = derive(make_config(**base), os.environ).memory_gib
    off = derive(make_config(**base, offload_train=False), os.environ).memory_gib
    assert off["generate"]["critic"] > on["generate"]["critic"]
    assert off["generate"]["total"] > on["generate"]["total"]
