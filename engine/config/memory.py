"""The memory model, in one home: what a run holds per GPU in each phase, at the end of init, and
in host memory; check() (engine/config/derived.py, rules_memory.py) and the driver
(engine/driver/roles.py, offload.py) read it from here. The formulas (parameters, a trainer
awake and asleep, the rollout engine, the phases) and what they were checked against are in
docs/memory.md: it aims at NVML's used memory per GPU within +-15% for dense models.

Unknown shape (missing --num-layers, --hidden-size, --num-attention-heads or --vocab-size) gives
None everywhere instead of a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..vocabulary import Phase

GIB = float(1 << 30)
GPU_GIB = 80.0
DEFAULT_SGLANG_FRACTION = 0.8
# ---- per-process and per-GPU terms the flags do not scale (measured with NVML) ----
# NVML counts the driver's own reservation as used: 1.21 GiB during ray_start, before any
# process of the run had touched the GPU (e2e-1.7b)
DRIVER_RESERVED_GIB = 1.2
# one process's CUDA context: rollout_start's peak 4.94 GiB = 1.21 driver + 3.20 bf16 weights
# + 0.53 (e2e-1.7b)
CONTEXT_GIB = 0.5
# what a trainer process holds beyond its context and torch's reserve, also while it sleeps:
# NCCL communicators of Megatron's process groups, cuBLAS/cuDNN handles, kernel images. The
# gpu events' non-torch bytes: 1.25 GiB a trainer after init, 2.17 after its first step at
# 1.7B; 1.22 and 2.12 at 0.6B: it does not scale with the model
TRAINER_RUNTIME_GIB = 2.15
# what the sleeping actor keeps in torch's reserve once it has trained, per logit of one
# micro-batch (T x V/TP): after the sleep's empty_cache, the trainers' torch reserve grew by
# 3.72 GB at 0.6B and 3.88 GB at 1.7B (both T = 8192, V = 151936) with the actor's first step,
# and by 0.07 GB with the critic's. Live tensors, or segments of the logits pinned by a small
# live one: the offload events' device_allocated_after / device_reserved_after will tell.
# Modelled until found, as it costs every other phase.
ACTOR_KEPT_BYTES_PER_LOGIT = 3
# the hf fast decoder's sampling: fp32 softmax, exponential noise and log-softmax over
# [batch, vocab], once in the CUDA-graph pool and once for the eager first token, plus the
# bf16 logits buffer (engine/rollout/decoder/sampling.py sample_sync_free, DecodeState.logits)
SAMPLING_BYTES_PER_LOGIT = 2 * 3 * 4 + 2
KV_CACHE_ROUND = 64  # decoder.generate.CACHE_ROUND: the static cache's length granularity
DECODE_VARIANT_ENV = "PPODECK_DECODE"  # `packed` copies q/k/v and gate/up side by side
DEFAULT_DECODER_PACKED = True  # the hf backend's CUDA default variant names `packed`
PHASES = (Phase.GENERATE, Phase.CRITIC_TRAIN, Phase.ACTOR_TRAIN)  # those the estimate covers
ROLES = ("actor", "critic", "rollout", "total")


def _positive(*values: Any) -> bool:
    return all(type(v) is int and v > 0 for v in values)


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
    elif r["add_qkv_bias"]:  # Qwen2: biases on q/k/v only
        attn += q + 2 * kvd
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
        longest = longest_sample(r)
        cp = max(1, r["context_parallel_size"] or 1)  # each CP rank holds 1/CP of a row
        tokens = -(-r["micro_batch_size"] * longest // cp) if _positive(
            r["micro_batch_size"], longest) else None
    return tokens if _positive(tokens) else None


def longest_sample(r: Mapping[str, Any]) -> int | None:
    """The most tokens a sample can hold: the context length, else prompt + response where both
    are bounded, else --seq-length. Under rotary embeddings --seq-length truncates nothing (as
    in miles), so it is only the fallback."""
    if _positive(r["rollout_max_context_len"]):
        return r["rollout_max_context_len"]
    if _positive(r["max_prompt_len"], r["rollout_max_response_len"]):
        return r["max_prompt_len"] + r["rollout_max_response_len"]
    return r["seq_length"]


def _shard(r: Mapping[str, Any], params: int) -> float:
    """Parameters one rank holds (embeddings are not split out per stage)."""
    return params / (r["tensor_model_parallel_size"] * r["pipeline_model_parallel_size"])


def state_bytes(r: Mapping[str, Any], params: int, bf16: bool, moments: bool = True) -> float:
    """A trainer rank's state: weights (bf16 2 B, fp32 4 B), grads (fp32 with
    --accumulate-allreduce-grads-in-fp32 or fp32 training), the fp32 master copy (bf16 only)
    and Adam's m, v (`moments`: they come with the first step, so not at init). The
    distributed optimizer shards master and moments over DP x CP."""
    shard = _shard(r, params)
    weights = (2 if bf16 else 4) * shard
    grads = (4 if r["accumulate_allreduce_grads_in_fp32"] or not bf16 else 2) * shard
    optim = 0.0 if r["optimizer_cpu_offload"] else \
        ((4 if bf16 else 0) + (8 if moments else 0)) * shard
    if r["use_distributed_optimizer"]:
        optim /= r["dp_size"] * max(1, r["context_parallel_size"] or 1)
    return weights + grads + optim


def work_bytes(r: Mapping[str, Any], params: int, role: str, bf16: bool) -> float:
    """A trainer rank's peak working memory in its step: activations and, for the actor, the
    logits (or, when larger, its weight export); fp32 training holds twice the bytes."""
    tp, pp = r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"]
    scale = 1 if bf16 else 2
    tokens = _tokens_per_gpu(r) or 0
    working = scale * tokens * _layer_bytes_per_token(r) / tp
    local_layers = -(-r["num_layers"] // pp)
    if r["recompute_granularity"] == "full":
        acts = local_layers * scale * 2 * tokens * r["hidden_size"] + working
    else:
        acts = local_layers * working
    logits = (6 if bf16 else 8) * tokens * r["vocab_size"] / tp if role == "actor" else 0.0
    # after its step the actor exports while awake: the converted HF tensors and the flat
    # buffer the rollout maps (engine/model/ipc_sync.py), 2 B/param each; activations are
    # gone by then, so the larger of the two is the peak
    export = 4 * _shard(r, params) if role == "actor" and bf16 and _ipc_export(r) else 0.0
    return max(acts + logits, export)


def _train_state_gib(r: Mapping[str, Any], params: int, role: str) -> float:
    """A trainer awake on one GPU (bf16): its state, its peak working memory, its process."""
    held = state_bytes(r, params, bf16=True) + work_bytes(r, params, role, bf16=True)
    return held / GIB + CONTEXT_GIB + TRAINER_RUNTIME_GIB


def _actor_kept_gib(r: Mapping[str, Any]) -> float:
    """The actor's torch reserve kept through its sleep (ACTOR_KEPT_BYTES_PER_LOGIT)."""
    tokens = _tokens_per_gpu(r) or 0
    logits = tokens * r["vocab_size"] / r["tensor_model_parallel_size"]
    return ACTOR_KEPT_BYTES_PER_LOGIT * logits / GIB


