"""engine.* rules: the config judged against the engine that will run it, on this machine.

"What validates is what runs" (ARCHITECTURE.md): every flag is classed in the schema
(`Flag.engine`) as honoured, refused or command-only. A refused flag set away from its default is
an error; command-only flags set away from their defaults are named in one warning; honoured
flags whose engine supports only some values get a rule here. Machine facts (GPUs, CUDA,
transformer-engine, sglang) come in a `Machine` so that check() stays pure and fast: the live
one is probed once per process, tests pass their own.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .forecast import kept_calibrations
from .issues import Out
from .issues import add as _issue
from .issues import fl as _fl
from .machine import Machine
from .memory import longest_sample
from .reward_types import REMOTE_RM, RULE_REWARDS, base_type
from .rules_memory import memory_rules
from .rules_user_code import remote_reward_rules, user_code_rules
from .schema import BY_DEST, DEFAULTS, FLAGS

if TYPE_CHECKING:
    from ..host.memory import Holdings

ESTIMATORS_RUN = ("ppo", "grpo")
POSITION_EMBEDDINGS_RUN = ("rope", "learned_absolute")
# The rule-based rewards of engine/rollout/rewards.py (a test keeps the two equal), each also
# accepted with the "boxed_" prefix.
RM_TYPES = RULE_REWARDS


@functools.cache
def this_machine() -> Machine:
    """Probed once per process: find_spec only (nothing is imported), NVML or /proc for GPUs;
    the environment as the edge hands it (engine/host/machine.py)."""
    from ..host.kind import machine_kind
    from ..host.machine import environment, host_memory_bytes, miles_ft_trainer, visible_gpus

    return Machine(gpus=visible_gpus(), transformer_engine=_importable("transformer_engine"),
                   sglang=_importable("sglang"), host_memory_bytes=host_memory_bytes(),
                   megatron_bridge=_installed("megatron-bridge"), kind=machine_kind(),
                   calibrations=kept_calibrations(), miles_ft_trainer=miles_ft_trainer(),
                   env=environment())


def live_holdings() -> Holdings | None:
    """The machine's memory as read at most a few seconds ago (engine/host/memory.py)."""
    from ..host.memory import holdings

    return holdings()


_CURRENT: dict[str, Machine] = {}


def current_machine() -> Machine:
    """this_machine() with a recent memory reading: a keystroke's check() reuses one reading
    (and the Machine around it) while it is fresh."""
    reading = live_holdings()
    last = _CURRENT.get("machine")
    if last is not None and last.holdings is reading and reading is not None:
        return last
    machine = dataclasses.replace(this_machine(), holdings=reading)
    _CURRENT["machine"] = machine
    return machine


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _installed(distribution: str) -> bool:
    """By its metadata: find_spec of `megatron.bridge` would import the `megatron` package."""
    import importlib.metadata  # 10 ms at import: only when the machine is probed

    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def on_a_cluster(r: dict, env: Mapping[str, str]) -> bool:
    """The driver joins a Ray cluster (--ray-address, or RAY_ADDRESS in the run's environment
    `env`): this machine's GPUs and packages are not the ones used."""
    return bool(r["ray_address"] or env.get("RAY_ADDRESS"))


def differs(dest: str, value: object) -> bool:
    default = DEFAULTS[dest]
    if isinstance(default, tuple) and isinstance(value, list | tuple):
        return tuple(value) != default
    return value != default


def refused_flags(e: dict, s: set, out: Out) -> None:
    for dest in sorted(s):
        flag = BY_DEST[dest]
        if flag.engine.cls != "refused" or not differs(dest, e[dest]):
            continue
        nearest = f"; what runs instead: {flag.engine.nearest}" if flag.engine.nearest else ""
        _issue(out, "error", "engine.refused", (dest,),
               f"our engine cannot run {flag.name}: {flag.engine.reason}.",
               f"drop {flag.name}{nearest}, or run the command with miles itself "
               "(`ppodeck command`)")


