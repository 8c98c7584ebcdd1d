"""PPO and placement rules (spec §3.2, §3.4, §3.6 and the seed's "Constraints").

Each rule is `(e, r, s, out)`; see engine/config/rules.py for the conventions.
"""

from __future__ import annotations

from ..host.tracking_support import INSTALL_FIX, missing_extras, missing_message
from .issues import Out
from .issues import add as _issue
from .issues import fl as _fl
from .resolve import EVAL_FALLBACKS

# miles' own message texts (spec §3.2, §3.6), quoted so users can search for them.
MSG_MEGATRON_ONLY = "Shared Actor/Critic PPO requires the Megatron backend"
MSG_KL_COEF = (
    "Shared Actor/Critic PPO does not support reward-level KL (--kl-coef): the critic trains "
    "before the actor and never sees ref log probs, so its value targets would silently exclude "
    "the KL penalty applied to the actor's rewards. Use --use-kl-loss for KL regularization "
    "instead.")
MSG_NO_OFFLOAD = (
    "--no-offload-train with shared Actor/Critic PPO is reserved for offload debugging: both "
    "models stay resident on the shared train GPUs, so make sure they fit.")
MSG_ASYNC_PPO = (
    "Async PPO training requires an explicit behavior-policy correction, because rollouts are "
    "generated before the current weight update while log probs are recomputed by the current "
    "actor by default.")


# --- PPO (spec §3.2, §3.6, seed "Constraints") -----------------------------------------------

