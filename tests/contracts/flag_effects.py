"""For every flag the schema classes honoured: the tests that show it changes what runs.

Checked by tests/contracts/test_flag_effects.py: an entry for every honoured flag and no
other, each node id a test function defined in that file, and the test's source naming the flag
(--eps-clip, eps-clip or eps_clip). A note says where the effect is shown at a seam rather than
end to end (GPU-only effects, memory knobs) or what is doubtful about the flag.

Most flags point at tests/engine/test_flag_effects.py, which runs the smallest piece of the
engine each flag feeds at two values; older tests elsewhere are named where they already
show the effect.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Effect:
    tests: tuple[str, ...]  # pytest node ids; a parametrized test without its [id]
    note: str = ""


def E(*tests: str, note: str = "") -> Effect:  # noqa: N802 - reads as a table row
    return Effect(tests, note)


FX = "tests/engine/test_flag_effects.py::"
LOSS = FX + "test_ppo_flags_change_the_actor_loss"
MODEL = FX + "test_model_flags_change_the_model_the_trainer_builds"
ADAM = FX + "test_optimizer_flags_change_the_adam_steps"
SAMPLING = FX + "test_sampling_flags_narrow_the_samples_of_a_prompt"
SIZES = FX + "test_batch_size_flags_set_the_rollout_size"
EVAL = FX + "test_eval_flags_change_what_evaluation_asks_the_generator"
WANDB = FX + "test_wandb_flags_change_how_the_run_is_started"
ADVANTAGES = FX + "test_advantage_flags_change_the_advantages_trained_on"
MICRO = FX + "test_batching_flags_change_the_forward_only_micro_batches"
OFFLOAD = FX + "test_offload_flags_put_the_trainers_to_sleep_between_their_phases"
CKPT_LOAD = FX + "test_load_ref_load_and_critic_load_pick_what_init_loads"
PLACEMENT = "tests/engine/test_placement.py::test_bundle_layout_matches_miles"
ENGINE_LAYOUT = "tests/rollout/test_sglang_backend.py::test_engine_layout"
SGLANG_KWARGS = ("tests/rollout/test_sglang_backend.py::"
                 "test_in_process_engines_get_documented_kwargs")
RUN_LOOP = "tests/engine/test_driver_run_loop.py::"
CI = "tests/engine/test_ci_checks.py::"
LR = "tests/train/test_train_parts.py::"
GPU_SEAM = "CUDA-only effect: shown where the value reaches what the GPU path is given"

FLAG_EFFECTS: dict[str, Effect] = {
    # ---- cluster and offload
    "--actor-num-nodes": E(ENGINE_LAYOUT),
    "--actor-num-gpus-per-node": E(ENGINE_LAYOUT),
    "--rollout-num-gpus": E(PLACEMENT, ENGINE_LAYOUT),
    "--colocate": E(OFFLOAD, PLACEMENT, ENGINE_LAYOUT),
    "--offload": E(OFFLOAD),
    "--offload-train": E(OFFLOAD),
    "--offload-rollout": E("tests/rollout/test_sglang_backend.py::"
                           "test_offload_level_and_no_offload"),
    "--offload-rollout-level": E(FX + "test_offload_rollout_level_picks_what_the_engines_release"),
    "--debug-rollout-only": E(RUN_LOOP + "test_debug_rollout_only_generates_and_evaluates_but_"
                              "trains_nothing", PLACEMENT),
    "--debug-train-only": E(RUN_LOOP + "test_debug_train_only_trains_without_push_or_eval",
                            PLACEMENT),
    # ---- rollout
    "--rollout-temperature": E(SAMPLING, LOSS),
    "--rollout-top-p": E(SAMPLING),
    "--rollout-top-k": E(SAMPLING),
    "--rollout-max-response-len": E(FX + "test_rollout_max_response_len_caps_the_responses"),
    "--rollout-max-prompt-len": E("tests/rollout/test_data.py::"
                                  "test_max_prompt_len_drops_and_counts"),
    "--rollout-max-context-len": E("tests/rollout/test_hf_backend.py::"
                                   "test_the_context_length_bounds_prompt_plus_response_per_row"),
    "--update-weights-interval": E(RUN_LOOP + "test_weights_are_pushed_every_nth_rollout_and_"
                                   "skips_are_logged"),
    "--rm-type": E("tests/rollout/test_manager.py::"
                   "test_flag_rm_type_is_used_when_metadata_has_none"),
    "--reward-key": E("tests/rollout/test_user_rewards.py::"
                      "test_a_plain_function_and_a_dict_reward_read_with_reward_key"),
    "--custom-rm-path": E("tests/rollout/test_manager_user_rewards.py::"
                          "test_a_custom_reward_is_called_for_every_sample_and_trained_on"),
    "--group-rm": E("tests/rollout/test_user_rewards.py::"
                    "test_group_rm_calls_once_per_prompt_group"),
    "--rm-url": E("tests/rollout/test_manager_user_rewards.py::"
                  "test_a_remote_rm_gets_every_sample_and_its_answers_are_trained_on"),
    "--custom-reward-post-process-path": E("tests/rollout/test_user_rewards.py::"
                                           "test_custom_reward_post_process_as_miles_calls_it"),
    "--dynamic-sampling-filter-path": E("tests/rollout/test_manager_user_rewards.py::"
                                        "test_dynamic_sampling_keeps_only_groups_the_filter_"
                                        "passes"),
    "--check-weight-update-equal": E(CI + "test_debug_modes_and_the_disable_flag_turn_the_"
                                     "weight_check_off"),
    # ---- data
    "--prompt-data": E("tests/rollout/test_manager.py::"
                       "test_flag_rm_type_is_used_when_metadata_has_none"),
    "--input-key": E(FX + "test_input_label_and_metadata_keys_pick_the_fields"),
    "--label-key": E(FX + "test_input_label_and_metadata_keys_pick_the_fields"),
    "--metadata-key": E(FX + "test_input_label_and_metadata_keys_pick_the_fields"),
    "--apply-chat-template": E("tests/rollout/test_data.py::"
                               "test_chat_template_wraps_string_prompts_and_takes_message_lists",
                               FX + "test_apply_chat_template_kwargs_reach_the_template"),
    "--apply-chat-template-kwargs": E(FX + "test_apply_chat_template_kwargs_reach_the_template"),
    "--rollout-shuffle": E(FX + "test_rollout_shuffle_and_seed_order_the_prompts"),
    "--rollout-seed": E(FX + "test_rollout_shuffle_and_seed_order_the_prompts",
                        FX + "test_rollout_seed_changes_the_sampled_responses", EVAL),
    "--num-rollout": E(FX + "test_num_rollout_is_how_many_rollouts_the_loop_runs"),
    "--rollout-batch-size": E(SIZES),
    "--n-samples-per-prompt": E(SIZES),
    "--global-batch-size": E(SIZES),
    "--num-steps-per-rollout": E(SIZES),
    "--micro-batch-size": E(MICRO),
    "--over-sampling-batch-size": E("tests/rollout/test_manager_user_rewards.py::"
                                    "test_dynamic_sampling_keeps_only_groups_the_filter_passes"),
    "--disable-rollout-trim-samples": E(FX + "test_disable_rollout_trim_samples_keeps_the_"
                                        "partial_global_batch"),
    "--eval-prompt-data": E(RUN_LOOP + "test_eval_before_training_and_every_interval"),
    "--eval-interval": E(RUN_LOOP + "test_eval_before_training_and_every_interval"),
    "--n-samples-per-eval-prompt": E(EVAL),
    "--eval-max-response-len": E(EVAL),
    "--eval-top-k": E(EVAL),
    "--eval-top-p": E(EVAL),
    "--eval-temperature": E(EVAL),
    "--skip-eval-before-train": E(RUN_LOOP + "test_skip_eval_before_train"),
    # ---- optimizer and schedule
    "--lr": E(ADAM),
    "--min-lr": E(FX + "test_min_lr_and_lr_decay_iters_set_where_the_decay_ends"),
    "--lr-decay-style": E(LR + "test_lr_warmup_then_linear_decay_counts_samples"),
    "--lr-decay-iters": E(FX + "test_min_lr_and_lr_decay_iters_set_where_the_decay_ends"),
    "--lr-warmup-iters": E(LR + "test_lr_warmup_then_linear_decay_counts_samples"),
    "--lr-warmup-fraction": E(LR + "test_warmup_fraction_counts_against_the_decay_steps"),
    "--weight-decay": E(ADAM),
    "--adam-beta1": E(ADAM),
    "--adam-beta2": E(ADAM),
    "--adam-eps": E(ADAM),
    "--clip-grad": E(ADAM),
    "--seed": E("tests/train/test_algo_flags.py::test_seed_zero_reaches_the_random_init",
                "tests/rollout/test_sglang_backend.py::"
                "test_engine_kwargs_read_resolved_args_as_they_are"),
    "--calculate-per-token-loss": E(LOSS),
    "--use-distributed-optimizer": E(
        FX + "test_use_distributed_optimizer_is_forced_on_under_adam",
        note="SUSPECT: resolve() forces it on under --optimizer adam, the only optimizer "
             "check() accepts, so its value never reaches the engine"),
    # ---- critic
    "--critic-lr": E(LR + "test_critic_reads_its_own_lr_and_warmup",
                     note="the critic's settings take it; what an lr does to the steps: "
                          "test_optimizer_flags_change_the_adam_steps"),
    "--critic-load": E(CKPT_LOAD),
    "--critic-save": E(FX + "test_save_and_critic_save_are_where_each_role_saves"),
    "--critic-lr-warmup-iters": E(LR + "test_critic_reads_its_own_lr_and_warmup"),
    "--num-critic-only-steps": E(FX + "test_num_critic_only_steps_holds_the_actor_back"),
    # ---- PPO
    "--advantage-estimator": E(ADVANTAGES),
    "--eps-clip": E(LOSS),
    "--eps-clip-high": E(LOSS),
    "--eps-clip-c": E(LOSS),
    "--value-clip": E(FX + "test_value_clip_bounds_the_critic_loss"),
    "--use-kl-loss": E(LOSS),
    "--kl-loss-coef": E(LOSS),
    "--kl-loss-type": E(LOSS),
    "--use-unbiased-kl": E(LOSS),
    "--entropy-coef": E(LOSS),
    "--observe-training-entropy": E(FX + "test_observe_training_entropy_computes_the_entropy_"
                                    "without_training_on_it"),
    "--gamma": E(ADVANTAGES),
    "--lambd": E(ADVANTAGES),
    "--normalize-advantages": E(ADVANTAGES),
    "--ref-update-interval": E(FX + "test_ref_update_interval_copies_the_actor_into_the_ref_"
                               "every_nth_rollout"),
    "--use-rollout-logprobs": E("tests/train/test_algo_flags.py::"
                                "test_rollout_logprobs_become_pi_old"),
    "--use-tis": E(FX + "test_tis_flags_weigh_the_policy_loss_by_the_clipped_rollout_ratio"),
    "--tis-clip": E(FX + "test_tis_flags_weigh_the_policy_loss_by_the_clipped_rollout_ratio"),
    "--tis-clip-low": E(FX + "test_tis_flags_weigh_the_policy_loss_by_the_clipped_rollout_"
                        "ratio"),
    "--disable-rewards-normalization": E("tests/rollout/test_grpo_rewards.py::"
                                         "test_ppo_and_disabled_normalization_keep_raw_rewards"),
    "--disable-grpo-std-normalization": E("tests/rollout/test_grpo_rewards.py::"
                                          "test_disable_grpo_std_normalization_only_centres"),
    # ---- checkpoints
    "--hf-checkpoint": E(FX + "test_hf_checkpoint_and_model_init_pick_the_initial_weights"),
    "--ref-load": E(CKPT_LOAD),
    "--load": E(CKPT_LOAD),
    "--save": E(FX + "test_save_and_critic_save_are_where_each_role_saves",
                FX + "test_save_and_save_interval_decide_when_the_loop_saves"),
    "--save-interval": E(FX + "test_save_and_save_interval_decide_when_the_loop_saves"),
    # ---- parallelism and performance
    "--megatron-to-hf-mode": E("tests/train/test_bridge_mode.py::"
                               "test_worker_refuses_bridge_mode_before_building_anything"),
    "--tensor-model-parallel-size": E("tests/train/test_worker.py::test_tp2_matches_one_rank"),
    "--pipeline-model-parallel-size": E("tests/train/test_worker.py::"
                                        "test_pp2_values_and_losses_match_one_rank"),
    "--context-parallel-size": E("tests/train/test_context_parallel.py::"
                                 "test_three_rollouts_match_one_rank"),
    "--sequence-parallel": E("tests/train/test_context_parallel.py::"
                             "test_sequence_parallel_norm_marks_its_weight_for_the_tp_sum"),
    "--use-dynamic-batch-size": E(MICRO),
    "--max-tokens-per-gpu": E(MICRO),
    "--log-probs-max-tokens-per-gpu": E(MICRO),
    "--log-probs-chunk-size": E(FX + "test_log_probs_chunk_size_splits_the_log_prob_rows_and_"
                                "keeps_their_values",
                                note="a memory knob: the rows are split, the values kept"),
    "--allgather-cp": E("tests/train/test_context_parallel.py::"
                        "test_transformer_config_carries_cp_communication_and_sequence_"
                        "parallelism", note="transformer-engine's CP attention only (CUDA)"),
    "--recompute-granularity": E(FX + "test_recompute_flags_reach_megatrons_config",
                                 note=GPU_SEAM + " (Megatron's checkpointing needs CUDA's RNG)"),
    "--recompute-method": E(FX + "test_recompute_flags_reach_megatrons_config", note=GPU_SEAM),
    "--recompute-num-layers": E(FX + "test_recompute_flags_reach_megatrons_config",
                                note=GPU_SEAM),
    "--accumulate-allreduce-grads-in-fp32": E(
        FX + "test_accumulate_allreduce_grads_in_fp32_keeps_fp32_grads_of_bf16_params"),
    # ---- model shape
    "--num-layers": E(MODEL),
    "--hidden-size": E(MODEL),
    "--ffn-hidden-size": E(MODEL),
    "--num-attention-heads": E(MODEL),
    "--group-query-attention": E(MODEL),
    "--num-query-groups": E(MODEL),
    "--kv-channels": E(MODEL),
    "--swiglu": E(MODEL),
    "--normalization": E(MODEL),
    "--norm-epsilon": E(MODEL),
    "--disable-bias-linear": E(MODEL),
    "--qk-layernorm": E(MODEL),
    "--use-rotary-position-embeddings": E(MODEL),
    "--position-embedding-type": E(MODEL),
    "--rotary-base": E(MODEL),
    "--vocab-size": E(MODEL),
    "--untie-embeddings-and-output-weights": E(MODEL),
    "--seq-length": E(MODEL, note="the model's length only where --max-position-embeddings "
                                  "is unset"),
    "--max-position-embeddings": E(MODEL),
    "--attention-dropout": E(FX + "test_dropout_flags_change_training_mode_outputs_only"),
    "--hidden-dropout": E(FX + "test_dropout_flags_change_training_mode_outputs_only"),
    "--bf16": E(LR + "test_critic_reads_its_own_lr_and_warmup", SGLANG_KWARGS,
                note=GPU_SEAM + ": bf16 params on CUDA only, SGLang's dtype"),
    "--add-qkv-bias": E(MODEL),
    "--use-rope-scaling": E(MODEL),
    "--rotary-scaling-factor": E(MODEL),
    # ---- SGLang engines
    "--rollout-num-gpus-per-engine": E(ENGINE_LAYOUT, SGLANG_KWARGS),
    "--sglang-mem-fraction-static": E(SGLANG_KWARGS, note=GPU_SEAM),
    "--sglang-max-running-requests": E(FX + "test_sglang_max_running_requests_reaches_the_"
                                       "engine_arguments", note=GPU_SEAM),
    # ---- tracking and CI
    "--use-wandb": E(FX + "test_use_wandb_and_use_tensorboard_start_their_backends"),
    "--wandb-project": E(WANDB),
    "--wandb-group": E(WANDB),
    "--wandb-key": E(WANDB, "tests/tracking/test_tracking.py::test_modes_and_step_axes"),
    "--wandb-host": E(WANDB),
    "--wandb-team": E(WANDB),
    "--wandb-dir": E(WANDB),
    "--wandb-mode": E("tests/tracking/test_tracking.py::test_modes_and_step_axes"),
    "--wandb-run-id": E(WANDB),
    "--disable-wandb-random-suffix": E("tests/tracking/test_tracking.py::"
                                       "test_wandb_offline_run_holds_the_metrics_on_miles_step_"
                                       "axes"),
    "--wandb-always-use-train-step": E("tests/tracking/test_tracking.py::"
                                       "test_modes_and_step_axes"),
    "--use-tensorboard": E(FX + "test_use_wandb_and_use_tensorboard_start_their_backends"),
    "--tb-project-name": E(FX + "test_tb_project_and_experiment_name_the_event_file_directory"),
    "--tb-experiment-name": E(FX + "test_tb_project_and_experiment_name_the_event_file_"
                              "directory"),
    "--ci-test": E(RUN_LOOP + "test_a_failed_ci_check_fails_the_run_with_that_detail"),
    "--ci-disable-kl-checker": E(FX + "test_ci_disable_flags_turn_their_checks_off"),
    "--ci-disable-logprobs-checker": E(FX + "test_ci_disable_flags_turn_their_checks_off"),
    "--ci-disable-weight-update-checker": E(CI + "test_debug_modes_and_the_disable_flag_turn_"
                                            "the_weight_check_off"),
    "--ci-save-grad-norm": E(CI + "test_grad_norms_saved_then_compared"),
    "--ci-load-grad-norm": E(CI + "test_grad_norms_saved_then_compared"),
    # ---- PPO Deck's own
    "--rollout-backend": E("tests/rollout/test_manager.py::"
                           "test_sglang_backend_without_cuda_or_sglang_is_refused_by_name",
                           "tests/engine/test_init_plan.py::"
                           "test_sglang_keeps_its_start_first_and_a_small_gpu_keeps_miles_order"),
    "--ray-address": E(FX + "test_ray_address_joins_that_cluster_instead_of_a_private_ray"),
    "--run-dir": E(FX + "test_tb_project_and_experiment_name_the_event_file_directory",
                   "tests/tracking/test_tracking.py::test_the_driver_log_says_where_the_files_go"),
    "--synthetic-task": E(FX + "test_synthetic_task_and_num_prompts_make_the_prompt_set"),
    "--synthetic-num-prompts": E(FX + "test_synthetic_task_and_num_prompts_make_the_prompt_set"),
    "--model-init": E(FX + "test_hf_checkpoint_and_model_init_pick_the_initial_weights",
                      SGLANG_KWARGS),
    "--max-prompt-len": E("tests/rollout/test_data.py::test_max_prompt_len_drops_and_counts"),
    "--samples-per-rollout": E("tests/engine/test_samples_keeper.py::test_zero_keeps_none"),
}