def command_only_flags(e: dict, s: set, out: Out) -> None:
    dests = [d for d in sorted(s)
             if BY_DEST[d].engine.cls == "command-only" and differs(d, e[d])]
    if not dests:
        return
    why = "; ".join(f"{_fl(d)}: {BY_DEST[d].engine.reason}" for d in dests)
    _issue(out, "warning", "engine.command_only", tuple(dests),
           f"kept in the miles command but ignored by PPO Deck's engine ({why}).",
           "drop them to silence this, or run the command with miles itself (`ppodeck command`)")


def passthrough_flags(flags: tuple[str, ...], out: Out) -> None:
    if flags:
        from .issues import Issue

        out.append(Issue("warning", "engine.passthrough_ignored", flags,
                         f"{len(flags)} flag(s) PPO Deck does not model are kept verbatim in the "
                         "miles command, unvalidated, and ignored by PPO Deck's engine.",
                         "drop them, or run the command with miles itself (`ppodeck command`)"))


def _estimator(r: dict, out: Out) -> None:
    est = r["advantage_estimator"]
    if est not in ESTIMATORS_RUN:
        _issue(out, "error", "engine.estimator", ("advantage_estimator",),
               f"--advantage-estimator {est} is not implemented by PPO Deck's engine (it runs "
               f"{' and '.join(ESTIMATORS_RUN)}).",
               "use --advantage-estimator ppo (actor-critic, GAE) or grpo (group-normalized)")


def _context_parallel(r: dict, m: Machine, out: Out) -> None:
    """CP and sequence parallelism run on the engine (engine/train/context_parallel.py,
    sequence_parallel.py); TP x PP x CP dividing the world is parallel.world_size_not_divisible.
    What is left: flags that change nothing, and how CP splits the work."""
    cp, tp = r["context_parallel_size"], r["tensor_model_parallel_size"]
    if r["sequence_parallel"] and tp == 1:
        _issue(out, "warning", "engine.sequence_parallel_without_tp",
               ("sequence_parallel", "tensor_model_parallel_size"),
               "--sequence-parallel does nothing with --tensor-model-parallel-size 1 (Megatron "
               "turns it off): it splits the sequence over the TP ranks.",
               "drop --sequence-parallel, or set --tensor-model-parallel-size 2 or more")
    if r["allgather_cp"] and cp == 1:
        _issue(out, "warning", "engine.allgather_cp_without_cp",
               ("allgather_cp", "context_parallel_size"),
               "--allgather-cp does nothing with --context-parallel-size 1.",
               "drop --allgather-cp, or set --context-parallel-size 2 or more")
    if cp == 1:
        return
    te = ("transformer-engine's CP attention under PPODECK_TE=1 "
          f"(cp_comm_type {'all_gather' if r['allgather_cp'] else 'p2p'}), else "
          if m.transformer_engine else "")
    budget = (f"; --max-tokens-per-gpu {r['max_tokens_per_gpu']} counts the tokens one CP rank "
              "holds" if r["use_dynamic_batch_size"] and r["max_tokens_per_gpu"] else "")
    _issue(out, "info", "engine.context_parallel", ("context_parallel_size",),
           f"CP{cp}: every micro-batch row is padded to a multiple of {2 * cp} tokens and cut "
           f"in {2 * cp} chunks, CP rank r keeping chunks r and {2 * cp - 1}-r; attention: "
           f"{te}the engine's SDPA with keys/values all-gathered over CP{budget}.")