def _ppo_critic(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["use_critic"]:
        critic_only = [d for d in ("num_critic_only_steps", "critic_lr", "critic_load",
                                   "critic_save", "critic_lr_warmup_iters") if d in s]
        if critic_only:
            _issue(out, "info", "ppo.critic_flags_ignored", tuple(critic_only),
                   f"critic flags have no effect with --advantage-estimator "
                   f"{r['advantage_estimator']}: only ppo builds a critic.",
                   "set --advantage-estimator ppo, or drop these flags")
        return
    _issue(out, "info", "ppo.critic_enabled", ("advantage_estimator",),
           "--advantage-estimator ppo turns the critic on (use_critic): a value model is built "
           "on the actor's GPUs and advantages come from GAE.")


def _ppo_backend(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["use_critic"]:
        return
    if r["train_backend"] != "megatron":
        _issue(out, "error", "ppo.megatron_only", ("train_backend", "advantage_estimator"),
               f"{MSG_MEGATRON_ONLY} (got --train-backend {r['train_backend']}).",
               "set --train-backend megatron")


def _ppo_kl(e: dict, r: dict, s: set, out: Out) -> None:
    if r["use_critic"] and r["kl_coef"] != 0:
        _issue(out, "error", "ppo.kl_coef_nonzero", ("kl_coef",), MSG_KL_COEF,
               "set --kl-coef 0 and regularize with --use-kl-loss --kl-loss-coef <c>")


def _ppo_placement(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["use_critic"]:
        return
    nodes, gpus = r["actor_num_nodes"], r["actor_num_gpus_per_node"]
    differs = [d for d, actor in (("critic_num_nodes", nodes), ("critic_num_gpus_per_node", gpus))
               if d in s and e[d] != actor]
    where = f"{nodes} node(s) x {gpus} GPU(s)"
    if differs:
        given = ", ".join(f"{_fl(d)} {e[d]}" for d in differs)
        _issue(out, "warning", "ppo.critic_placement_overridden", tuple(differs),
               f"the critic is colocated on the actor's GPUs: {given} is overwritten with the "
               f"actor's placement ({where}).",
               "drop the critic placement flags; scale with --actor-num-nodes and "
               "--actor-num-gpus-per-node")
    else:
        _issue(out, "info", "ppo.critic_placement_inherited",
               ("critic_num_nodes", "critic_num_gpus_per_node"),
               f"the critic shares the actor's GPUs ({where}); PPO needs no extra GPUs.")
    tp, pp, cp = (r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                  r["context_parallel_size"])
    _issue(out, "info", "ppo.critic_parallelism_inherited",
           ("tensor_model_parallel_size", "pipeline_model_parallel_size",
            "context_parallel_size"),
           f"the critic reuses the actor's parallelism (TP{tp} x PP{pp} x CP{cp}); it cannot "
           "have its own.")


def _ppo_offload(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["use_critic"] or r["debug_rollout_only"]:
        return
    if e["offload_train"] is False and not e["offload"]:
        _issue(out, "warning", "ppo.no_offload_train", ("offload_train",), MSG_NO_OFFLOAD,
               "drop --no-offload-train unless you are debugging offload")
    elif e["offload_train"] is None and not e["offload"]:
        _issue(out, "info", "ppo.offload_train_default", ("offload_train",),
               "--offload-train is on by default under PPO: the actor and the critic take turns "
               "on the shared GPUs and sleep in CPU memory in between.",
               "pass --no-offload-train only for offload debugging")


def _ppo_critic_fallbacks(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["use_critic"]:
        return
    if "critic_lr" not in s:
        _issue(out, "info", "ppo.critic_lr_fallback", ("critic_lr", "lr"),
               f"--critic-lr is not set: the critic uses --lr ({r['lr']:g}).",
               "critics usually want a larger lr than the actor, e.g. 10x --lr")
    if "critic_save" not in s and r["critic_save"]:
        _issue(out, "info", "ppo.critic_save_fallback", ("critic_save", "save"),
               f"the critic saves to {r['critic_save']} (--save + '_critic', a sibling so the two "
               "models do not clobber each other's iteration tracker).")
    if "critic_load" in s:
        return
    if r["critic_resume"]:
        _issue(out, "info", "ppo.critic_resume", ("critic_load", "save"),
               f"resuming the critic from {r['critic_load']} (it holds a checkpoint). miles "
               "would point the critic at the actor's checkpoint on resume; PPO Deck passes "
               "--critic-load explicitly.")
    else:
        source = r["critic_load"] or (r["model_init"] != "random" and r["hf_checkpoint"])
        _issue(out, "info", "ppo.critic_load_fallback", ("critic_load", "load"),
               f"--critic-load is not set: the critic starts from {source or 'random weights'} "
               "(--load, else --ref-load); its value head is initialized fresh.")


def _ppo_critic_only_steps(e: dict, r: dict, s: set, out: Out) -> None:
    steps, num_rollout = r["num_critic_only_steps"], r["num_rollout"]
    if r["use_critic"] and num_rollout is not None and steps >= num_rollout > 0:
        _issue(out, "warning", "ppo.actor_never_trains", ("num_critic_only_steps", "num_rollout"),
               f"--num-critic-only-steps {steps} >= --num-rollout {num_rollout}: the actor never "
               "trains, only the critic does.",
               "lower --num-critic-only-steps or raise --num-rollout")


def _grpo_group_size(e: dict, r: dict, s: set, out: Out) -> None:
    est, n = r["advantage_estimator"], r["n_samples_per_prompt"]
    if est in ("grpo", "gspo") and n is not None and n < 2:
        _issue(out, "error", "algo.grpo_needs_groups", ("advantage_estimator",
                                                        "n_samples_per_prompt"),
               f"--advantage-estimator {est} normalizes each reward within its prompt's group of "
               f"--n-samples-per-prompt samples; with {n} sample per prompt every advantage is "
               "0 and the policy never learns.",
               "set --n-samples-per-prompt 4 (or more), or --advantage-estimator ppo")


def _ref_update_interval(e: dict, r: dict, s: set, out: Out) -> None:
    if r["ref_update_interval"] is not None and not r["use_kl_loss"]:
        _issue(out, "warning", "algo.ref_update_without_ref", ("ref_update_interval",
                                                               "use_kl_loss"),
               f"--ref-update-interval {r['ref_update_interval']} refreshes the KL reference "
               "model, but without --use-kl-loss no reference model is kept: it does nothing.",
               "add --use-kl-loss --kl-loss-coef <c>, or drop --ref-update-interval")


# --- parallelism and placement -----------------------------------------------------------------

def _parallel_divides(e: dict, r: dict, s: set, out: Out) -> None:
    world, mp = r["world_size"], r["model_parallel_size"]
    if world > 0 and mp > 0 and world % mp:
        tp, pp, cp = (r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                      r["context_parallel_size"])
        _issue(out, "error", "parallel.world_size_not_divisible",
               ("actor_num_nodes", "actor_num_gpus_per_node", "tensor_model_parallel_size",
                "pipeline_model_parallel_size", "context_parallel_size"),
               f"world size ({world}) is not divisible by tensor parallel size ({tp}) times "
               f"pipeline parallel size ({pp}) times context parallel size ({cp})",
               f"make TP x PP x CP ({mp}) divide --actor-num-nodes x --actor-num-gpus-per-node "
               f"({world})")


def _model_parallel_shape(e: dict, r: dict, s: set, out: Out) -> None:
    tp, pp = r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"]
    heads, groups, layers = r["num_attention_heads"], r["num_query_groups"], r["num_layers"]
    if tp > 0 and heads and heads > 0 and heads % tp:
        _issue(out, "error", "model.heads_not_divisible_by_tp",
               ("num_attention_heads", "tensor_model_parallel_size"),
               f"--num-attention-heads {heads} is not divisible by TP {tp}.",
               "choose a TP that divides the number of heads")
    if tp > 0 and groups and groups > 0 and r["group_query_attention"] and groups % tp:
        _issue(out, "error", "model.groups_not_divisible_by_tp",
               ("num_query_groups", "tensor_model_parallel_size"),
               f"--num-query-groups {groups} is not divisible by TP {tp}.",
               "choose a TP that divides the number of query groups")
    if heads and groups and heads > 0 and groups > 0 and heads % groups:
        _issue(out, "error", "model.heads_not_divisible_by_groups",
               ("num_attention_heads", "num_query_groups"),
               f"--num-attention-heads {heads} is not a multiple of --num-query-groups {groups}.",
               "set --num-query-groups to a divisor of the head count")
    if pp > 1 and layers and layers > 0 and layers % pp:
        _issue(out, "error", "model.layers_not_divisible_by_pp",
               ("num_layers", "pipeline_model_parallel_size"),
               f"--num-layers {layers} is not divisible by PP {pp}.",
               "choose a PP that divides the number of layers")


def _model_shape_required(e: dict, r: dict, s: set, out: Out) -> None:
    if r["train_backend"] != "megatron" or r["debug_rollout_only"]:
        return
    missing = tuple(d for d in ("num_layers", "hidden_size", "num_attention_heads")
                    if r[d] is None)
    if missing:
        _issue(out, "error", "model.shape_required", missing,
               f"Megatron needs the model shape: {', '.join(_fl(d) for d in missing)} not set.",
               "add the model arguments (for Qwen3-4B see `ppodeck presets show qwen3-4b-ppo`)")
    if r["vocab_size"] is None and not r["hf_checkpoint"]:
        _issue(out, "warning", "model.vocab_unknown", ("vocab_size", "hf_checkpoint"),
               "neither --vocab-size nor --hf-checkpoint is set: the vocabulary size is unknown "
               "and the memory estimate is unavailable.",
               "set --vocab-size or --hf-checkpoint")


def _rollout_engines(e: dict, r: dict, s: set, out: Out) -> None:
    if r["debug_train_only"]:
        return
    gpus, per_engine = r["rollout_num_gpus"], r["rollout_num_gpus_per_engine"]
    if gpus is None:
        _issue(out, "error", "rollout.num_gpus_required", ("rollout_num_gpus", "colocate"),
               "--rollout-num-gpus is not set and --colocate is off: the rollout engines have no "
               "GPUs.",
               "pass --colocate to share the actor's GPUs, or set --rollout-num-gpus")
        return
    if gpus <= 0 or per_engine <= 0:
        return  # reported by the positive-value rule
    engines = gpus // per_engine
    if engines == 0:
        _issue(out, "error", "rollout.no_engines",
               ("rollout_num_gpus", "rollout_num_gpus_per_engine"),
               f"{gpus} rollout GPU(s) cannot hold one engine of {per_engine} GPUs.",
               "lower --rollout-num-gpus-per-engine or add rollout GPUs")
    elif gpus % per_engine:
        _issue(out, "warning", "rollout.engines_floor",
               ("rollout_num_gpus", "rollout_num_gpus_per_engine"),
               f"{gpus} rollout GPUs do not divide into engines of {per_engine}: miles starts "
               f"{engines} engine(s) and leaves {gpus - engines * per_engine} GPU(s) idle.",
               "make --rollout-num-gpus-per-engine divide the rollout GPU count")


def _colocate(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["colocate"]:
        return
    world = r["world_size"]
    if "rollout_num_gpus" in s and e["rollout_num_gpus"] != world:
        _issue(out, "info", "colocate.rollout_gpus_override", ("rollout_num_gpus", "colocate"),
               f"rollout_num_gpus {e['rollout_num_gpus']} != actor GPUs {world}: --colocate "
               f"overrides rollout_num_gpus to {world}.",
               "drop --rollout-num-gpus under --colocate")
    else:
        _issue(out, "info", "colocate.rollout_gpus", ("rollout_num_gpus", "colocate"),
               f"--colocate: the rollout engines use the actor's {world} GPU(s) "
               "(rollout_num_gpus = actor GPUs).")
    if e["offload_rollout"] is None and not e["offload"]:
        _issue(out, "info", "colocate.offload_rollout_default", ("offload_rollout", "colocate"),
               "--colocate turns --offload-rollout on: the rollout engine gives back its GPU "
               "memory while the models train (nothing to give back on a CPU run).")
    prefill = r["sglang_cuda_graph_backend_prefill"]
    if prefill is not None and prefill != "disabled":
        _issue(out, "warning", "colocate.cuda_graph_prefill",
               ("sglang_cuda_graph_backend_prefill", "colocate"),
               f"--sglang-cuda-graph-backend-prefill {prefill} under --colocate may trigger "
               "NVLS OOM.", "leave it unset (miles uses 'disabled' under colocate)")


def _offload_flags(e: dict, r: dict, s: set, out: Out) -> None:
    if e["offload"]:
        conflict = tuple(d for d in ("offload_train", "offload_rollout") if e[d] is False)
        _issue(out, "info" if not conflict else "warning", "offload.expanded",
               ("offload",) + conflict,
               "--offload expands to --offload-train --offload-rollout"
               + (" and overrides the explicit --no-" + ", --no-".join(
                   _fl(d)[2:] for d in conflict) if conflict else "") + ".")
    if r["offload_train_target"] == "disk" and (
            not r["offload_train"] or r["train_backend"] != "megatron"):
        _issue(out, "error", "offload.disk_target",
               ("offload_train_target", "offload_train", "train_backend"),
               "--offload-train-target disk requires --offload-train and the Megatron backend.",
               "turn --offload-train on, or use --offload-train-target cpu")


def _debug_modes(e: dict, r: dict, s: set, out: Out) -> None:
    if r["debug_rollout_only"] and r["debug_train_only"]:
        _issue(out, "error", "debug.exclusive", ("debug_rollout_only", "debug_train_only"),
               "--debug-rollout-only and --debug-train-only cannot both be set.",
               "keep one of them")
    elif r["debug_rollout_only"]:
        turned_off = tuple(d for d in ("colocate", "offload", "offload_train", "offload_rollout")
                           if e[d])
        _issue(out, "info", "debug.rollout_only", ("debug_rollout_only",) + turned_off,
               "--debug-rollout-only runs no training: --colocate and both offloads are "
               "turned off." + _debug_rollout_gpus(e, r))


def _debug_rollout_gpus(e: dict, r: dict) -> str:
    """What miles does to the GPU counts under --debug-rollout-only (engine/config/resolve.py)."""
    if e["colocate"] and not e["rollout_num_gpus"]:
        return (f" The rollout takes the actor's GPUs: rollout_num_gpus = "
                f"{r['rollout_num_gpus']}.")
    if e["rollout_num_gpus"] and (r["actor_num_nodes"], r["actor_num_gpus_per_node"]) != (
            e["actor_num_nodes"], e["actor_num_gpus_per_node"]):
        return (f" The actor's placement follows the rollout's {e['rollout_num_gpus']} GPUs: "
                f"{r['actor_num_nodes']} node(s) x {r['actor_num_gpus_per_node']} GPU(s).")
    return ""


def _transfer_mode(e: dict, r: dict, s: set, out: Out) -> None:
    mode = r["update_weight_transfer_mode"]
    if r["colocate"] and mode in ("p2p", "disk-delta"):
        label = "P2P" if mode == "p2p" else "Disk-delta"
        _issue(out, "error", f"transfer.{mode.replace('-', '_')}_colocate",
               ("update_weight_transfer_mode", "colocate"),
               f"{label} weight transfer mode is not compatible with --colocate: colocated "
               "engines receive weights through CUDA IPC.",
               "drop --update-weight-transfer-mode or --colocate")


def _async(e: dict, r: dict, s: set, out: Out) -> None:
    if not r["fully_async"]:
        return
    if r["use_critic"] and not (r["use_rollout_logprobs"] or r["use_tis"]
                                or r["keep_old_actor"]):
        _issue(out, "error", "async.ppo_needs_correction", ("fully_async", "advantage_estimator"),
               MSG_ASYNC_PPO,
               "pass one of --use-rollout-logprobs, --use-tis or --keep-old-actor")
    if r["colocate"]:
        _issue(out, "error", "async.no_colocate", ("fully_async", "colocate"),
               "Colocation is not supported for async training.",
               "drop --colocate and give the rollout its own GPUs (--rollout-num-gpus)")


# --- run-loop flags: evaluation, tracking, debug modes, weight push, CI (issue #14) ----------

def _eval_flags(e: dict, r: dict, s: set, out: Out) -> None:
    items = r["eval_prompt_data"] or ()
    if len(items) % 2:
        _issue(out, "error", "eval.prompt_data_pairs", ("eval_prompt_data",),
               f"--eval-prompt-data takes NAME PATH pairs; got {len(items)} values.",
               "e.g. --eval-prompt-data aime /data/aime.jsonl math500 /data/math500.jsonl")
    if items and r["eval_interval"] is None:
        _issue(out, "info", "eval.no_interval", ("eval_prompt_data", "eval_interval"),
               "--eval-prompt-data is set but --eval-interval is not: no eval runs (miles "
               "evaluates only every --eval-interval rollouts).",
               "set --eval-interval N")
    if r["eval_interval"] is None:
        return
    if r["debug_train_only"]:
        _issue(out, "info", "eval.skipped_train_only", ("eval_interval", "debug_train_only"),
               "--debug-train-only runs no eval (miles: no rollout engines to evaluate with).")
        return
    fallbacks = [f"{eval_dest.replace('_', '-')} {r[rollout_dest]}"
                 for eval_dest, rollout_dest in EVAL_FALLBACKS if e[eval_dest] is None
                 and eval_dest != "n_samples_per_eval_prompt"]
    if fallbacks:
        _issue(out, "info", "eval.rollout_fallbacks", ("eval_interval",),
               "eval sampling takes the rollout's values where no --eval-* flag is set: "
               + ", ".join(fallbacks) + ".")


def _tracking(e: dict, r: dict, s: set, out: Out) -> None:
    for flag in missing_extras(r):
        _issue(out, "error", "tracking.extra_missing", (flag[2:].replace("-", "_"),),
               missing_message(flag) + ".", INSTALL_FIX)
    if r["use_wandb"] and not (r["wandb_key"] or r["wandb_mode"]):
        _issue(out, "info", "tracking.wandb_offline", ("use_wandb", "wandb_key"),
               "without --wandb-key (or WANDB_API_KEY in the driver's environment) wandb logs "
               "offline into the run directory; `wandb sync` uploads it later.")
    if r["use_tensorboard"] and not r["tb_project_name"]:
        _issue(out, "info", "tracking.tb_dir", ("use_tensorboard", "tb_project_name"),
               "no --tb-project-name: TensorBoard files go to <run dir>/tensorboard/<run id>/ "
               "($TENSORBOARD_DIR wins; miles itself needs one of the two).")


def _run_loop_modes(e: dict, r: dict, s: set, out: Out) -> None:
    if r["debug_train_only"] and not r["debug_rollout_only"]:
        _issue(out, "warning", "debug.train_only_reuses_batch", ("debug_train_only",),
               "PPO Deck has no --load-debug-rollout-data: --debug-train-only generates the "
               "first rollout's batch once (initial weights) and trains every rollout on it; "
               "no weights are pushed.",
               "drop --debug-train-only to train on fresh rollouts")
    interval = r["update_weights_interval"]
    if interval is not None and interval > 1:
        _issue(out, "info", "rollout.sparse_weight_push", ("update_weights_interval",),
               f"weights reach the rollout side after every {interval}th rollout only; the "
               "rollouts in between sample from older weights (off-policy).")
    if r["ci_test"] and r["rollout_backend"] == "sglang" and r["check_weight_update_equal"]:
        _issue(out, "warning", "ci.weight_check_unavailable",
               ("ci_test", "rollout_backend"),
               "--ci-test's weight-update check reads the hf backend's weights back; with "
               "--rollout-backend sglang it is skipped (the other checks run).",
               "add --ci-disable-weight-update-checker to say so explicitly")
    if r["ci_save_grad_norm"] and r["ci_load_grad_norm"]:
        _issue(out, "info", "ci.grad_norm_save_wins", ("ci_save_grad_norm", "ci_load_grad_norm"),
               "both --ci-save-grad-norm and --ci-load-grad-norm are set: grad norms are saved, "
               "not compared (miles).")


PPO_AND_PLACEMENT_RULES = (
    _ppo_critic, _ppo_backend, _ppo_kl, _ppo_placement, _ppo_offload, _ppo_critic_fallbacks,
    _ppo_critic_only_steps, _grpo_group_size, _ref_update_interval, _parallel_divides,
    _model_parallel_shape, _model_shape_required,
    _rollout_engines, _colocate, _offload_flags, _debug_modes, _transfer_mode, _async,
    _eval_flags, _tracking, _run_loop_modes,
)
