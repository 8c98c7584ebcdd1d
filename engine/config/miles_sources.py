"""Where each of PPO Deck's miles-mirroring rules comes from (issue #46): the miles or Megatron
file, line and a short quoted snippet at the pinned commits (PURE: data).

`python -m bench.miles_oracle --check-sources --miles-git G --megatron-git G` reads each file at
the pin (or at `--sources-at REV`) and reports a rule whose snippet is gone or moved; a test
holds the table's shape, and that every error rule check() can raise is either here or in
OWN_RULES with why it is PPO Deck's own. Line numbers point at the statement that refuses
(the assert or raise, or its message line when the statement spans several).
"""

from __future__ import annotations

from dataclasses import dataclass

MILES_COMMIT = "31f1ca961a94cb860cec3b2dea34ec332bfa8f76"  # radixark/miles
MEGATRON_COMMIT = "2e64d788b67fe8155774200c87606e1e449c494b"  # radixark/Megatron-LM miles-main
COMMITS = {"miles": MILES_COMMIT, "megatron": MEGATRON_COMMIT}


@dataclass(frozen=True)
class Source:
    code: str  # the rule's issue code
    repo: str  # "miles" or "megatron"
    path: str  # inside that repository
    line: int  # at the pinned commit
    snippet: str  # text on that line, quoted exactly