def _lr_schedule(r: dict, out: Out) -> None:
    if r["lr_decay_style"] == "WSD":
        _issue(out, "error", "engine.lr_wsd", ("lr_decay_style",),
               "--lr-decay-style WSD is not implemented by PPO Deck's engine.",
               "use constant, linear, cosine or inverse-square-root")
    if r["num_rollout"] is None and r["lr_decay_style"] != "constant" and \
            r["lr_decay_iters"] is None:
        _issue(out, "error", "engine.lr_decay_unknown_length",
               ("lr_decay_style", "num_rollout", "lr_decay_iters"),
               f"--lr-decay-style {r['lr_decay_style']} decays over num_rollout x samples // "
               "global batch steps, but --num-rollout is not set.",
               "set --num-rollout or --lr-decay-iters")


def _model_shape(r: dict, out: Out) -> None:
    kind = r["position_embedding_type"]
    if kind not in POSITION_EMBEDDINGS_RUN:
        _issue(out, "error", "engine.position_embedding", ("position_embedding_type",),
               f"--position-embedding-type {kind} is not implemented by PPO Deck's engine.",
               "use rope (or --use-rotary-position-embeddings) or learned_absolute")


def _hf_checkpoint_shape(r: dict, out: Out) -> None:
    """The model flags against --hf-checkpoint's config.json, when its weights are used: a RoPE
    base, biases or rope scaling that differ change no tensor shape, so the trainer (built from
    the flags) and an SGLang rollout (built from the checkpoint) would differ unnoticed."""
    from .hf_config_file import hf_checkpoint_flags

    if r["model_init"] == "random":
        return  # the checkpoint gives the tokenizer only
    theirs = hf_checkpoint_flags(r["hf_checkpoint"])
    if theirs is None:
        return
    differ = [dest for dest, value in theirs.items()
              if dest in r and r[dest] is not None and _not_equal(r[dest], value)]
    if not differ:
        return
    said = ", ".join(f"{_fl(d)} {_text(r[d])} (the checkpoint's: {_text(theirs[d])})"
                     for d in differ)
    _issue(out, "error", "engine.hf_config_mismatch", ("hf_checkpoint", *differ),
           f"the model flags differ from {r['hf_checkpoint']}/config.json: {said}.",
           "set them to the checkpoint's values (a model name from the built-in table may "
           "describe a sibling: e.g. miles' qwen2.5-1.5B has Qwen2.5-Math's --rotary-base "
           "10000), or point --hf-checkpoint at the model the flags describe")


def _not_equal(ours: object, theirs: object) -> bool:
    if isinstance(theirs, float) and isinstance(ours, int | float):
        return abs(float(ours) - theirs) > 1e-9 * max(1.0, abs(theirs))
    return ours != theirs


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _model_features(r: dict, m: Machine, out: Out) -> None:
    """Qwen2's QKV biases and Llama 3's rope scaling: what the engine's paths can do."""
    if r["use_rope_scaling"]:
        if r["position_embedding_type"] != "rope":
            _issue(out, "error", "engine.rope_scaling_without_rope",
                   ("use_rope_scaling", "position_embedding_type"),
                   "--use-rope-scaling scales rotary embeddings, but the model has "
                   f"--position-embedding-type {r['position_embedding_type']}.",
                   "add --use-rotary-position-embeddings, or drop --use-rope-scaling")
        if not r["rotary_scaling_factor"] >= 1.0:
            _issue(out, "error", "engine.rope_scaling_factor", ("rotary_scaling_factor",),
                   f"--rotary-scaling-factor {r['rotary_scaling_factor']:g}: Llama 3 scaling "
                   "divides the low frequencies by it, so it must be at least 1.",
                   "use the model's factor (Llama 3.1: 8, Llama 3.2: 32)")
    elif differs("rotary_scaling_factor", r["rotary_scaling_factor"]):
        _issue(out, "warning", "engine.rope_scaling_factor_unused", ("rotary_scaling_factor",),
               f"--rotary-scaling-factor {r['rotary_scaling_factor']:g} is ignored without "
               "--use-rope-scaling (Megatron reads it only then).",
               "add --use-rope-scaling (Llama 3.1 / 3.2), or drop --rotary-scaling-factor")
    if r["add_qkv_bias"] and r["qk_layernorm"] and r["megatron_to_hf_mode"] == "raw":
        _issue(out, "error", "engine.qkv_bias_with_qk_norm", ("add_qkv_bias", "qk_layernorm"),
               "--add-qkv-bias with --qk-layernorm has no HF counterpart the rollout can be "
               "given weights in (Qwen2 has q/k/v biases, Qwen3 q/k norms, none has both).",
               "drop one of them (Qwen2/2.5: --add-qkv-bias; Qwen3: --qk-layernorm)")
    if r["add_qkv_bias"] and r["rollout_backend"] in ("hf", "auto") and m.cuda \
            and not (r["rollout_backend"] == "auto" and m.sglang):
        _issue(out, "info", "engine.fast_decoder_no_bias", ("add_qkv_bias", "rollout_backend"),
               "the hf rollout's CUDA fast decoder has no q/k/v biases: this model is "
               "sampled with transformers' generate instead (slower).",
               "use --rollout-backend sglang for speed")


