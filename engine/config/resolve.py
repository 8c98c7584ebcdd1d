"""resolve(): the effective value of every flag after miles' fallbacks, without mutating.

miles rewrites its args in place during validation (critic lr/load/save fallbacks, offload
defaults, critic placement, rollout GPUs under --colocate...). PPO Deck computes the same
outcome here as a fresh dict so that the UI can show it and the engine can read it; check()
turns each of these silent changes into an info or warning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from .model import RunConfig, value_error
from .pypi_files import expand_pypi, is_pypi_path
from .schema import BY_DEST, DEFAULTS, PATH_DESTS

TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's checkpoint tracker file

# Honoured flags the engine never reads itself: resolve() turns them into these keys, which it
# reads (the engine-contract test follows them).
RESOLVED_INTO: dict[str, tuple[str, ...]] = {
    "offload": ("offload_train", "offload_rollout"),
    "disable_rewards_normalization": ("rewards_normalization",),
    "disable_grpo_std_normalization": ("grpo_std_normalization",),
    "disable_compute_advantages_and_returns": ("compute_advantages_and_returns",),
    "fp16": ("bf16",),
    "eval_prompt_data": ("eval_datasets",),
    "group_query_attention": ("num_query_groups",),
    "use_rotary_position_embeddings": ("position_embedding_type",),
    "ci_disable_weight_update_checker": ("check_weight_update_equal",),
    "rollout_max_prompt_len": ("max_prompt_len",),
    "num_steps_per_rollout": ("global_batch_size",),
}
DEFAULT_HOME = "~/.cache/ppodeck"


# $NAME or ${NAME}, as os.path.expandvars finds them (which reads os.environ itself)
_VAR = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)


def ppodeck_home(env: Mapping[str, str]) -> str:
    """Where `ppodeck prepare` puts models and data: $PPODECK_HOME or ~/.cache/ppodeck."""
    return os.path.expanduser(env.get("PPODECK_HOME") or DEFAULT_HOME)


def expand_vars(path: str, env: Mapping[str, str]) -> str:
    """os.path.expandvars over `env`: a variable `env` lacks stays as written."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1).removeprefix("{").removesuffix("}")
        return env.get(name, match.group(0))

    return _VAR.sub(value, path)


def expand_path(path: str, env: Mapping[str, str], run_dir: str | None = None) -> str:
    """Expand ${RUN_DIR} (when the run directory is known), ${PPODECK_HOME} (defaulting to
    ~/.cache/ppodeck), other $VARS from `env` (the run's environment), and a leading ~. A
    `pypi:` value becomes the installed file it names (engine/config/pypi_files.py), or stays
    as it is."""
    if is_pypi_path(path):
        return expand_pypi(path)
    if "$" in path:
        if run_dir:
            path = path.replace("${RUN_DIR}", run_dir)
        home = ppodeck_home(env)
        path = path.replace("${PPODECK_HOME}", home).replace("$PPODECK_HOME", home)
        path = expand_vars(path, env)
    if path[:1] == "~":
        path = os.path.expanduser(path)
    return path


def split_values(config: RunConfig) -> tuple[dict[str, Any], list[tuple[str, str]], list[str]]:
    """(valid set values, [(dest, why invalid)], [unknown dests]) for any RunConfig contents.

    Never raises: check() and resolve() both start here so garbage becomes issues.
    """
    valid: dict[str, Any] = {}
    bad: list[tuple[str, str]] = []
    unknown: list[str] = []
    try:
        items = list(config.values.items())
    except Exception:  # values is not a mapping at all
        return valid, [("", "the config values are not a mapping")], unknown
    for dest, value in items:
        if value is None:
            continue
        flag = BY_DEST.get(dest) if type(dest) is str else None
        if flag is None:
            unknown.append(str(dest))
            continue
        why = value_error(flag, value)
        if why is None:
            valid[dest] = float(value) if flag.kind == "float" else (
                tuple(value) if flag.kind == "list" else value)
        else:
            bad.append((dest, why))
    return valid, bad, unknown


def _has_tracker(path: str | None) -> bool:
    return bool(path and os.path.exists(os.path.join(path, TRACKER)))


