"""Derived values shown next to the issues: topology, batch arithmetic and a memory estimate.

README-memory: how the per-GPU memory estimate is computed
-----------------------------------------------------------
It is a planning number, not a promise: expect +-30% against `nvidia-smi` for dense models,
worse for MoE, long contexts or custom kernels. It answers "which phase is tight, and which
model dominates it", not "will it fit to the last GiB". All figures are GiB per GPU on the train
GPUs (the rollout entry of a non-colocated run is on the rollout GPUs instead).

Parameters P (from the Megatron shape flags; vocab padded to --make-vocab-size-divisible-by x TP):
    attention  = h*(heads*kv) + 2*h*(groups*kv) + (heads*kv)*h   (+ biases unless
                 --disable-bias-linear, + 2*kv with --qk-layernorm)
    mlp        = 3*h*ffn with --swiglu else 2*h*ffn   (x --num-experts for MoE, using
                 --moe-ffn-hidden-size, + h*experts router)
    per layer  = attention + mlp + 2*h norms;   P = L*layer + V*h*(2 if untied else 1) + h
The shard one GPU holds is P_gpu = P / (TP*PP) (embeddings are not split out per stage).

Train state of one model (actor or critic) on one GPU, bf16 training:
    weights      2 B * P_gpu
    grads        4 B * P_gpu with --accumulate-allreduce-grads-in-fp32, else 2 B
    optimizer    12 B * P_gpu (fp32 master + Adam m, v), divided by DP with the distributed
                 optimizer (miles turns it on for adam); 0 for --optimizer-cpu-offload
    activations  T = --max-tokens-per-gpu under dynamic batch, else micro-batch x seq-length.
                 One layer's working set is what its backward keeps, in bf16, per token:
                 2 B * (4*h [two norm inputs, qkv and fc1 inputs] + 2*(heads+2*groups)*kv [q/k
                 norm inputs and v, attention q/k/v] + heads*kv [attention output] +
                 3*ffn with --swiglu else 2*ffn [fc1 output, activation output]), / TP. For a
                 plain GPT (groups = heads, heads*kv = h, ffn = 4h, gelu) that is 38*T*h, close
                 to Korthikanti et al.'s 34*T*h with flash attention; for GQA + SwiGLU models it
                 is larger (46*T*h for Qwen3-0.6B), which is what the H200 measured.
                 --recompute-granularity full keeps 2*T*h bytes per local layer plus one working
                 set; otherwise every local layer keeps its working set.
    logits       actor only: 6 B * T * V/TP (bf16 logits + fp32 softmax), on the last stage;
                 the critic's value head output is negligible.
Each process also holds a CUDA context: CONTEXT_GIB = 0.5.

Checked on an H200 against bench/gpu_bench.py (Qwen3-0.6B shape, 8 x 1024 tokens, bf16, the
default fast paths): torch's peak allocated was actor 30.1 GiB, critic 21.0 GiB; the estimate
for `qwen3-0.6b-ppo-1gpu` (--max-tokens-per-gpu 8192) is 26.4 and 19.4 with the context (the
34*T*h working set gave 23.8 and 16.8). Still low by 10-15%: allocator slack and temporaries
are not modelled.

Rollout engine: with SGLang it reserves --sglang-mem-fraction-static (0.8 when unset) of
GPU_GIB = 80 GiB; with --rollout-backend hf it holds the bf16 weights, 2 B * P / gpus-per-engine.

Phases (miles' order): `generate` (rollout active, train models asleep), `critic_train`
(critic awake, rollout released) and `actor_train` (actor awake). An asleep model costs only its
context when --offload-train is on, and its whole train state otherwise. A released rollout
costs only its context when --offload-rollout is on. `total` is what one train GPU holds:
actor + critic, plus the rollout when colocated.

Unknown shape (missing --num-layers, --hidden-size, --num-attention-heads or --vocab-size) gives
None everywhere instead of a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config.model import RunConfig
from engine.config.resolve import resolve
from engine.vocabulary import Phase

GIB = float(1 << 30)
GPU_GIB = 80.0
CONTEXT_GIB = 0.5
DEFAULT_SGLANG_FRACTION = 0.8
PHASES = (Phase.GENERATE, Phase.CRITIC_TRAIN, Phase.ACTOR_TRAIN)  # those the estimate covers
ROLES = ("actor", "critic", "rollout", "total")


@dataclass(frozen=True)
class Derived:
    """Numbers derived from a config; None where the inputs do not determine them."""

    world_size: int | None = None
    dp_size: int | None = None
    rollout_num_gpus: int | None = None
    rollout_engines: int | None = None
    samples_per_rollout: int | None = None
    samples_trimmed: int | None = None
    actor_steps_per_rollout: int | None = None
    critic_steps_per_rollout: int | None = None
    total_train_iters: int | None = None
    gpus_needed: int | None = None
    params: int | None = None
    memory_gib: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["memory_gib"] = {phase: dict(roles) for phase, roles in self.memory_gib.items()}
        return out


def derive(config: RunConfig) -> Derived:
    return derive_resolved(resolve(config))


def _positive(*values: Any) -> bool:
    return all(type(v) is int and v > 0 for v in values)


def derive_resolved(r: Mapping[str, Any]) -> Derived:
    """Derived values from a resolve()d dict (check() reuses its own resolution)."""
    world = r["world_size"]
    rbs, n, gbs = r["rollout_batch_size"], r["n_samples_per_prompt"], r["global_batch_size"]
    samples = rbs * n if _positive(rbs, n) else None
    steps = samples // gbs if samples is not None and _positive(gbs) else None
    trimmed = samples % gbs if steps is not None else None
    total_iters = r["train_iters"] if steps is not None else None
    params = count_params(r)
    return Derived(
        world_size=world,
        dp_size=r["dp_size"],
        rollout_num_gpus=r["rollout_num_gpus"],
        rollout_engines=r["rollout_engines"],
        samples_per_rollout=samples,
        samples_trimmed=trimmed,
        actor_steps_per_rollout=steps,
        critic_steps_per_rollout=(steps if r["use_critic"] else 0) if steps is not None else None,
        total_train_iters=total_iters,
        gpus_needed=gpus_needed(r),
        params=params,
        memory_gib=memory_estimate(r, params),
    )


def gpus_needed(r: Mapping[str, Any]) -> int | None:
    """Placement-group bundles of one GPU each (resolve(): miles' layout)."""
    return r["placement_bundles"]


def count_params(r: Mapping[str, Any]) -> int | None:
    """Parameter count from the Megatron shape flags (None when the shape is incomplete)."""
    layers, hidden = r["num_layers"], r["hidden_size"]
    heads, vocab = r["num_attention_heads"], r["vocab_size"]
    groups, kv, ffn = r["num_query_groups"], r["kv_channels"], r["ffn_hidden_size"]
    if not _positive(layers, hidden, heads, vocab, groups, kv, ffn):
        return None
    bias = not r["disable_bias_linear"]
    q, kvd = heads * kv, groups * kv
    attn = hidden * q + 2 * hidden * kvd + q * hidden
    if bias:
        attn += q + 2 * kvd + hidden
    if r["qk_layernorm"]:
        attn += 2 * kv
    mlp = (3 if r["swiglu"] else 2) * hidden * ffn + (ffn + hidden if bias else 0)
    experts = r["num_experts"]
    if _positive(experts):
        expert_ffn = r["moe_ffn_hidden_size"] or ffn
        mlp = experts * (3 if r["swiglu"] else 2) * hidden * expert_ffn + hidden * experts
    norms = 2 * hidden * (2 if r["normalization"] == "LayerNorm" else 1)
    tp = r["tensor_model_parallel_size"]
    multiple = r["make_vocab_size_divisible_by"] * (tp if _positive(tp) else 1)
    padded_vocab = -(-vocab // multiple) * multiple if multiple > 0 else vocab
    embeddings = padded_vocab * hidden * (2 if r["untie_embeddings_and_output_weights"] else 1)
    return layers * (attn + mlp + norms) + embeddings + hidden


def _tokens_per_gpu(r: Mapping[str, Any]) -> int | None:
    if r["use_dynamic_batch_size"]:
        tokens = r["max_tokens_per_gpu"]
    else:
        tokens = r["micro_batch_size"] * r["seq_length"] if _positive(
            r["micro_batch_size"], r["seq_length"]) else None
    return tokens if _positive(tokens) else None


def _train_state_gib(r: Mapping[str, Any], params: int, dp: int, role: str) -> float:
    tp, pp = r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"]
    shard = params / (tp * pp)
    weights = 2 * shard
    grads = (4 if r["accumulate_allreduce_grads_in_fp32"] else 2) * shard
    optim = 0.0 if r["optimizer_cpu_offload"] else 12 * shard
    if r["use_distributed_optimizer"]:
        optim /= dp
    tokens = _tokens_per_gpu(r) or 0
    hidden = r["hidden_size"]
    working = tokens * _layer_bytes_per_token(r) / tp
    local_layers = -(-r["num_layers"] // pp)
    if r["recompute_granularity"] == "full":
        acts = local_layers * 2 * tokens * hidden + working
    else:
        acts = local_layers * working
    logits = 6 * tokens * r["vocab_size"] / tp if role == "actor" else 0.0
    return (weights + grads + optim + acts + logits) / GIB + CONTEXT_GIB


def _layer_bytes_per_token(r: Mapping[str, Any]) -> int:
    """bf16 bytes one layer keeps per token for its backward (see the module docstring)."""
    hidden, heads = r["hidden_size"], r["num_attention_heads"]
    groups = r["num_query_groups"] or heads
    kv = r["kv_channels"] or hidden // heads
    ffn = r["moe_ffn_hidden_size"] if _positive(r["num_experts"]) and r[
        "moe_ffn_hidden_size"] else (r["ffn_hidden_size"] or 4 * hidden)
    qkv = (heads + 2 * groups) * kv
    mlp = (3 if r["swiglu"] else 2) * ffn
    return 2 * (4 * hidden + 2 * qkv + heads * kv + mlp)


def _rollout_gib(r: Mapping[str, Any], params: int) -> float:
    if r["rollout_backend"] == "hf":
        per_engine = r["rollout_num_gpus_per_engine"]
        return 2 * params / max(per_engine, 1) / GIB + CONTEXT_GIB
    fraction = r["sglang_mem_fraction_static"]
    return (DEFAULT_SGLANG_FRACTION if fraction is None else fraction) * GPU_GIB


def memory_estimate(r: Mapping[str, Any], params: int | None
                    ) -> dict[str, dict[str, float | None]]:
    """Per-GPU GiB for each phase and role; see the module docstring for the formula."""
    tp, pp, dp = (r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                  r["dp_size"])
    if params is None or not _positive(tp, pp, dp):
        return {phase: dict.fromkeys(ROLES) for phase in PHASES}
    actor_awake = _train_state_gib(r, params, dp, "actor")
    critic_awake = _train_state_gib(r, params, dp, "critic") if r["use_critic"] else 0.0
    rollout_active = _rollout_gib(r, params)
    asleep = CONTEXT_GIB if r["offload_train"] else None
    released = CONTEXT_GIB if r["offload_rollout"] else rollout_active
    table = {
        Phase.GENERATE: (asleep or actor_awake, asleep or critic_awake, rollout_active),
        Phase.CRITIC_TRAIN: (asleep or actor_awake, critic_awake, released),
        Phase.ACTOR_TRAIN: (actor_awake, asleep or critic_awake, released),
    }
    if not r["use_critic"]:
        critic_phase = table[Phase.CRITIC_TRAIN]
        table[Phase.CRITIC_TRAIN] = (critic_phase[0], 0.0, critic_phase[2])
    out: dict[str, dict[str, float | None]] = {}
    for phase, (actor, critic, rollout) in table.items():
        critic = critic if r["use_critic"] else 0.0
        total = actor + critic + (rollout if r["colocate"] else 0.0)
        out[phase] = {"actor": round(actor, 2), "critic": round(critic, 2),
                      "rollout": round(rollout, 2), "total": round(total, 2)}
    return out


# ---- host memory under --offload-train (engine.host_memory) --------------------------------
# What the offload keeps in pinned host memory per GPU (engine/train/offload.py
# train_state_tensors: bf16 params, fp32 master weights and Adam m, v; grads are freed, not
# copied), the actor's pinned reference and swap copies under --use-kl-loss
# (engine/train/worker.py: weights.backup), and the hf rollout's offloaded bf16 weights.
HOST_USABLE_FRACTION = 0.9  # the rest: the OS, each process's own memory, Ray's object store


def _offloaded_state_bytes(r: Mapping[str, Any], params: int, role: str) -> float:
    shard = params / (r["tensor_model_parallel_size"] * r["pipeline_model_parallel_size"])
    optim = 0.0 if r["optimizer_cpu_offload"] else 12 * shard
    if r["use_distributed_optimizer"]:
        optim /= r["dp_size"]
    ref_copies = 4 * shard if role == "actor" and r["use_kl_loss"] else 0.0
    return 2 * shard + optim + ref_copies


def host_offload_gib(r: Mapping[str, Any], params: int | None) -> dict[str, float] | None:
    """Pinned host GiB on the first node (the one that also holds the hf rollout) while the
    models sleep, by role and in total; None without --offload-train or a known shape."""
    tp, pp, dp = (r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                  r["dp_size"])
    if params is None or not r["offload_train"] or not _positive(tp, pp, dp):
        return None
    per_node = r["actor_num_gpus_per_node"]
    actor = _offloaded_state_bytes(r, params, "actor") * per_node / GIB
    critic = (_offloaded_state_bytes(r, params, "critic") * per_node / GIB
              if r["use_critic"] else 0.0)
    # auto picks hf wherever sglang is missing: counted, as the larger of the two
    hf_rollout = r["rollout_backend"] != "sglang" and r["colocate"] and r["offload_rollout"]
    rollout = 2 * params / GIB if hf_rollout else 0.0
    return {"actor": actor, "critic": critic, "rollout": rollout,
            "total": actor + critic + rollout}