def _seq_length(r: dict, s: set, out: Out) -> None:
    """--seq-length bounds nothing under rotary embeddings: say so where samples outgrow it."""
    longest = longest_sample(r)
    rotary = r["use_rotary_position_embeddings"] or r["position_embedding_type"] == "rope"
    if "seq_length" not in s or not rotary or longest is None or longest <= r["seq_length"]:
        return
    _issue(out, "warning", "engine.seq_length_unbounded",
           ("seq_length", "rollout_max_context_len", "rollout_max_response_len"),
           f"samples can hold up to {longest} tokens, more than --seq-length "
           f"{r['seq_length']}; under rotary embeddings nothing truncates them (miles neither), "
           f"so the memory estimate counts {longest}.",
           f"raise --seq-length to {longest}, or bound samples with --rollout-max-context-len "
           f"{r['seq_length']}")


def _reward(r: dict, out: Out) -> None:
    rm = r["rm_type"]
    if rm is None or r["custom_rm_path"]:  # a custom reward function overrides the type
        return
    base = base_type(rm)
    if base not in RM_TYPES and base != REMOTE_RM:
        _issue(out, "error", "engine.rm_type", ("rm_type",),
               f"our engine cannot compute --rm-type {rm}: its rollout has "
               f"{', '.join(RM_TYPES)} and remote_rm, each also as boxed_<type>.",
               "pick one of those, use --custom-rm-path, or run the command with miles itself")


def _devices(r: dict, m: Machine, out: Out) -> None:
    """GPU-only features against this machine; a cluster is checked at launch instead."""
    if on_a_cluster(r, m.env):
        _issue(out, "info", "engine.cluster_checked_at_launch", ("ray_address",),
               "the run joins a Ray cluster: its GPUs and packages are compared with the "
               "layout when it launches, not here. The cluster must have this Python "
               "environment (or a runtime_env) and storage shared for checkpoints.")
        return
    if r["rollout_backend"] == "sglang" and not m.sglang:
        _issue(out, "error", "engine.sglang_missing", ("rollout_backend",),
               "--rollout-backend sglang, but sglang is not importable here.",
               "install sglang (GPU machines; see the README), or use --rollout-backend hf")
    if r["rollout_backend"] == "sglang" and not m.cuda:
        _issue(out, "error", "engine.sglang_needs_cuda", ("rollout_backend",),
               "--rollout-backend sglang needs a GPU, and this machine has none visible.",
               "use --rollout-backend hf (or auto) on CPU")
    if r["megatron_to_hf_mode"] == "bridge" and not m.megatron_bridge:
        # the worker would stop at start-up: refuse it here instead (what validates is what runs)
        _issue(out, "error", "engine.bridge_missing", ("megatron_to_hf_mode",),
               "--megatron-to-hf-mode bridge needs Megatron-Bridge, which is not importable here.",
               "`pip install megatron-bridge` (a GPU machine with transformer-engine), or use "
               "--megatron-to-hf-mode raw (PPO Deck's own converter)")
    if r["rollout_backend"] == "auto":
        picked = picked_backend(r, m)
        _issue(out, "info", "engine.backend_auto", ("rollout_backend",),
               f"--rollout-backend auto picks {picked} on this machine "
               f"({'CUDA and sglang present' if picked == 'sglang' else _why_hf(m)}).")
    _hf_engines(r, m, out)
    _gpu_count(r, m, out)