ARGS = "miles/utils/arguments.py"
MEGATRON_ARGS = "megatron/training/arguments.py"
TRANSFORMER_CONFIG = "megatron/core/transformer/transformer_config.py"
# (code, repo, path, line, snippet)
_ROWS: tuple[tuple[str, str, str, int, str], ...] = (
    (
        "algo.mismatch_metrics_need_tis_path",
        "miles",
        ARGS,
        3148,
        "custom_tis_function_path must be set when get_mismatch_metrics is set",
    ),
    (
        "algo.reinforce_needs_normalize",
        "miles",
        ARGS,
        3139,
        "require advantage normalization. Please add `--normalize-advantages`",
    ),
    (
        "algo.rollout_logprobs_xor_tis",
        "miles",
        ARGS,
        3143,
        "use_rollout_logprobs and use_tis cannot be set at the same time.",
    ),
    ("async.no_colocate", "miles", ARGS, 59, "--fully-async cannot colocate"),
    (
        "async.ppo_needs_correction",
        "miles",
        ARGS,
        3603,
        "assert args.use_rollout_logprobs or args.use_tis or args.keep_old_actor",
    ),
    (
        "batch.balance_by_flops_needs_dynamic",
        "miles",
        ARGS,
        3175,
        "--balance-by-flops requires --use-dynamic-batch-size",
    ),
    ("batch.bshd", "miles", ARGS, 3515, "bshd format is only supported for megatron backend."),
    (
        "batch.dynamic_global_needs_dynamic",
        "miles",
        ARGS,
        3169,
        "--use-dynamic-global-batch-size requires --use-dynamic-batch-size",
    ),
    (
        "batch.dynamic_needs_max_tokens",
        "miles",
        ARGS,
        3156,
        "max_tokens_per_gpu must be set when use_dynamic_batch_size is set",
    ),
    (
        "batch.micro_batches_not_divisible",
        "miles",
        "miles/utils/dp_schedule.py",
        131,
        "so step_size % (dp_size * micro_batch_size * mb_group) == 0.",
    ),
    (
        "batch.not_enough_samples",
        "miles",
        "miles/ray/rollout/rollout_data_conversion.py",
        45,
        "Not enough samples {len(data)} for global_batch_size",
    ),
    (
        "batch.over_sampling_below_rbs",
        "miles",
        ARGS,
        3450,
        "assert args.over_sampling_batch_size >= args.rollout_batch_size",
    ),
    ("batch.rollout_batch_size_required", "miles", ARGS, 1084, "required=True,"),
    (
        "batch.steps_per_rollout_mismatch",
        "miles",
        ARGS,
        3434,
        "assert args.global_batch_size == global_batch_size",
    ),
    (
        "ckpt.custom_megatron_post_save_hook_path_needs_save",
        "miles",
        ARGS,
        3082,
        "'--save' is required when custom_megatron_post_save_hook_path is set.",
    ),
    (
        "ckpt.save_interval_needs_save",
        "miles",
        ARGS,
        3076,
        "'--save' is required when save_interval is set.",
    ),
    (
        "ckpt.save_trigger_sentinel_needs_save",
        "miles",
        ARGS,
        3079,
        "'--save' is required when save_trigger_sentinel is set.",
    ),
    (
        "data.chat_template_kwargs_json",
        "miles",
        ARGS,
        1035,
        '"--apply-chat-template-kwargs", type=json.loads',
    ),
    (
        "data.num_rollout_required",
        "miles",
        ARGS,
        3466,
        "num_epoch is not set, but num_rollout is not set",
    ),
    (
        "debug.exclusive",
        "miles",
        ARGS,
        3250,
        "assert not (args.debug_rollout_only and args.debug_train_only)",
    ),
    (
        "eval.interval_needs_data",
        "miles",
        ARGS,
        3061,
        "Evaluation datasets must be configured when eval_interval is set.",
    ),
    (
        "eval.prompt_data_pairs",
        "miles",
        ARGS,
        2776,
        "eval prompt data must be provided as name/path pairs.",
    ),
    (
        "indep_dp.megatron_only",
        "miles",
        ARGS,
        2877,
        "indep_dp requires train_backend='megatron', got",
    ),
    ("kl.both_coefs", "miles", ARGS, 3134, "Only one of kl_coef and kl_loss_coef can be set"),
    (
        "logging.dashboard_needs_dump_details",
        "miles",
        "miles/dashboard/args.py",
        76,
        "assert args.dump_details is not None",
    ),
    (
        "miles.ft_trainer_with_critic",
        "miles",
        ARGS,
        3213,
        "Shared Actor/Critic PPO is not supported with MILES_EXPERIMENTAL_FT_TRAINER=1",
    ),
    (
        "miles.critic_with_bridge",
        "miles",
        ARGS,
        3211,
        "Critic models are not supported with --megatron-to-hf-mode bridge",
    ),
    (
        "miles.hf_checkpoint_not_a_directory",
        "miles",
        "miles/utils/hf_config.py",
        106,
        "config = AutoConfig.from_pretrained(checkpoint_path",
    ),
    (
        "miles.hf_config_mismatch",
        "miles",
        ARGS,
        3707,
        'raise AssertionError("hf_validate_args failed: "',
    ),
    ("miles.min_lr_above_lr", "megatron", MEGATRON_ARGS, 900, "assert args.min_lr <= args.lr"),
    (
        "miles.opd_needs_type",
        "miles",
        ARGS,
        2988,
        "--opd-type must be specified when --use-opd is enabled.",
    ),
    (
        "miles.overlap_param_gather_needs_overlap_grad_reduce",
        "megatron",
        MEGATRON_ARGS,
        666,
        "'Must use --overlap-param-gather with --overlap-grad-reduce'",
    ),
    (
        "miles.overlap_param_gather_needs_use_distributed_optimizer",
        "megatron",
        MEGATRON_ARGS,
        664,
        "'--overlap-param-gather only supported with distributed optimizer or megatron fsdp'",
    ),
    ("miles.ref_load_missing", "miles", ARGS, 2977, "does not exist, please check the path."),
    (
        "miles.save_needs_interval",
        "megatron",
        MEGATRON_ARGS,
        902,
        "assert args.save_interval is not None",
    ),
    (
        "miles.selective_recompute_method",
        "megatron",
        MEGATRON_ARGS,
        964,
        "assert args.recompute_method is None",
    ),
    (
        "miles.seq_length_vs_cp",
        "megatron",
        MEGATRON_ARGS,
        882,
        "assert args.seq_length % (args.context_parallel_size * 2) == 0",
    ),
    ("miles.tito_needs_session_server", "miles", ARGS, 2913, "requires --use-session-server; "),
    (
        "model.groups_not_divisible_by_tp",
        "megatron",
        TRANSFORMER_CONFIG,
        1029,
        "self.num_query_groups % self.tensor_model_parallel_size != 0",
    ),
    (
        "model.heads_not_divisible_by_tp",
        "megatron",
        TRANSFORMER_CONFIG,
        1013,
        "if self.num_attention_heads % self.tensor_model_parallel_size != 0:",
    ),
    (
        "model.layers_not_divisible_by_pp",
        "megatron",
        MEGATRON_ARGS,
        608,
        "assert num_layers % args.transformer_pipeline_model_parallel_size == 0",
    ),
    (
        "offload.disk_target",
        "miles",
        ARGS,
        3346,
        "--offload-train-target=disk requires --offload-train",
    ),
    (
        "parallel.world_size_not_divisible",
        "megatron",
        MEGATRON_ARGS,
        317,
        "assert args.world_size % total_model_size == 0",
    ),
    (
        "ppo.eps_clip_c",
        "miles",
        "miles/backends/training_utils/loss_hub/math_utils.py",
        270,
        "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0",
    ),
    (
        "ppo.kl_coef_nonzero",
        "miles",
        ARGS,
        3218,
        "Shared Actor/Critic PPO does not support reward-level KL (--kl-coef)",
    ),
    (
        "ppo.megatron_only",
        "miles",
        ARGS,
        3208,
        "Shared Actor/Critic PPO requires the Megatron backend",
    ),
    (
        "remat.critic_only_steps",
        "miles",
        ARGS,
        2842,
        "critic-only steps run update_weights repeatedly without an intervening actor wake_up",
    ),
    ("remat.requires", "miles", ARGS, 2822, "assert args.colocate and args.offload_train"),
    (
        "rollout.prompt_exceeds_context",
        "miles",
        ARGS,
        3499,
        "args.rollout_max_prompt_len <= args.rollout_max_context_len - 1",
    ),
)
SOURCES = tuple(Source(*row) for row in _ROWS)
BY_CODE = {source.code: source for source in SOURCES}