def _ipc_export(r: Mapping[str, Any]) -> bool:
    """The actor's weights reach the rollout as a device buffer (ipc_sync.weight_sync_path)."""
    one_gpu = r["actor_num_nodes"] * r["actor_num_gpus_per_node"] == 1
    return bool(r["colocate"]) and one_gpu and r["rollout_backend"] in ("hf", "sglang")


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


def _rollout_gib(r: Mapping[str, Any], params: int, packed: bool,
                 gpu_total_gib: float | None = None) -> float:
    """The rollout engine generating, on one of its GPUs (SGLang's static fraction is of the
    GPU it runs on: `gpu_total_gib`, GPU_GIB where unknown)."""
    if r["rollout_backend"] != "hf":
        fraction = r["sglang_mem_fraction_static"]
        gpu = GPU_GIB if gpu_total_gib is None else gpu_total_gib
        return (DEFAULT_SGLANG_FRACTION if fraction is None else fraction) * gpu
    per_engine = _count(r["rollout_num_gpus_per_engine"]) or 1
    weights = 2 * params / per_engine
    rows = _rows_per_engine(r)
    layers, hidden = r["num_layers"], r["hidden_size"]
    heads, kv = r["num_attention_heads"], r["kv_channels"] or hidden // r["num_attention_heads"]
    groups = r["num_query_groups"] or heads
    # the static KV cache: k and v, bf16, [layers, rows, groups, length, kv] (rollout/decoder)
    kv_cache = 2 * 2 * layers * rows * groups * _cache_length(r) * kv / per_engine
    sampling = SAMPLING_BYTES_PER_LOGIT * rows * r["vocab_size"]
    # `packed`: each layer's q/k/v and gate/up weights copied side by side, bf16
    packed_copy = (2 * layers * hidden * ((heads + 2 * groups) * kv + 2 * r["ffn_hidden_size"])
                   / per_engine if packed else 0.0)
    return (weights + kv_cache + sampling + packed_copy) / GIB + CONTEXT_GIB