def _hf_engines(r: dict, m: Machine, out: Out) -> None:
    """The hf backend is one generator in one process: it decodes on one GPU, whatever the
    rollout side reserves (sglang runs one engine per --rollout-num-gpus-per-engine GPUs)."""
    picked = picked_backend(r, m)
    gpus, per_engine = r["rollout_num_gpus"] or 0, r["rollout_num_gpus_per_engine"]
    if picked != "hf" or r["debug_train_only"]:
        return
    if not r["colocate"] and (gpus > 1 or per_engine > 1):
        _issue(out, "error", "engine.hf_one_gpu", ("rollout_num_gpus",
                                                   "rollout_num_gpus_per_engine"),
               f"the hf rollout decodes on one GPU, so --rollout-num-gpus {gpus} "
               f"(--rollout-num-gpus-per-engine {per_engine}) would hold GPUs it never uses.",
               "set --rollout-num-gpus 1 --rollout-num-gpus-per-engine 1, or use "
               "--rollout-backend sglang (one engine per --rollout-num-gpus-per-engine GPUs)")
    elif r["colocate"] and gpus > 1:
        _issue(out, "info", "engine.hf_one_gpu_colocated", ("rollout_backend", "colocate"),
               f"colocated on {gpus} GPUs, the hf rollout decodes every sample on the first of "
               "them while the others wait; --rollout-backend sglang runs an engine per GPU.")


def picked_backend(r: dict, m: Machine) -> str:
    """--rollout-backend as it runs here: auto is sglang with CUDA and sglang, else hf (the
    driver's select_backend decides the same)."""
    if r["rollout_backend"] != "auto":
        return r["rollout_backend"]
    return "sglang" if m.cuda and m.sglang else "hf"


def as_run_here(r: dict, m: Machine) -> dict:
    """`r` with the rollout backend auto resolves to here (the memory estimate differs)."""
    picked = picked_backend(r, m)
    return r if picked == r["rollout_backend"] else {**r, "rollout_backend": picked}


def _why_hf(m: Machine) -> str:
    return "sglang is not importable" if m.cuda else "no GPU visible"


def _gpu_count(r: dict, m: Machine, out: Out) -> None:
    world, needed = r["world_size"], r["placement_bundles"]
    if needed is None:
        return  # no rollout GPUs: rollout.num_gpus_required
    rollout = needed - world if needed > world else 0
    if not m.cuda:
        if world > 1:
            _issue(out, "info", "engine.cpu_ranks", ("actor_num_gpus_per_node",),
                   f"no GPU visible: the engine runs {world} training ranks as CPU processes "
                   "over gloo.")
        return
    if needed > m.gpus:
        parts = f"actor {world}" + (f" + rollout {rollout}" if rollout else "")
        _issue(out, "error", "engine.gpus_missing",
               ("actor_num_nodes", "actor_num_gpus_per_node", "rollout_num_gpus"),
               f"the layout needs {needed} GPUs ({parts}) but this machine has {m.gpus} "
               "visible.",
               f"fit the layout to {m.gpus} GPU(s), or run on a Ray cluster (--ray-address)")


def _precision(r: dict, s: set, m: Machine, out: Out) -> None:
    if "bf16" in s and r["bf16"] and not m.cuda and not on_a_cluster(r, m.env):
        _issue(out, "error", "engine.bf16_needs_cuda", ("bf16",),
               "--bf16: PPO Deck's engine trains in bf16 only on CUDA, and this machine has no "
               "GPU visible (it would train in float32).",
               "drop --bf16 to train in float32 on CPU, or run on a GPU machine")