# Error rules that mirror no line of miles or Megatron, each with why (prefixes end in ".").
OWN_RULES: dict[str, str] = {
    "engine.": "PPO Deck's engine and this machine (the engine capability classes)",
    "value.": "a flag value's type or range, as PPO Deck types miles' argparse flags",
    "argv.missing_value": "PPO Deck's reading of a pasted command line",
    "internal.check_failed": "a failure inside check() itself",
    "algo.grpo_needs_groups": "PPO Deck's: one sample per prompt makes every group-normalized "
    "advantage 0; miles runs it",
    "batch.global_batch_below_dp": "PPO Deck's: miles fails later, splitting the step over DP "
    "ranks (miles/utils/dp_schedule.py), not at start-up",
    "batch.global_batch_size_required": "miles leaves --global-batch-size None and fails later, "
    "with no check of its own to cite",
    "data.prompt_data_required": "PPO Deck's: miles fails when it loads the dataset",
    "kl.ref_load_required": "PPO Deck's engine only; under --engine miles, "
    "miles.ref_load_missing cites miles",
    "miles.gpus_missing": "this machine's GPUs, not a rule of miles",
    "model.heads_not_divisible_by_groups": "PPO Deck's shape check: Megatron fails building the "
    "attention layer, with no argument check to cite",
    "model.shape_required": "PPO Deck's: Megatron fails on a missing model shape without a "
    "message of its own",
    "model.vocab_required": "--model-init random is PPO Deck's own flag",
    "rollout.group_rm_eval": "reward code named by flags: miles finds out when it is called",
    "rollout.rm_url_required": "reward code named by flags: miles finds out when it is called",
    "rollout.rm_url_scheme": "reward code named by flags: miles finds out when it is called",
    "rollout.no_engines": "PPO Deck's placement arithmetic: miles fails building its placement "
    "group",
    "rollout.num_gpus_required": "PPO Deck's placement arithmetic: miles fails building its "
    "placement group",
    "tracking.extra_missing": "this machine's installed packages",
}


def own_reason(code: str) -> str | None:
    """Why an error rule is PPO Deck's own, or None when it should cite miles."""
    for key, why in OWN_RULES.items():
        if code == key or (key.endswith(".") and code.startswith(key)):
            return why
    return None


def later_in_miles(code: str) -> str:
    """The words a PPO Deck error uses when miles has the same check but runs it after
    start-up (so miles' parser accepts the config): where, at the pin."""
    source = BY_CODE[code]
    return f"this check runs later in miles: {source.path}:{source.line}"