def _rows_per_engine(r: Mapping[str, Any]) -> int:
    """Sequences one engine decodes at once: every sample of the rollout, split over engines."""
    rows = _count(r["rollout_batch_size"]) * _count(r["n_samples_per_prompt"])
    if r["rollout_backend"] == "hf":
        return rows  # one generator decodes them all (rules_engine: engine.hf_one_gpu)
    return -(-rows // (_count(r["rollout_engines"]) or 1))


def _count(value: Any) -> int:  # noqa: ANN401
    """A positive int flag, 0 when unset or invalid (check() reports it on its own)."""
    return value if _positive(value) else 0


def _cache_length(r: Mapping[str, Any]) -> int:
    """Prompt + response slots, rounded as the decoder rounds them (an unset prompt limit
    counts as no prompt: the response alone)."""
    slots = _count(r["max_prompt_len"]) + _count(r["rollout_max_response_len"])
    return -(-slots // KV_CACHE_ROUND) * KV_CACHE_ROUND


def packed_decoder(env: Mapping[str, str]) -> bool:
    """Whether the hf decoder on CUDA packs its weights: unset, PPODECK_DECODE means the
    backend's default variant, which is packed (DEFAULT_DECODER_PACKED, tested against
    decoder.features.BACKEND_VARIANT); set, whether it names the `packed` feature."""
    raw = env.get(DECODE_VARIANT_ENV)
    if raw is None:
        return DEFAULT_DECODER_PACKED
    return "packed" in (part.strip().lower() for part in raw.split("+"))


def _phase_parts(r: Mapping[str, Any], params: int, env: Mapping[str, str],
                 gpu_total_gib: float | None) -> dict[str, tuple[float, float, float]]:
    """(actor, critic, rollout) GiB per GPU in each phase."""
    actor_awake = _train_state_gib(r, params, "actor")
    critic_awake = _train_state_gib(r, params, "critic") if r["use_critic"] else 0.0
    rollout_active = _rollout_gib(r, params, packed_decoder(env), gpu_total_gib)
    asleep = CONTEXT_GIB + TRAINER_RUNTIME_GIB if r["offload_train"] else None
    actor_asleep = None if asleep is None else asleep + _actor_kept_gib(r)
    released = CONTEXT_GIB if r["offload_rollout"] else rollout_active
    critic_asleep = (asleep or critic_awake) if r["use_critic"] else 0.0
    return {
        Phase.GENERATE: (actor_asleep or actor_awake, critic_asleep, rollout_active),
        Phase.CRITIC_TRAIN: (actor_asleep or actor_awake, critic_awake, released),
        Phase.ACTOR_TRAIN: (actor_awake, critic_asleep, released),
    }


def _laid_out(r: Mapping[str, Any]) -> bool:
    """TP, PP and DP are known, so a rank's share is."""
    return _positive(r["tensor_model_parallel_size"], r["pipeline_model_parallel_size"],
                     r["dp_size"])


def gpu_peaks_gib(r: Mapping[str, Any], params: int | None, env: Mapping[str, str],
                  gpu_total_gib: float | None = None) -> dict[str, float] | None:
    """What the run itself allocates on one GPU at its peak over the phases: `train` on the
    actor's GPUs (the rollout's too when colocated), and `rollout` on the rollout's own GPUs
    when it is not colocated. The phase table's totals less DRIVER_RESERVED_GIB: NVML already
    shows that reserve as used before the run starts, so this is what must be free."""
    if params is None or not _laid_out(r):
        return None
    parts = _phase_parts(r, params, env, gpu_total_gib)
    colocated = 1.0 if r["colocate"] else 0.0
    peaks = {"train": max(actor + critic + colocated * rollout
                          for actor, critic, rollout in parts.values())}
    if not r["colocate"] and _count(r["rollout_num_gpus"]):
        peaks["rollout"] = parts[Phase.GENERATE][2]
    return peaks


def memory_estimate(r: Mapping[str, Any], params: int | None,
                    env: Mapping[str, str], gpu_total_gib: float | None = None
                    ) -> dict[str, dict[str, float | None]]:
    """Per-GPU GiB for each phase and role; see the module docstring for the formula. `env`:
    the run's environment, where PPODECK_DECODE is read. `total` is the most any one GPU of
    the run holds in the phase: a train GPU, or a rollout GPU where the rollout has its own."""
    if params is None or not _laid_out(r):
        return {phase: dict.fromkeys(ROLES) for phase in PHASES}
    out: dict[str, dict[str, float | None]] = {}
    for phase, (actor, critic, rollout) in _phase_parts(r, params, env, gpu_total_gib).items():
        train = actor + critic + (rollout if r["colocate"] else 0.0)
        total = max(train, rollout) + DRIVER_RESERVED_GIB
        out[phase] = {"actor": round(actor, 2), "critic": round(critic, 2),
                      "rollout": round(rollout, 2), "total": round(total, 2)}
    return out


def init_peak_gib(r: Mapping[str, Any], params: int | None, with_rollout: bool,
                  num_trainers: int, env: Mapping[str, str]) -> float | None:
    """GiB per GPU with every trainer awake at the end of its init (its state before Adam's
    moments, and its process) and, `with_rollout`, the rollout generating rollout 0's batch
    (the hf decoder's warm-up): the driver's init plan (engine/driver/roles.py) asks this."""
    if params is None or not _laid_out(r):
        return None
    trainer = state_bytes(r, params, bf16=bool(r["bf16"]), moments=False) / GIB + CONTEXT_GIB
    rollout = _rollout_gib(r, params, packed_decoder(env))
    return num_trainers * trainer + (rollout if with_rollout else 0.0)


# ---- host memory under --offload-train (engine.host_memory) --------------------------------
# What the offload keeps in pinned host memory per GPU (engine/model/offload.py
# train_state_tensors: bf16 params, fp32 master weights and Adam m, v; grads are freed, not
# copied), the actor's pinned reference and swap copies under --use-kl-loss
# (engine/train/worker.py: weights.backup), and the hf rollout's offloaded bf16 weights. Each is
# pinned at exactly its size (engine/model/pinned.py; torch's own pinned allocator would round
# every tensor up to a power of two: 1.34x at 1.7B).
HOST_USABLE_FRACTION = 0.9  # the rest: the OS and its page cache
# each process of the run besides its pinned state (process-tree RSS, the gpu events'
# rss_bytes, less the pinned blocks): imports, torch.compile's worker pools, Ray, the driver.
# For three workers (actor, critic, hf rollout) on the GPU host: 24.7 GiB at 1.7B and 26.6 at
# 0.6B in earlier runs, then 35.2 at 1.7B (bench/preset_memory.py, docs/performance.md: process-tree
# RSS peak 89.7 GiB less 54.5 pinned). The largest, per worker: RSS counts shared pages in
# every process, so this stays an upper bound
HOST_PER_WORKER_GIB = 11.8


def _offloaded_state_bytes(r: Mapping[str, Any], params: int, role: str) -> float:
    shard = params / (r["tensor_model_parallel_size"] * r["pipeline_model_parallel_size"])
    optim = 0.0 if r["optimizer_cpu_offload"] else 12 * shard
    if r["use_distributed_optimizer"]:
        optim /= r["dp_size"]
    ref_copies = 4 * shard if role == "actor" and r["use_kl_loss"] else 0.0
    return 2 * shard + optim + ref_copies


def host_offload_gib(r: Mapping[str, Any], params: int | None) -> dict[str, float] | None:
    """Host GiB on the first node (the one that also holds the hf rollout) while the models
    sleep: pinned state by role and in total, and apart from it the worker processes
    themselves (an RSS sum, which counts shared pages once per process: an upper bound); None
    without --offload-train or a known shape."""
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
    engines = per_node // (_count(r["rollout_num_gpus_per_engine"]) or 1) or 1
    workers = per_node * (2 if r["use_critic"] else 1) + (engines if r["colocate"] else 0)
    processes = HOST_PER_WORKER_GIB * workers
    return {"actor": actor, "critic": critic, "rollout": rollout,
            "total": actor + critic + rollout, "processes": processes}


# ---- host memory of a run on CPU (no GPU visible: every rank is a CPU process) ----------------
# Nothing moves to the host between phases there: every rank keeps its fp32 state, the hf
# rollout its fp32 model, and each process its imports. The constants are process RSS measured
# on CPU runs of tiny-cpu and smollm2-135m-cpu (docs/performance.md, "Host memory on CPU"): RSS
# counts shared pages in every process, so they lean high.
CPU_BASE_GIB = 1.3  # the driver, Ray's GCS, raylet, dashboard and runtime-env agents, idle worker
CPU_WORKER_GIB = 0.5  # one Ray worker with torch and megatron-core imported, before any model
# what a trainer rank holds beyond its state and activations, per parameter: the fp32 HF
# export its weights reach the rollout in (4 B), and the rest of what smollm2-135m-cpu's ranks
# showed (6.2 GiB each at their peak)
CPU_RANK_EXTRA_BYTES_PER_PARAM = 10
# the rollout's model (fp32) and the converted weights it is given, also fp32
CPU_ROLLOUT_BYTES_PER_PARAM = 8


def _cpu_rank_bytes(r: Mapping[str, Any], params: int, role: str) -> float:
    """A CPU trainer rank: fp32 state with Adam's moments, its step's working memory, what it
    holds beside them, and, for the actor under a KL term, the reference copy and the swap
    buffer (fp32 each)."""
    shard = _shard(r, params)
    ref = 2 * 4 * shard if role == "actor" and r["with_ref"] else 0.0
    return (state_bytes(r, params, bf16=False) + work_bytes(r, params, role, bf16=False) + ref
            + CPU_RANK_EXTRA_BYTES_PER_PARAM * shard)


def _cpu_rollout_bytes(r: Mapping[str, Any], params: int) -> float:
    """The hf rollout on CPU (transformers' generate, fp32): the model and its weights, its K/V
    cache for every sample of a rollout at full length, and fp32 logits twice."""
    heads = r["num_attention_heads"]
    kv = r["kv_channels"] or r["hidden_size"] // heads
    groups = r["num_query_groups"] or heads
    rows = _count(r["rollout_batch_size"]) * _count(r["n_samples_per_prompt"])
    kv_cache = 2 * 4 * r["num_layers"] * rows * groups * _cache_length(r) * kv
    return CPU_ROLLOUT_BYTES_PER_PARAM * params + kv_cache + 2 * 4 * rows * r["vocab_size"]


def cpu_host_gib(r: Mapping[str, Any], params: int | None) -> dict[str, float] | None:
    """Host GiB of a run whose ranks are CPU processes: every actor rank, every critic rank, the
    rollout, and the processes themselves; None for an unknown shape or layout."""
    world = r["world_size"]
    if params is None or not _laid_out(r) or not _positive(world):
        return None
    actor = world * _cpu_rank_bytes(r, params, "actor") / GIB
    critic = world * _cpu_rank_bytes(r, params, "critic") / GIB if r["use_critic"] else 0.0
    rollout = 0.0 if r["debug_train_only"] else _cpu_rollout_bytes(r, params) / GIB
    workers = world * (2 if r["use_critic"] else 1) + (0 if r["debug_train_only"] else 1)
    processes = CPU_BASE_GIB + CPU_WORKER_GIB * workers
    return {"actor": actor, "critic": critic, "rollout": rollout, "processes": processes,
            "total": actor + critic + rollout + processes}