ENGINES = ("ppodeck", "miles")


def engine_rules(e: dict, r: dict, s: set, out: Out, machine: Machine | None = None,
                 engine: str = "ppodeck") -> None:
    m = machine or current_machine()
    _miles_pairs(r, out)  # miles refuses these at start-up; they are ours too
    if engine == "miles":  # the capability classes describe our engine, not miles
        miles_rules(s, out, m, r)
        remote_reward_rules(r, out)  # miles posts to --rm-url the same way
        return
    refused_flags(e, s, out)
    command_only_flags(e, s, out)
    # miles' refusals are ours too: a preset is also the miles command it prints
    _megatron_validate_args(r, out)
    _estimator(r, out)
    _context_parallel(r, m, out)
    _lr_schedule(r, out)
    _model_shape(r, out)
    _seq_length(r, s, out)
    _model_features(r, m, out)
    _hf_checkpoint_shape(r, out)
    _reward(r, out)
    user_code_rules(r, out, m.env)  # reward functions, remote RM, filters (rules_user_code)
    _precision(r, s, m, out)
    _devices(r, m, out)
    memory_rules(as_run_here(r, m), m, out, on_a_cluster(r, m.env))  # engine/config/rules_memory.py


def engine_classes() -> dict[str, list[str]]:
    """Flag names by engine class, in schema order (README table, `ppodeck flags`)."""
    out: dict[str, list[str]] = {"honoured": [], "refused": [], "command-only": []}
    for flag in FLAGS:
        out[flag.engine.cls].append(flag.name)
    return out


# issues about what PPO Deck's engine does where miles does otherwise: for --engine miles they
# give way to miles' own rule (below) or do not apply (flags PPO Deck adds, `ppodeck.*`)
OUR_ENGINE_ONLY = frozenset({"kl.ref_from_initial_weights", "kl.ref_load_required",
                             "kl.ref_load_missing"})


def miles_rules(s: set, out: Out, m: Machine, r: dict) -> None:
    """`--engine miles`: miles' own start-up checks where ours differ, and this machine."""
    out[:] = [i for i in out if i.code not in OUR_ENGINE_ONLY and
              not i.code.startswith("ppodeck.")]
    own = tuple(dest for dest, flag in BY_DEST.items() if flag.own and dest in s)
    if own:
        _issue(out, "warning", "miles.own_flags", own,
               f"{', '.join(_fl(d) for d in own)}: PPO Deck's own flags; miles' train.py does "
               "not know them, so they are left out of its command.",
               "drop them from the preset, or run on PPO Deck's engine")
    _miles_ref_load(r, m, out)
    _megatron_validate_args(r, out)
    _miles_hf_validate_args(r, out)
    _miles_parse_args(r, m, out)
    miles_machine_rules(r, m, out)


