"""Every rule: a config that trips it and one that passes it; check() never raises or mutates."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from ppodeck.engine.config import BY_DEST, RunConfig, check, rules_ppo
from ppodeck.engine.config import rules as rules_module

# A clean PPO config (tiny GPT, colocated on one device): zero errors, zero warnings.
BASE: dict[str, Any] = dict(
    num_layers=2, hidden_size=64, ffn_hidden_size=256, num_attention_heads=4,
    group_query_attention=True, num_query_groups=2, kv_channels=16, swiglu=True,
    normalization="RMSNorm", disable_bias_linear=True, use_rotary_position_embeddings=True,
    vocab_size=32, seq_length=64, synthetic_task="copy-digit", model_init="random",
    rollout_backend="hf", actor_num_gpus_per_node=1, colocate=True,
    rm_type="copy-digit", rollout_batch_size=16, n_samples_per_prompt=4, global_batch_size=32,
    num_rollout=60, rollout_max_response_len=6, lr=1e-3, critic_lr=2e-3,
    advantage_estimator="ppo", num_critic_only_steps=1, normalize_advantages=True, kl_coef=0.0,
)
EXISTING = str(Path(__file__).parent)  # any path that exists


def config(passthrough: tuple[str, ...] = (), **changes: Any) -> RunConfig:
    values = {**BASE, **changes}
    return RunConfig(MappingProxyType({k: v for k, v in values.items() if v is not None}),
                     passthrough)


def codes(cfg: RunConfig) -> set[str]:
    return check(cfg).codes()


def test_base_is_clean() -> None:
    report = check(config())
    assert report.ok
    assert not report.warnings, report.warnings


# (code, changes that trip it, changes that pass it)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("value.bad_type", {"lr": "abc"}, {"lr": 1e-3}),
    ("data.chat_template_kwargs_json", {"apply_chat_template_kwargs": "{enable_thinking: 0}"},
     {"apply_chat_template_kwargs": '{"enable_thinking": false}'}),
    ("config.unknown_key", {"not_a_flag": 1}, {}),
    ("value.not_positive", {"rollout_batch_size": 0}, {"rollout_batch_size": 16}),
    ("value.negative", {"lr": -1.0}, {"lr": 0.0}),
    ("value.empty_path", {"ref_load": ""}, {"ref_load": "/nonexistent/ref"}),
    ("value.out_of_unit_range", {"gamma": 1.5}, {"gamma": 0.99}),
    ("value.temperature", {"rollout_temperature": 0.0}, {"rollout_temperature": 0.7}),
    ("value.top_p_zero", {"rollout_top_p": 0.0}, {"rollout_top_p": 0.9}),
    ("ppo.critic_flags_ignored", {"advantage_estimator": "grpo"}, {}),
    ("ppo.critic_enabled", {}, {"advantage_estimator": "grpo"}),
    ("ppo.megatron_only", {"train_backend": "fsdp"}, {"train_backend": "megatron"}),
    ("miles.critic_with_bridge", {"megatron_to_hf_mode": "bridge"},
     {"megatron_to_hf_mode": "raw"}),
    ("ppo.kl_coef_nonzero", {"kl_coef": 0.1}, {"kl_coef": 0.0}),
    ("ppo.critic_placement_overridden", {"critic_num_gpus_per_node": 2},
     {"critic_num_gpus_per_node": 1}),
    ("ppo.critic_placement_inherited", {}, {"critic_num_nodes": 3}),
    ("ppo.critic_parallelism_inherited", {}, {"advantage_estimator": "grpo"}),
    ("ppo.no_offload_train", {"offload_train": False}, {"offload_train": True}),
    ("ppo.offload_train_default", {}, {"offload_train": True}),
    ("ppo.critic_lr_fallback", {"critic_lr": None}, {}),
    ("ppo.critic_save_fallback", {"save": "/tmp/ckpt"}, {"save": "/tmp/c", "critic_save": "/x"}),
    ("ppo.critic_load_fallback", {}, {"critic_load": "/ckpt/critic"}),
    ("ppo.actor_never_trains", {"num_critic_only_steps": 60}, {"num_critic_only_steps": 59}),
    ("algo.grpo_needs_groups", {"advantage_estimator": "grpo", "n_samples_per_prompt": 1},
     {"advantage_estimator": "grpo", "n_samples_per_prompt": 2}),
    ("algo.ref_update_without_ref", {"ref_update_interval": 5},
     {"ref_update_interval": 5, "use_kl_loss": True}),
    ("parallel.world_size_not_divisible",
     {"actor_num_gpus_per_node": 3, "tensor_model_parallel_size": 2},
     {"actor_num_gpus_per_node": 4, "tensor_model_parallel_size": 2}),
    ("model.heads_not_divisible_by_tp",
     {"actor_num_gpus_per_node": 3, "tensor_model_parallel_size": 3},
     {"actor_num_gpus_per_node": 2, "tensor_model_parallel_size": 2}),
    ("model.groups_not_divisible_by_tp",
     {"actor_num_gpus_per_node": 2, "tensor_model_parallel_size": 2, "num_query_groups": 1},
     {"actor_num_gpus_per_node": 2, "tensor_model_parallel_size": 2}),
    ("model.heads_not_divisible_by_groups", {"num_query_groups": 3}, {"num_query_groups": 4}),
    ("model.layers_not_divisible_by_pp",
     {"actor_num_gpus_per_node": 3, "pipeline_model_parallel_size": 3},
     {"actor_num_gpus_per_node": 2, "pipeline_model_parallel_size": 2}),
    ("model.shape_required", {"num_layers": None}, {}),
    ("model.vocab_unknown", {"vocab_size": None, "model_init": None, "ref_load": EXISTING}, {}),
    ("model.vocab_required", {"vocab_size": None}, {}),
    ("rollout.num_gpus_required", {"colocate": None}, {"colocate": None, "rollout_num_gpus": 1}),
    ("rollout.no_engines",
     {"colocate": None, "rollout_num_gpus": 1, "rollout_num_gpus_per_engine": 2,
      "rollout_backend": "sglang"},
     {"colocate": None, "rollout_num_gpus": 2, "rollout_num_gpus_per_engine": 2,
      "rollout_backend": "sglang"}),
    ("rollout.engines_floor",
     {"colocate": None, "rollout_num_gpus": 3, "rollout_num_gpus_per_engine": 2,
      "rollout_backend": "sglang"},
     {"colocate": None, "rollout_num_gpus": 4, "rollout_num_gpus_per_engine": 2,
      "rollout_backend": "sglang"}),
    ("colocate.rollout_gpus_override", {"rollout_num_gpus": 4}, {"rollout_num_gpus": 1}),
    ("colocate.rollout_gpus", {}, {"colocate": None, "rollout_num_gpus": 1}),
    ("colocate.offload_rollout_default", {}, {"offload_rollout": True}),
    ("colocate.cuda_graph_prefill", {"sglang_cuda_graph_backend_prefill": "fa3"},
     {"sglang_cuda_graph_backend_prefill": "disabled"}),
    ("offload.expanded", {"offload": True}, {}),
    ("offload.disk_target", {"offload_train_target": "disk", "offload_train": False},
     {"offload_train_target": "disk"}),
    ("debug.exclusive", {"debug_rollout_only": True, "debug_train_only": True},
     {"debug_train_only": True}),
    ("debug.rollout_only", {"debug_rollout_only": True}, {}),
    ("transfer.p2p_colocate", {"update_weight_transfer_mode": "p2p"},
     {"update_weight_transfer_mode": "p2p", "colocate": None, "rollout_num_gpus": 1}),
    ("transfer.disk_delta_colocate", {"update_weight_transfer_mode": "disk-delta"},
     {"update_weight_transfer_mode": "broadcast"}),
    ("async.ppo_needs_correction", {"fully_async": True, "colocate": None, "rollout_num_gpus": 1},
     {"fully_async": True, "colocate": None, "rollout_num_gpus": 1,
      "use_rollout_logprobs": True}),
    ("async.no_colocate", {"fully_async": True, "use_rollout_logprobs": True},
     {"fully_async": True, "use_rollout_logprobs": True, "colocate": None,
      "rollout_num_gpus": 1}),
    ("kl.both_coefs", {"kl_coef": 0.1, "kl_loss_coef": 0.1},
     {"use_kl_loss": True, "kl_loss_coef": 0.1, "ref_load": EXISTING}),
    ("kl.loss_coef_zero", {"use_kl_loss": True, "ref_load": EXISTING},
     {"use_kl_loss": True, "kl_loss_coef": 0.01, "ref_load": EXISTING}),
    ("kl.ref_load_required", {"use_kl_loss": True, "kl_loss_coef": 0.01, "model_init": None},
     {"use_kl_loss": True, "kl_loss_coef": 0.01, "model_init": None, "ref_load": EXISTING}),
    ("kl.ref_from_initial_weights", {"use_kl_loss": True, "kl_loss_coef": 0.01},
     {"use_kl_loss": True, "kl_loss_coef": 0.01, "ref_load": EXISTING}),
    ("kl.ref_load_missing", {"use_kl_loss": True, "ref_load": "/nonexistent/ref"},
     {"use_kl_loss": True, "ref_load": EXISTING}),
    ("ppo.eps_clip_c", {"eps_clip_c": 1.0}, {"eps_clip_c": 3.0}),
    ("ppo.eps_clip_high_below", {"eps_clip_high": 0.1}, {"eps_clip_high": 0.28}),
    ("algo.reinforce_needs_normalize",
     {"advantage_estimator": "reinforce_plus_plus", "normalize_advantages": None},
     {"advantage_estimator": "reinforce_plus_plus"}),
    ("indep_dp.megatron_only", {"advantage_estimator": "grpo", "indep_dp": True,
                                "train_backend": "fsdp"}, {"train_backend": "megatron"}),
    ("algo.rollout_logprobs_xor_tis", {"use_rollout_logprobs": True, "use_tis": True},
     {"use_tis": True}),
    ("algo.mismatch_metrics_need_tis_path", {"get_mismatch_metrics": True},
     {"get_mismatch_metrics": True, "custom_tis_function_path": "my.tis"}),
    ("algo.grpo_std_off", {"advantage_estimator": "grpo", "n_samples_per_prompt": 1},
     {"advantage_estimator": "grpo"}),
    ("remat.critic_only_steps", {"rematerialize_param_from_master_weight": True},
     {"rematerialize_param_from_master_weight": True, "num_critic_only_steps": 0}),
    ("remat.requires",
     {"rematerialize_param_from_master_weight": True, "num_critic_only_steps": 0,
      "keep_old_actor": True},
     {"rematerialize_param_from_master_weight": True, "num_critic_only_steps": 0}),
    ("batch.rollout_batch_size_required", {"rollout_batch_size": None}, {}),
    ("batch.global_batch_size_required", {"global_batch_size": None},
     {"global_batch_size": None, "num_steps_per_rollout": 2}),
    ("data.num_rollout_required", {"num_rollout": None}, {"num_rollout": None, "num_epoch": 1}),
    ("data.num_rollout_from_epochs", {"num_rollout": None, "num_epoch": 2}, {}),
    ("batch.steps_per_rollout_mismatch", {"num_steps_per_rollout": 4},
     {"num_steps_per_rollout": 2}),
    ("batch.not_enough_samples", {"global_batch_size": 128}, {"global_batch_size": 64}),
    ("batch.samples_trimmed", {"global_batch_size": 48}, {"global_batch_size": 16}),
    ("batch.global_batch_below_dp", {"actor_num_gpus_per_node": 8, "global_batch_size": 4},
     {"actor_num_gpus_per_node": 8, "global_batch_size": 8}),
    ("batch.micro_batches_not_divisible",
     {"actor_num_gpus_per_node": 2, "micro_batch_size": 3},
     {"actor_num_gpus_per_node": 2, "micro_batch_size": 2}),
    ("batch.uneven_dp",
     {"actor_num_gpus_per_node": 3, "use_dynamic_batch_size": True, "max_tokens_per_gpu": 256},
     {"actor_num_gpus_per_node": 4, "use_dynamic_batch_size": True, "max_tokens_per_gpu": 256}),
    ("batch.dynamic_needs_max_tokens", {"use_dynamic_batch_size": True},
     {"use_dynamic_batch_size": True, "max_tokens_per_gpu": 128}),
    ("batch.dynamic_global_needs_dynamic", {"use_dynamic_global_batch_size": True},
     {"use_dynamic_global_batch_size": True, "use_dynamic_batch_size": True,
      "max_tokens_per_gpu": 128}),
    ("batch.balance_by_flops_needs_dynamic", {"balance_by_flops": True},
     {"balance_by_flops": True, "use_dynamic_batch_size": True, "max_tokens_per_gpu": 128}),
    ("logging.dashboard_needs_dump_details", {"use_miles_dashboard": True},
     {"use_miles_dashboard": True, "dump_details": "/tmp/dump"}),
    ("logging.dashboard_without_entropy", {"use_miles_dashboard": True},
     {"use_miles_dashboard": True, "use_rollout_entropy": True}),
    ("batch.bshd", {"qkv_format": "bshd", "use_dynamic_batch_size": True,
                    "max_tokens_per_gpu": 128}, {"qkv_format": "bshd"}),
    ("batch.over_sampling_below_rbs", {"over_sampling_batch_size": 8},
     {"over_sampling_batch_size": 32}),
    ("data.prompt_data_required", {"synthetic_task": None},
     {"synthetic_task": None, "prompt_data": "/data/x.jsonl"}),
    ("data.synthetic_overrides_prompt_data", {"prompt_data": "/data/x.jsonl"}, {}),
    ("rollout.no_reward", {"synthetic_task": None, "prompt_data": "/d.jsonl", "rm_type": None},
     {"synthetic_task": None, "prompt_data": "/d.jsonl", "custom_rm_path": "my.rm"}),
    ("rollout.rm_url_required", {"rm_type": "remote_rm"},
     {"rm_type": "remote_rm", "rm_url": "http://rm"}),
    ("eval.interval_needs_data", {"eval_interval": 5},
     {"eval_interval": 5, "eval_prompt_data": ("aime", "/d/aime.jsonl")}),
    ("rollout.prompt_exceeds_context",
     {"rollout_max_context_len": 10, "rollout_max_prompt_len": 10},
     {"rollout_max_context_len": 10, "rollout_max_prompt_len": 9}),
    ("ckpt.save_interval_needs_save", {"save_interval": 5},
     {"save_interval": 5, "save": "/tmp/ckpt"}),
    ("ckpt.save_trigger_sentinel_needs_save", {"save_trigger_sentinel": "/tmp/s"},
     {"save_trigger_sentinel": "/tmp/s", "save": "/tmp/ckpt"}),
    ("ckpt.custom_megatron_post_save_hook_path_needs_save",
     {"custom_megatron_post_save_hook_path": "my.hook"},
     {"custom_megatron_post_save_hook_path": "my.hook", "save": "/tmp/ckpt"}),
    ("ckpt.no_initial_weights", {"model_init": None}, {"model_init": None, "ref_load": EXISTING}),
    ("ckpt.hf_converted_at_start", {"model_init": None, "hf_checkpoint": EXISTING},
     {"model_init": None, "hf_checkpoint": EXISTING, "ref_load": EXISTING}),
    ("ckpt.hf_checkpoint_missing", {"hf_checkpoint": "/nonexistent/hf"},
     {"hf_checkpoint": EXISTING}),
    ("ppodeck.hf_engine_tp",
     {"actor_num_gpus_per_node": 2, "rollout_num_gpus_per_engine": 2},
     {"actor_num_gpus_per_node": 2, "rollout_num_gpus_per_engine": 2,
      "rollout_backend": "sglang"}),
    ("ppodeck.hf_multinode", {"actor_num_nodes": 2},
     {"actor_num_nodes": 2, "rollout_backend": "sglang"}),
    # run-loop flags (issue #14): eval, tracking, debug modes, weight push, CI
    ("eval.prompt_data_pairs", {"eval_interval": 5, "eval_prompt_data": ("a", "/x", "b")},
     {"eval_interval": 5, "eval_prompt_data": ("a", "/x")}),
    ("eval.no_interval", {"eval_prompt_data": ("a", "/x")},
     {"eval_prompt_data": ("a", "/x"), "eval_interval": 5}),
    ("eval.skipped_train_only",
     {"eval_interval": 5, "eval_prompt_data": ("a", "/x"), "debug_train_only": True},
     {"eval_interval": 5, "eval_prompt_data": ("a", "/x")}),
    ("eval.rollout_fallbacks", {"eval_interval": 5, "eval_prompt_data": ("a", "/x")},
     {"eval_interval": 5, "eval_prompt_data": ("a", "/x"), "eval_temperature": 0.0,
      "eval_top_p": 1.0, "eval_top_k": -1, "eval_max_response_len": 8}),
    ("tracking.wandb_offline", {"use_wandb": True}, {"use_wandb": True, "wandb_mode": "online"}),
    ("tracking.tb_dir", {"use_tensorboard": True},
     {"use_tensorboard": True, "tb_project_name": "p"}),
    ("debug.train_only_reuses_batch", {"debug_train_only": True}, {}),
    ("rollout.sparse_weight_push", {"update_weights_interval": 2}, {}),
    ("ci.weight_check_unavailable", {"ci_test": True, "rollout_backend": "sglang"},
     {"ci_test": True, "rollout_backend": "sglang", "ci_disable_weight_update_checker": True}),
    ("ci.grad_norm_save_wins", {"ci_test": True, "ci_save_grad_norm": "/a",
                                "ci_load_grad_norm": "/b"},
     {"ci_test": True, "ci_save_grad_norm": "/a"}),
]


@pytest.mark.parametrize(("code", "trip", "passing"), CASES, ids=[c[0] for c in CASES])
def test_rule_trips_and_passes(code: str, trip: dict, passing: dict) -> None:
    assert code in codes(config(**trip)), f"{code} should fire for {trip}"
    assert code not in codes(config(**passing)), f"{code} should not fire for {passing}"


def test_passthrough_is_reported() -> None:
    assert "engine.passthrough_ignored" in codes(config(passthrough=("--sglang-foo", "1")))
    assert "engine.passthrough_ignored" not in codes(config())


def _codes_in_rules_source() -> set[str]:
    source = Path(rules_module.__file__).read_text() + Path(rules_ppo.__file__).read_text()
    found = set(re.findall(r'"(?:error|warning|info)",\s*"([a-z_]+\.[a-z0-9_]+)"', source))
    found |= set(re.findall(r'Issue\("(?:error|warning|info)", "([a-z_]+\.[a-z0-9_]+)"', source))
    found |= {"transfer.p2p_colocate", "transfer.disk_delta_colocate",
              "ckpt.save_interval_needs_save", "ckpt.save_trigger_sentinel_needs_save",
              "ckpt.custom_megatron_post_save_hook_path_needs_save"}
    return found - {"internal.check_failed"}


def test_every_rule_code_has_a_case() -> None:
    # tracking.extra_missing needs a missing library: tests/config/test_rules_run_loop.py
    covered = {c[0] for c in CASES} | {"ppo.critic_resume", "tracking.extra_missing"}
    assert _codes_in_rules_source() <= covered, _codes_in_rules_source() - covered


def test_critic_resume_from_sibling(tmp_path: Path) -> None:
    save = tmp_path / "ckpt"
    sibling = tmp_path / "ckpt_critic"
    sibling.mkdir()
    assert "ppo.critic_resume" not in codes(config(save=str(save)))
    (sibling / "latest_checkpointed_iteration.txt").write_text("7")
    report = check(config(save=str(save)))
    assert "ppo.critic_resume" in report.codes()
    assert "ppo.critic_load_fallback" not in report.codes()


def test_issue_names_flags_on_command_line() -> None:
    report = check(config(kl_coef=0.1))
    [issue] = [i for i in report.issues if i.code == "ppo.kl_coef_nonzero"]
    assert issue.flags == ("--kl-coef",)
    assert "never sees ref log probs" in issue.message
    assert "--use-kl-loss" in issue.fix and "--kl-loss-coef" in issue.fix


def test_samples_trimmed_says_how_many() -> None:
    [issue] = [i for i in check(config(global_batch_size=48)).issues
               if i.code == "batch.samples_trimmed"]
    assert "trims 16 samples" in issue.message


def test_world_size_uses_megatron_message() -> None:
    report = check(config(actor_num_gpus_per_node=3, tensor_model_parallel_size=2))
    [issue] = [i for i in report.issues if i.code == "parallel.world_size_not_divisible"]
    assert issue.message.startswith("world size (3) is not divisible by tensor parallel size (2)")


def test_no_offload_train_uses_miles_text() -> None:
    [issue] = [i for i in check(config(offload_train=False)).issues
               if i.code == "ppo.no_offload_train"]
    assert issue.level == "warning"
    assert issue.message.startswith("--no-offload-train with shared Actor/Critic PPO is reserved")


GARBAGE = [None, "abc", "", -1, 0, 1.5, float("nan"), float("inf"), True, [], ["x", 1], {},
           {"a": 1}, object(), b"bytes", 10**30, ("a",)]


def _garbage_id(value: Any) -> str:
    """repr, but stable across processes (pytest-xdist workers must collect the same ids)."""
    return "object()" if type(value) is object else repr(value)


@pytest.mark.parametrize("value", GARBAGE, ids=_garbage_id)
def test_check_never_raises_on_garbage(value: Any) -> None:
    for dest in BY_DEST:
        report = check(config(**{dest: value}))
        assert report.issues is not None
        assert all(i.code != "internal.check_failed" for i in report.issues), (dest, value)


def test_check_survives_non_mapping_values() -> None:
    report = check(RunConfig(values=42, passthrough=None))  # type: ignore[arg-type]
    assert not report.ok
    assert all(i.code != "internal.check_failed" for i in report.issues)


def test_check_never_mutates() -> None:
    values = {**BASE, "lr": "abc", "kl_coef": 0.3, "offload_train": False, "critic_lr": None}
    cfg = RunConfig(values, ("--x", "1"))
    before = copy.deepcopy(values)
    check(cfg)
    assert values == before
    assert cfg.passthrough == ("--x", "1")


def test_bad_type_message_names_flag() -> None:
    [issue] = [i for i in check(config(lr="abc")).issues if i.code == "value.bad_type"]
    assert issue.flags == ("--lr",)
    assert issue.message == "--lr expects a number, got 'abc'"


def test_check_is_fast_enough_for_every_keystroke() -> None:
    """A loose guard (the real figure is in bench/config_bench.py): well under 2 ms."""
    import statistics
    import time

    cfg = config(save="/tmp/ckpt", use_kl_loss=True, ref_load=EXISTING)
    samples = []
    for _ in range(300):
        start = time.perf_counter()
        check(cfg)
        samples.append(time.perf_counter() - start)
    assert statistics.median(samples) < 2e-3


def test_dynamic_global_batch_size_gets_miles_message_and_its_multi_lora_exception() -> None:
    """miles' assert text (arguments.py, miles_validate_args); multi-LoRA skips the assert."""
    [issue] = [i for i in check(config(use_dynamic_global_batch_size=True)).issues
               if i.code == "batch.dynamic_global_needs_dynamic"]
    assert issue.level == "error"
    assert issue.message.startswith(
        "--use-dynamic-global-batch-size requires --use-dynamic-batch-size (with "
        "--max-tokens-per-gpu): static micro-batching cannot guarantee dp_size * mb_group")
    assert issue.flags == ("--use-dynamic-global-batch-size", "--use-dynamic-batch-size")
    multi_lora = config(use_dynamic_global_batch_size=True, multi_lora_n_adapters=2)
    assert "batch.dynamic_global_needs_dynamic" not in codes(multi_lora)
    # Our engine refuses the flag too, but miles' own rule fires on its own, not hidden by it.
    assert "engine.refused" in codes(config(use_dynamic_global_batch_size=True))