def resolve_values(valid: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The effective values, given valid explicitly-set values (see split_values); path flags
    expand against `env`, the environment the run starts in."""
    r = dict(DEFAULTS)
    r.update(valid)
    run_dir = r["run_dir"] = expand_path(r["run_dir"], env) if r["run_dir"] else None
    for dest in PATH_DESTS:
        if r[dest] and dest != "run_dir":
            r[dest] = expand_path(r[dest], env, run_dir)
    _resolve_algo(r)
    _resolve_placement(r)
    _resolve_offload(r)
    _resolve_checkpoints(r)
    _resolve_batch(r)
    _resolve_model(r)
    _resolve_eval(r, env)
    return r


def resolve(config: RunConfig, env: Mapping[str, str]) -> dict[str, Any]:
    """Every dest -> effective value after miles' fallbacks (invalid values -> defaults).

    Extra keys beyond the schema dests: use_critic, with_ref, world_size, dp_size,
    model_parallel_size, rollout_engines, resume, critic_resume, load_requested, bf16,
    sglang_tp_size, compute_advantages_and_returns, rewards_normalization,
    grpo_std_normalization, train_iters, placement_bundles, rollout_bundle_offset, ...
    """
    valid, _, _ = split_values(config)
    return resolve_values(valid, env)


def _resolve_algo(r: dict[str, Any]) -> None:
    r["use_critic"] = r["advantage_estimator"] == "ppo"
    r["with_ref"] = r["kl_coef"] != 0 or r["use_kl_loss"]
    if r["eps_clip_high"] is None:
        r["eps_clip_high"] = r["eps_clip"]
    if r["critic_lr"] is None:
        r["critic_lr"] = r["lr"]
    r["compute_advantages_and_returns"] = not r["disable_compute_advantages_and_returns"]
    r["rewards_normalization"] = not r["disable_rewards_normalization"]
    r["grpo_std_normalization"] = (
        not r["disable_grpo_std_normalization"] and r["n_samples_per_prompt"] != 1)


def _resolve_placement(r: dict[str, Any]) -> None:
    if r["debug_rollout_only"]:
        _debug_rollout_only_layout(r)
    world = r["actor_num_nodes"] * r["actor_num_gpus_per_node"]
    mp = (r["tensor_model_parallel_size"] * r["pipeline_model_parallel_size"]
          * r["context_parallel_size"])
    r["world_size"] = world
    r["model_parallel_size"] = mp
    r["dp_size"] = world // mp if mp > 0 and world % mp == 0 else None
    if r["use_critic"]:
        r["critic_num_nodes"] = r["actor_num_nodes"]
        r["critic_num_gpus_per_node"] = r["actor_num_gpus_per_node"]
    if r["colocate"]:
        r["rollout_num_gpus"] = world
    if r["debug_train_only"]:
        r["rollout_num_gpus"] = 0
    # the actor's weights reach the rollout side before the first rollout (miles: not in
    # the debug modes): the rollout model's own init is then overwritten unread
    r["initial_weight_push"] = not (r["debug_rollout_only"] or r["debug_train_only"])
    per_engine = r["rollout_num_gpus_per_engine"]
    gpus = r["rollout_num_gpus"]
    r["rollout_engines"] = gpus // per_engine if gpus is not None and per_engine > 0 else None
    r["sglang_tp_size"] = per_engine
    r["placement_bundles"], r["rollout_bundle_offset"] = _bundle_layout(r)


def _debug_rollout_only_layout(r: dict[str, Any]) -> None:
    """miles (arguments.py, --debug-rollout-only): under --colocate without --rollout-num-gpus
    the rollout takes the actor's GPUs; otherwise the actor's placement follows the rollout's
    GPUs (at most 8 a node). Then colocation ends (check() says all of it)."""
    if r["colocate"] and not r["rollout_num_gpus"]:
        r["rollout_num_gpus"] = r["actor_num_nodes"] * r["actor_num_gpus_per_node"]
    elif r["rollout_num_gpus"]:
        r["actor_num_gpus_per_node"] = min(8, r["rollout_num_gpus"])
        r["actor_num_nodes"] = r["rollout_num_gpus"] // r["actor_num_gpus_per_node"]
    r["colocate"] = False


def _bundle_layout(r: dict[str, Any]) -> tuple[int | None, int]:
    """(bundles of 1 GPU, index of the first rollout bundle): miles'
    `_get_placement_group_layout`. The critic sits on the actor's bundles and adds none."""
    actor, rollout = r["world_size"], r["rollout_num_gpus"]
    if r["debug_train_only"]:
        return actor, 0
    if rollout is None:
        return None, 0  # check() reports rollout.num_gpus_required
    if r["debug_rollout_only"]:
        return rollout, 0
    if r["colocate"]:
        return max(actor, rollout), 0
    return actor + rollout, actor


def _resolve_offload(r: dict[str, Any]) -> None:
    if r["offload"]:
        r["offload_train"] = r["offload_rollout"] = True
    if r["debug_rollout_only"]:
        r["offload_train"] = r["offload_rollout"] = False
    if r["colocate"]:
        for dest in ("offload_train", "offload_rollout"):
            if r[dest] is None:
                r[dest] = True
    if r["use_critic"] and r["offload_train"] is None:
        r["offload_train"] = True
    for dest in ("offload_train", "offload_rollout"):
        if r[dest] is None:
            r[dest] = False
    r["offload"] = False  # miles deletes it after expansion


def _resolve_checkpoints(r: dict[str, Any]) -> None:
    load = r["load"]
    r["load_requested"] = load
    r["resume"] = _has_tracker(load)
    if not r["resume"]:
        # miles: no usable --load means finetune from the ref (raw) or the HF weights (bridge).
        if r["megatron_to_hf_mode"] == "bridge":
            r["load"] = r["ref_load"] or r["hf_checkpoint"]
        else:
            r["load"] = r["ref_load"]
    save = r["save"]
    sibling = save.rstrip("/") + "_critic" if save else None
    r["critic_resume"] = False
    if r["critic_save"] is None and sibling:
        r["critic_save"] = sibling
    if r["critic_load"] is None:
        # miles points the critic at the actor's checkpoint on resume; PPO Deck prefers the
        # critic's own sibling when it holds one, so a resumed critic keeps its value head.
        if r["use_critic"] and _has_tracker(sibling):
            r["critic_load"] = sibling
            r["critic_resume"] = True
        else:
            r["critic_load"] = r["load"]


def _resolve_batch(r: dict[str, Any]) -> None:
    if r["max_prompt_len"] is None:  # the built-in rollout drops prompts past miles' limit
        r["max_prompt_len"] = r["rollout_max_prompt_len"]
    if r["over_sampling_batch_size"] is None:
        r["over_sampling_batch_size"] = r["rollout_batch_size"]
    if r["log_probs_max_tokens_per_gpu"] is None:
        r["log_probs_max_tokens_per_gpu"] = r["max_tokens_per_gpu"]
    steps = r["num_steps_per_rollout"]
    rbs = r["rollout_batch_size"]
    if r["global_batch_size"] is None and steps and rbs:
        r["global_batch_size"] = rbs * r["n_samples_per_prompt"] // steps
    # miles: train_iters = num_rollout * rbs * n // gbs, the steps the LR schedule spans
    gbs, num_rollout = r["global_batch_size"], r["num_rollout"]
    r["train_iters"] = (max(1, num_rollout * rbs * r["n_samples_per_prompt"] // gbs)
                        if gbs and rbs and num_rollout is not None else None)


def _resolve_model(r: dict[str, Any]) -> None:
    r["bf16"] = not r["fp16"]
    if r["optimizer"] == "adam":
        r["use_distributed_optimizer"] = True
    if r["seq_length"] is None:
        r["seq_length"] = 4096
    heads = r["num_attention_heads"]
    hidden = r["hidden_size"]
    if not r["group_query_attention"] and heads:
        r["num_query_groups"] = heads
    elif r["num_query_groups"] is None:
        r["num_query_groups"] = 1
    if r["kv_channels"] is None and heads and hidden:
        r["kv_channels"] = hidden // heads
    if r["ffn_hidden_size"] is None and hidden:
        r["ffn_hidden_size"] = 4 * hidden
    if r["use_rotary_position_embeddings"]:
        r["position_embedding_type"] = "rope"


# miles' EvalDatasetConfig: each eval sampling value falls back to the rollout's own.
EVAL_FALLBACKS = (("eval_temperature", "rollout_temperature"), ("eval_top_p", "rollout_top_p"),
                  ("eval_top_k", "rollout_top_k"),
                  ("eval_max_response_len", "rollout_max_response_len"),
                  ("n_samples_per_eval_prompt", "n_samples_per_prompt"))


def eval_datasets(pairs: Any, run_dir: str | None,
                  env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """--eval-prompt-data NAME PATH [NAME PATH ...] as (name, expanded path) pairs; an odd
    count gives none (check() reports it as eval.prompt_data_pairs)."""
    items = list(pairs or ())
    if len(items) % 2:
        return ()
    return tuple((str(items[i]), expand_path(str(items[i + 1]), env, run_dir))
                 for i in range(0, len(items), 2))


def _resolve_eval(r: dict[str, Any], env: Mapping[str, str]) -> None:
    for eval_dest, rollout_dest in EVAL_FALLBACKS:
        if r[eval_dest] is None:
            r[eval_dest] = r[rollout_dest]
    r["eval_datasets"] = eval_datasets(r["eval_prompt_data"], r["run_dir"], env)
    # miles: --ci-test compares the rollout weights after the first push, except in the debug
    # modes (no push there) and with --ci-disable-weight-update-checker; the flag
    # --check-weight-update-equal asks for the same comparison on its own
    r["check_weight_update_equal"] = bool(
        (r["check_weight_update_equal"]
         or (r["ci_test"] and not r["ci_disable_weight_update_checker"]))
        and not r["debug_rollout_only"] and not r["debug_train_only"])