def _megatron_validate_args(r: dict, out: Out) -> None:
    """Megatron's validate_args, which miles' parse_args runs at start-up (the miles-main
    fork at 2e64d788b, megatron/training/arguments.py): the asserts a flag alone reaches. Our
    engine does not run validate_args, but it judges them too, so a preset that validates is
    also a command miles takes. Found by the oracle of tests/miles_oracle (issue #46); each
    rule's line at the pin: engine/config/miles_sources.py."""
    if r["train_backend"] == "fsdp":
        return  # miles' FSDP backend does not build Megatron's arguments
    if r["overlap_param_gather"]:
        for dest in ("use_distributed_optimizer", "overlap_grad_reduce"):
            if not r[dest]:
                _issue(out, "error", f"miles.overlap_param_gather_needs_{dest}",
                       ("overlap_param_gather", dest),
                       f"--overlap-param-gather needs {_fl(dest)} (Megatron's validate_args "
                       "asserts it when miles starts).",
                       f"add {_fl(dest)}, or drop --overlap-param-gather")
    if r["lr"] is not None and r["min_lr"] > r["lr"]:
        _issue(out, "error", "miles.min_lr_above_lr", ("min_lr", "lr"),
               f"--min-lr {r['min_lr']:g} is above --lr {r['lr']:g} (Megatron's validate_args "
               "asserts min_lr <= lr when miles starts).",
               "lower --min-lr to at most --lr")
    if r["save"] is not None and not (r["save_interval"] or 0) > 0:
        _issue(out, "error", "miles.save_needs_interval", ("save", "save_interval"),
               "--save without a positive --save-interval (Megatron's validate_args asserts "
               "one when miles starts).",
               "set --save-interval, or drop --save")
    cp = r["context_parallel_size"] or 1
    if r["seq_length"] is not None and cp > 1 and r["seq_length"] % (2 * cp):
        _issue(out, "error", "miles.seq_length_vs_cp", ("seq_length", "context_parallel_size"),
               f"--seq-length {r['seq_length']} is not a multiple of 2 x "
               f"--context-parallel-size ({2 * cp}), which Megatron's validate_args asserts.",
               f"use a multiple of {2 * cp}")
    if r["recompute_granularity"] == "selective" and r["recompute_method"] is not None:
        _issue(out, "error", "miles.selective_recompute_method",
               ("recompute_granularity", "recompute_method"),
               "--recompute-granularity selective takes no --recompute-method (Megatron's "
               "validate_args refuses the pair when miles starts).",
               "drop --recompute-method (and --recompute-num-layers), or use full granularity")


def _miles_pairs(r: dict, out: Out) -> None:
    """Pairs miles' parse_args refuses outright (miles/utils/arguments.py) that PPO Deck's
    engine refuses too, so a preset is also the miles command it prints; found by the oracle
    of tests/miles_oracle; each rule's line at the pin: engine/config/miles_sources.py."""
    if r["tito_model"] != "default" and not r["use_session_server"]:
        _issue(out, "error", "miles.tito_needs_session_server",
               ("tito_model", "use_session_server"),
               f"--tito-model {r['tito_model']} only configures the session server's TITO "
               "middleware; miles refuses it without --use-session-server.",
               "add --use-session-server, or drop --tito-model")
    if r["advantage_estimator"] == "ppo" and r["megatron_to_hf_mode"] == "bridge":
        # PPO's critic is built only in raw mode
        _issue(out, "error", "miles.critic_with_bridge",
               ("advantage_estimator", "megatron_to_hf_mode"),
               "--advantage-estimator ppo trains a critic, which miles does not support with "
               "--megatron-to-hf-mode bridge (the critic's value head has no HF counterpart).",
               "use --megatron-to-hf-mode raw, or a critic-free estimator (grpo)")


def _miles_parse_args(r: dict, m: Machine, out: Out) -> None:
    """What miles' parse_args refuses on miles only (miles/utils/arguments.py), found by the
    oracle of tests/miles_oracle; each rule's line at the pin: engine/config/miles_sources.py."""
    if r["advantage_estimator"] == "ppo" and m.miles_ft_trainer:
        # our engine never reads the variable; miles' train.py inherits it on a local launch
        _issue(out, "error", "miles.ft_trainer_with_critic", ("advantage_estimator",),
               "MILES_EXPERIMENTAL_FT_TRAINER=1 is set in the environment miles' train.py "
               "inherits, and miles' v2 fault-tolerant trainer cannot run PPO's critic.",
               "unset MILES_EXPERIMENTAL_FT_TRAINER, or use a critic-free estimator (grpo)")
    if r["use_opd"] and r["opd_type"] is None:
        _issue(out, "error", "miles.opd_needs_type", ("use_opd", "opd_type"),
               "--use-opd without --opd-type: miles refuses it at start-up.",
               "add --opd-type sglang or --opd-type megatron")
    hf = r["hf_checkpoint"]
    if hf and (hf.startswith("pypi:") or hf.lower().endswith(".gguf") or os.path.isfile(hf)):
        # AutoConfig.from_pretrained (miles/utils/hf_config.py) reads a directory's (or a hub
        # id's) config.json; PPO Deck's engine reads GGUF itself
        _issue(out, "error", "miles.hf_checkpoint_not_a_directory", ("hf_checkpoint",),
               f"--hf-checkpoint {hf} is a single file; miles reads its config.json with "
               "transformers' AutoConfig at start-up, so it needs an HF checkpoint directory.",
               "point --hf-checkpoint at an HF checkpoint directory, or run on PPO Deck's "
               "engine")


def _miles_hf_validate_args(r: dict, out: Out) -> None:
    """miles' hf_validate_args (miles/utils/arguments.py:2678-2681, 3656-3707 at 31f1ca961):
    on the Megatron backend, miles holds the model flags to --hf-checkpoint's config.json at
    start-up, whatever --model-init says. Flags are compared as resolved (an unset one at the
    value PPO Deck derives for it, Megatron's default); fields the file leaves out are not."""
    from .hf_config_file import miles_validated_values

    if r["train_backend"] == "fsdp":
        return
    theirs = miles_validated_values(r["hf_checkpoint"])
    if not theirs:
        return
    differ = [dest for dest, value in theirs.items()
              if r.get(dest) is not None and _not_equal(r[dest], value)]
    if not differ:
        return
    said = ", ".join(f"{_fl(d)} {_text(r[d])} (the checkpoint's: {_text(theirs[d])})"
                     for d in differ)
    _issue(out, "error", "miles.hf_config_mismatch", ("hf_checkpoint", *differ),
           f"miles' hf_validate_args refuses model flags that differ from "
           f"{r['hf_checkpoint']}/config.json: {said}.",
           "set them to the checkpoint's values, or point --hf-checkpoint at the model the "
           "flags describe")


def _miles_ref_load(r: dict, m: Machine, out: Out) -> None:
    """miles loads the reference model for any KL term and stops at start-up
    (FileNotFoundError) when --ref-load does not exist; unset, it fails the same way."""
    if not r["with_ref"]:
        return
    ref = r["ref_load"]
    if ref is not None and (on_a_cluster(r, m.env) or os.path.exists(ref)):
        return
    said = (f"ref_load {ref} does not exist, please check the path" if ref is not None else
            "--ref-load is not set (miles stops at start-up)")
    _issue(out, "error", "miles.ref_load_missing", ("ref_load", "kl_coef", "use_kl_loss"),
           f"{said}: a KL term, --use-kl-loss or a non-zero --kl-coef, makes miles load the "
           "reference model from --ref-load.",
           "point --ref-load at a Megatron torch_dist checkpoint (`ppodeck prepare` converts "
           "one), or drop the KL term")


def miles_machine_rules(r: dict, m: Machine, out: Out) -> None:
    """`--engine miles`: what this machine must offer miles' train.py (CUDA GPUs for the
    layout: miles has no CPU path). A cluster (--ray-address, RAY_ADDRESS) is checked there."""
    needed = r["placement_bundles"] or r["world_size"]
    if on_a_cluster(r, m.env) or needed is None or m.gpus >= needed:
        return
    _issue(out, "error", "miles.gpus_missing",
           ("actor_num_nodes", "actor_num_gpus_per_node", "rollout_num_gpus"),
           f"miles trains and generates on CUDA GPUs only: the layout needs {needed} GPUs and "
           f"this machine has {m.gpus} visible.",
           "run on a machine with the GPUs, submit to a Ray cluster (`ppodeck run ... --engine "
           "miles --submit http://HEAD:8265`), or fit the layout to the GPUs here")
