#!/usr/bin/env python3
"""GPU benchmark for the training and rollout hot paths, each side by side in one run.

    PYTHONPATH=/tmp/site python3 bench/gpu_bench.py            # on the H200 (bf16)
    .venv/bin/python bench/gpu_bench.py --smoke                # tiny shapes on CPU, seconds

(0) the bf16 matmul rate (8192^3; the ceiling the train numbers are a fraction of).
(a) actor and critic train steps built by the worker's own functions (engine.train.model,
    engine.train.optimizer: Megatron DDP -> get_megatron_optimizer, Adam, bf16 params with fp32
    master weights and fp32 grad buffers), world size 1, Qwen3-0.6B shape, 8 x 1024 tokens,
    forward + backward + optimizer step, four variants side by side (--variant picks some):
      unfused      Megatron's stock local spec (PPODECK_ATTENTION=unfused PPODECK_FUSED=0)
      sdpa         our SDPA core attention only (PPODECK_FUSED=0)
      sdpa+ops     SDPA + fast paths with per-op fusion (compiled RoPE/RMSNorm, Megatron's
                   SwiGLU; PPODECK_COMPILE_LAYERS=0), direct TP=1 linears, fused log-probs,
                   batch-first logits, foreach grad norm, fused AdamW
      sdpa+layers  the default: the same, but each transformer layer compiled whole (its
                   batch dim static, as for a run with fixed-size micro-batches; a run with
                   token-budget micro-batches compiles it dynamic: see layer_compile.py)
    and, with --layer-spec te (PPODECK_TE=1; by default where transformer_engine.pytorch imports):
      te           transformer-engine's layer spec (TE linears, norms and fused attention) with
                   the fast paths that still apply (fused log-probs, batch-first logits,
                   foreach grad norm, fused AdamW); the local rows run with PPODECK_TE=0
    then the default (and te) at twice the tokens per micro-batch (16 x 1024). Each row is
    the median of 3 timed blocks; `--batch-dim dynamic --batch-dim static ...` repeats every
    row with the compiled layers' batch dim dynamic (token-budget runs) or static (fixed-size
    micro-batches, the default), a dynamo reset between passes.
    The actor's loss is the mean token log-prob through engine.train.logprobs (the PPO actor's
    own path); the critic's is a squared value.
    FLOPs per step = 6 * N_mm * T + 12 * L * s * (heads * head_dim) * T
      T = batch * s tokens; N_mm = weights that take part in matmuls (attention q/k/v/o, MLP
      gate/up/down, and the output layer: vocab x hidden for the actor, hidden x 1 for the
      critic; the input embedding is a lookup and norms are elementwise, neither counted);
      the second term is QK^T and PV (2 matmuls x 2 FLOPs per MAC, x 3 for forward + backward)
      counted over the full s x s square, as Megatron/PaLM MFU do (causal kernels skip half).
    Reported: tokens/s, TFLOP/s and that as a fraction of the measured matmul rate.
(b) offload and onload of the actor's params + grads + optimizer state with the worker's
    implementation (engine/model/offload.py StorageOffloader; the bench's own pinned copy
    when that module is missing - the table says which), against a plain pinned host copy of
    the same byte count.
(c) rollout tokens/s of plain transformers.generate (configured exactly as the hf backend
    configures it) against engine/rollout/decoder (static KV cache + CUDA graph of the
    decode step; eager fallback if capture fails - the table says which path ran), batch 64,
    64-token prompts, 256 new tokens, Qwen3-0.6B shape, random init, bf16; plus how far the
    fast path's log-probs are from transformers' on the same tokens (teacher forcing).

(d) SGLang (--only sglang; needs sglang importable, see bench/gpu_device_run.sh sglang): one
    sglang.Engine as the backend starts it (engine/rollout/sglang_backend.py: triton attention,
    CUDA graphs up to the batch, memory saver), Qwen3-0.6B shape, dummy weights then the hf
    model's weights pushed; in the same run and on the same prompts as (c): rollout tok/s of
    SGLang vs the hf backend (batch 64, 64-token prompts, 256 new tokens); the engine's start
    time (SGLang's own log lines say how much of it is CUDA-graph capture); the colocated
    weight push of the 1.19 GB model through CUDA IPC handles (flattened bucket) vs host
    tensors; release/resume of its memory as NVML sees it.

(e) step (--only step, never by default: two whole runs): the per-phase breakdown of a real PPO
    step of qwen3-0.6b-ppo-1gpu with the weight-sync paths side by side, CUDA IPC (the default
    where actor and hf rollout share the GPU) and PPODECK_WEIGHT_SYNC=packed
    (bench/step_bench.py; both runs' events go to $OUT when it is set).

Every measurement is in its own try/except: one failure prints its traceback and the others
still run; a final table is printed and the exit code is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ppodeck.engine.model.shape import ModelShape  # noqa: E402

QWEN3_06B = ModelShape(num_layers=28, hidden_size=1024, ffn_hidden_size=3072,
                       num_attention_heads=16, num_query_groups=8, kv_channels=128,
                       vocab_size=151936, max_sequence_length=2048, rotary_base=1000000.0,
                       norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                       qk_layernorm=True, add_bias_linear=False)
TINY = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                  num_query_groups=2, kv_channels=16, vocab_size=256, max_sequence_length=128,
                  rotary_base=10000.0, norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                  qk_layernorm=True, add_bias_linear=False)


@dataclass(frozen=True)
class Plan:
    shape: ModelShape
    device: torch.device
    dtype: torch.dtype
    matmul_n: int
    train_batch: int
    train_seq: int
    train_steps: int
    train_warmup: int
    gen_batch: int
    gen_prompt: int
    gen_new: int

    @classmethod
    def make(cls, smoke: bool) -> Plan:
        cuda = torch.cuda.is_available() and not smoke
        if not cuda:
            return cls(TINY, torch.device("cpu"), torch.float32, 256, 2, 64, 2, 1, 4, 8, 8)
        return cls(QWEN3_06B, torch.device("cuda"), torch.bfloat16, 8192, 8, 1024, 10, 3,
                   64, 64, 256)


@dataclass
class Row:
    section: str
    what: str
    value: float | None
    unit: str
    note: str = ""


class Results:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, section: str, what: str, value: float | None, unit: str,
            note: str = "") -> None:
        row = Row(section, what, value, unit, note)
        self.rows.append(row)
        print(f"  {section:9s} {what:48s} {fmt(value):>12s} {unit:10s} {note}", flush=True)

    @contextlib.contextmanager
    def guard(self, section: str, what: str) -> Iterator[None]:
        """One measurement: a failure is printed and recorded, and the run goes on."""
        try:
            yield
        except Exception as err:  # noqa: BLE001 - the bench must report every other number
            traceback.print_exc()
            self.add(section, what, None, "FAILED", f"{type(err).__name__}: {err}"[:160])
        finally:
            release_memory()

    def table(self) -> str:
        lines = [f"{'section':9s} | {'measurement':48s} | {'value':>12s} | {'unit':10s} | note",
                 "-" * 110]
        lines += [f"{r.section:9s} | {r.what:48s} | {fmt(r.value):>12s} | {r.unit:10s} | "
                  f"{r.note}" for r in self.rows]
        return "\n".join(lines)


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device, repeat: int = 1) -> float:
    """Mean seconds of `fn` over `repeat` calls, with the device drained around them."""
    sync(device)
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeat


# --------------------------------------------------------------------------------------------
# (0) matmul
# --------------------------------------------------------------------------------------------
def matmul_tflops(plan: Plan) -> float:
    n = plan.matmul_n
    a = torch.randn(n, n, device=plan.device, dtype=plan.dtype)
    b = torch.randn(n, n, device=plan.device, dtype=plan.dtype)
    for _ in range(3):
        a @ b
    seconds = timed(lambda: a @ b, plan.device, repeat=10)
    return 2 * n**3 / seconds / 1e12


# --------------------------------------------------------------------------------------------
# (a) Megatron train steps
# --------------------------------------------------------------------------------------------
def init_megatron() -> None:
    from ppodeck.engine.host.ports import free_port
    from ppodeck.engine.train.platform import Parallelism, init_distributed

    init_distributed(0, 1, "127.0.0.1", free_port(), Parallelism(), seed=1234)


def matmul_params(shape: ModelShape, role: str) -> int:
    attn = shape.hidden_size * shape.kv_channels * 2 * (shape.num_attention_heads
                                                        + shape.num_query_groups)
    mlp = shape.hidden_size * shape.ffn_hidden_size * (3 if shape.swiglu else 2)
    head = shape.vocab_size * shape.hidden_size if role == "actor" else shape.hidden_size
    return shape.num_layers * (attn + mlp) + head


def step_flops(shape: ModelShape, role: str, batch: int, seq: int) -> float:
    tokens = batch * seq
    attention = 12 * shape.num_layers * seq * shape.num_attention_heads * shape.kv_channels
    return 6 * matmul_params(shape, role) * tokens + attention * tokens


# attention kind and fast paths (engine/train/fastpaths.py, fused.py, logprobs.py) per variant
# of Megatron's local spec; PPODECK_TE=0 keeps them local where transformer-engine imports
VARIANTS = {
    "unfused": {"PPODECK_ATTENTION": "unfused", "PPODECK_FUSED": "0", "PPODECK_TE": "0"},
    "sdpa": {"PPODECK_ATTENTION": "sdpa", "PPODECK_FUSED": "0", "PPODECK_TE": "0"},
    "sdpa+ops": {"PPODECK_ATTENTION": "sdpa", "PPODECK_FUSED": "1",
                 "PPODECK_COMPILE_LAYERS": "0", "PPODECK_TE": "0"},
    "sdpa+layers": {"PPODECK_ATTENTION": "sdpa", "PPODECK_FUSED": "1",
                    "PPODECK_COMPILE_LAYERS": "1", "PPODECK_TE": "0"},
}
DEFAULT_VARIANT = "sdpa+layers"  # what the worker builds on a CUDA machine without TE
# transformer-engine's layer spec (what the worker builds where TE imports), with the fast paths
# that still apply to it (fused log-probs, batch-first logits, foreach grad norm, fused AdamW)
TE_VARIANT = "te"
TE_VARIANT_ENV = {"PPODECK_ATTENTION": "sdpa", "PPODECK_FUSED": "1", "PPODECK_TE": "1"}
LAYER_SPECS = ("local", "te")


def te_importable() -> bool:
    from ppodeck.engine.train.platform import transformer_engine_status

    with scoped_env({"PPODECK_TE": "1"}):
        return transformer_engine_status()[0]


@contextlib.contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def train_variants(layer_specs: list[str] | None, variants: list[str] | None,
                   te_ok: bool) -> list[str]:
    """The train rows to run: the local spec's variants, then "te". Default: local, plus te
    where transformer_engine.pytorch imports (both side by side in one run)."""
    specs = layer_specs or (["local", "te"] if te_ok else ["local"])
    chosen = list(variants or VARIANTS) if "local" in specs else []
    return chosen + ([TE_VARIANT] if "te" in specs else [])


def variant_env(variant: str) -> dict[str, str]:
    return TE_VARIANT_ENV if variant == TE_VARIANT else VARIANTS[variant]


def bench_settings(plan: Plan) -> SimpleNamespace:
    """The TrainSettings fields that wrap_ddp/build_optimizer read."""
    return SimpleNamespace(lr=1e-6, min_lr=0.0, weight_decay=0.0, adam_beta1=0.9,
                           adam_beta2=0.98, adam_eps=1e-8, clip_grad=1.0,
                           bf16=plan.dtype == torch.bfloat16, use_distributed_optimizer=False,
                           grad_reduce_in_fp32=True)  # the 0.6B preset's fp32 grad buffers


def build_trainable(plan: Plan, role: str, variant: str,  # noqa: ANN201
                    batch_dim: str = "static"):
    """(ddp model, optimizer, description) built by the worker's own functions; `batch_dim`
    'static' as for fixed-size micro-batches, 'dynamic' as for token-budget ones."""
    from ppodeck.engine.train.fastpaths import describe
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.optimizer import build_optimizer, wrap_ddp
    from ppodeck.engine.train.platform import Parallelism, device_scope

    os.environ.update(variant_env(variant))
    if variant == TE_VARIANT:
        from ppodeck.engine.train.platform import transformer_engine_status

        used, why = transformer_engine_status()
        if not used:  # never measure the local spec under the te label
            raise RuntimeError(f"the TE layer spec cannot run here: {why}")
    settings = bench_settings(plan)
    with device_scope():
        config = transformer_config(plan.shape, Parallelism(), bf16=settings.bf16)
        # the bench's micro-batches have one fixed size, as under --micro-batch-size (the
        # compiled layers' batch dim static; --batch-dim dynamic: as token-budget runs)
        model = build_gpt(plan.shape, role, config, seed=7,
                          fixed_micro_batches=batch_dim == "static")
        if plan.device.type == "cuda":
            model = model.cuda()
        ddp = wrap_ddp(model, config, settings)
        optimizer = build_optimizer(ddp, settings)
    kinds = {type(layer.self_attention.core_attention).__name__
             for layer in model.decoder.layers}
    if variant == TE_VARIANT and not any(kind.startswith("TE") for kind in kinds):
        from ppodeck.engine.train.model import describe_layer_spec

        raise RuntimeError(f"built without TE attention ({kinds}): {describe_layer_spec()}")
    paths = [line.split(":")[0] for line in describe(model, optimizer)]
    return ddp, optimizer, ", ".join(sorted(kinds) + paths)


def step_loss(out: torch.Tensor, ids: torch.Tensor, role: str) -> torch.Tensor:
    """The bench's loss: the actor's mean token log-prob through the PPO actor's own path
    (every position predicts the next token), the critic's squared value."""
    from ppodeck.engine.train.logprobs import token_log_probs

    if role != "actor":
        return out.float().pow(2).mean()
    index = torch.arange(ids.numel(), device=ids.device).reshape(ids.shape)
    targets = torch.roll(ids, -1, dims=1)
    log_probs, _ = token_log_probs(out, index, targets, 1.0, with_entropy=False)
    return -log_probs.mean()


def train_step(ddp, optimizer, role: str, ids: torch.Tensor,  # noqa: ANN001
               positions: torch.Tensor) -> None:
    from ppodeck.engine.train.platform import device_scope

    with device_scope():
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        loss = step_loss(ddp(ids, positions, None), ids, role)
        optimizer.scale_loss(loss).backward()
        ddp.finish_grad_sync()
        optimizer.step()


TRAIN_BLOCKS = 3  # timed blocks of plan.train_steps steps per train row
BATCH_DIMS = ("static", "dynamic")  # the compiled layers' batch dim (--batch-dim)


def train_throughput(plan: Plan, role: str, variant: str, res: Results, peak: float,
                     batch_dim: str = "static") -> None:
    ddp, optimizer, kinds = build_trainable(plan, role, variant, batch_dim)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, plan.shape.vocab_size, (plan.train_batch, plan.train_seq),
                        generator=gen).to(plan.device)
    positions = torch.arange(plan.train_seq, device=plan.device).expand_as(ids)
    for _ in range(plan.train_warmup):
        train_step(ddp, optimizer, role, ids, positions)
    if plan.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # the median of TRAIN_BLOCKS blocks, their spread in the note: one block's mean moved
    # 0.38-0.46 between runs on the H200 (2026-12-04), so a single figure says little
    blocks = sorted(timed(lambda: train_step(ddp, optimizer, role, ids, positions),
                          plan.device, repeat=plan.train_steps) for _ in range(TRAIN_BLOCKS))
    seconds = statistics.median(blocks)
    tokens = plan.train_batch * plan.train_seq
    tflops = step_flops(plan.shape, role, plan.train_batch, plan.train_seq) / seconds / 1e12
    label = f"{role} {variant} ({plan.train_batch}x{plan.train_seq}, batch {batch_dim})"
    mem = (f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
           if plan.device.type == "cuda" else "")
    res.add("train", f"{label} tokens/s", tokens / seconds, "tok/s",
            f"{seconds * 1e3:.1f} ms/step (median of {TRAIN_BLOCKS} x {plan.train_steps} "
            f"steps, {blocks[0] * 1e3:.1f}-{blocks[-1] * 1e3:.1f}), {kinds}{mem}")
    res.add("train", f"{label} matmul-rate fraction", tflops / peak if peak else None,
            "of peak", f"{tflops:.1f} TFLOP/s (6*N_mm*T + 12*L*s*h_attn*T)")


# --------------------------------------------------------------------------------------------
# (b) offload / onload
# --------------------------------------------------------------------------------------------
def offload_bench(plan: Plan, res: Results) -> None:
    ddp, optimizer, _ = build_trainable(plan, "actor", DEFAULT_VARIANT)
    ids = torch.randint(0, plan.shape.vocab_size, (1, 32)).to(plan.device)
    train_step(ddp, optimizer, "actor", ids, torch.arange(32, device=plan.device)[None])
    try:
        from ppodeck.engine.model.offload import StorageOffloader, train_state_tensors

        keep, drop = train_state_tensors(ddp, optimizer)
        offloader = StorageOffloader.for_tensors(keep, drop, plan.device.type)
        which = "engine/model/offload.py StorageOffloader"
    except ImportError:
        offloader = PinnedCopyOffloader(ddp, optimizer)
        which = "bench PinnedCopyOffloader (no engine/model/offload.py)"
    for attempt in ("first", "second"):  # the first offload also pins the host buffers
        off = offloader.offload()
        on = offloader.onload()
        copied = int(off["bytes"])
        res.add("offload", f"actor offload, {attempt} call (params+grads+optim)",
                off.get("gbps") or copied / off["seconds"] / 1e9, "GB/s",
                f"{copied / 1e9:.2f} GB copied, {off.get('freed_bytes', copied) / 1e9:.2f} GB "
                f"freed; copy {off.get('copy_seconds', off['seconds']):.3f} s, pinning "
                f"{off.get('pin_seconds', 0.0):.3f} s; {which}")
        res.add("offload", f"actor onload, {attempt} call", on.get("gbps")
                or on["bytes"] / on["seconds"] / 1e9, "GB/s",
                f"copy {on.get('copy_seconds', on['seconds']):.3f} s, device allocation "
                f"{on.get('alloc_seconds', 0.0):.3f} s, wall {on['seconds']:.3f} s")
    train_step(ddp, optimizer, "actor", ids, torch.arange(32, device=plan.device)[None])
    del offloader
    release_memory()
    plain_copy_bench(plan, copied, res)


def plain_copy_bench(plan: Plan, nbytes: int, res: Results) -> None:
    pin = plan.device.type == "cuda"
    device_buf = torch.empty(nbytes, dtype=torch.uint8, device=plan.device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
    host.copy_(device_buf, non_blocking=pin)  # first touch of the pinned pages
    down = timed(lambda: host.copy_(device_buf, non_blocking=pin), plan.device, repeat=3)
    up = timed(lambda: device_buf.copy_(host, non_blocking=pin), plan.device, repeat=3)
    res.add("offload", "plain pinned copy device->host (same bytes)", nbytes / down / 1e9,
            "GB/s", f"{nbytes / 1e9:.2f} GB")
    res.add("offload", "plain pinned copy host->device (same bytes)", nbytes / up / 1e9, "GB/s")


class PinnedCopyOffloader:
    """Fallback: copy every train-state tensor to pinned memory and back (no freeing)."""

    def __init__(self, ddp, optimizer) -> None:  # noqa: ANN001
        tensors = {t.untyped_storage().data_ptr(): t for t in ddp.module.parameters()}
        for group in optimizer.param_groups:
            for param in group["params"]:
                tensors[param.untyped_storage().data_ptr()] = param
                state = optimizer.state[param] if param in optimizer.state else {}
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        tensors[value.untyped_storage().data_ptr()] = value
        self.tensors = list(tensors.values())
        pin = torch.cuda.is_available()
        self.host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=pin) for t in self.tensors]

    def _move(self, down: bool) -> dict:
        device = self.tensors[0].device
        sync(device)
        start = time.perf_counter()
        for t, h in zip(self.tensors, self.host, strict=True):
            (h.copy_(t, non_blocking=True) if down else t.copy_(h, non_blocking=True))
        sync(device)
        nbytes = sum(t.numel() * t.element_size() for t in self.tensors)
        return {"bytes": nbytes, "seconds": time.perf_counter() - start}

    def offload(self) -> dict:
        return self._move(True)

    def onload(self) -> dict:
        return self._move(False)


# --------------------------------------------------------------------------------------------
# (c) rollout generation
# --------------------------------------------------------------------------------------------
def rollout_bench(plan: Plan, res: Results) -> None:
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    backend = HFGenerator(plan.shape, "qwen3", device=plan.device, dtype=plan.dtype)
    model = backend.model
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(10, plan.shape.vocab_size, (plan.gen_batch, plan.gen_prompt),
                         generator=gen).tolist()
    new_tokens = plan.gen_batch * plan.gen_new
    baseline_tps = None
    with res.guard("rollout", "plain transformers.generate"):
        baseline_tps = transformers_generate(model, rows, plan, res, new_tokens)
    with res.guard("rollout", "hf backend HFGenerator.generate"):
        backend_generate(backend, rows, plan, res, new_tokens, baseline_tps)
    with res.guard("rollout", "fast_generate"):
        fast_tps = fast_path(model, rows, plan, res, new_tokens)
        if baseline_tps:
            res.add("rollout", "fast_generate speed-up over transformers",
                    fast_tps / baseline_tps, "x", "goal >= 10x")
    with res.guard("rollout", "fast vs transformers log-probs"):
        logprob_agreement(model, rows, plan, res)


def transformers_generate(model, rows, plan: Plan, res: Results,  # noqa: ANN001
                          new_tokens: int) -> float:
    """Plain sampling with transformers' defaults (dynamic cache, no extra processors)."""
    from transformers import GenerationConfig

    from ppodeck.engine.rollout.hf_backend import left_pad

    ids, mask = left_pad(rows, 0, plan.device)

    def run(max_new: int) -> None:
        config = GenerationConfig(do_sample=True, temperature=None, top_p=None, top_k=None,
                                  max_new_tokens=max_new, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, generation_config=config)

    run(4)  # warm-up
    seconds = timed(lambda: run(plan.gen_new), plan.device)
    res.add("rollout", f"transformers.generate b={plan.gen_batch} new={plan.gen_new}",
            new_tokens / seconds, "tok/s", f"{seconds:.2f} s, plain sampling")
    return new_tokens / seconds


def backend_generate(backend, rows, plan: Plan, res: Results, new_tokens: int,  # noqa: ANN001
                     baseline_tps: float | None) -> None:
    """HFGenerator.generate end to end, as the rollout manager calls it."""
    def run(max_new: int) -> None:
        backend.generate(rows, n_samples=1, temperature=1.0, top_p=1.0, top_k=-1,
                         max_new_tokens=max_new, eos_token_id=None, pad_token_id=0, seed=0)

    run(4)
    seconds = timed(lambda: run(plan.gen_new), plan.device)
    note = f"{seconds:.2f} s"
    if baseline_tps:
        note += f", {new_tokens / seconds / baseline_tps:.1f}x plain transformers"
    res.add("rollout", f"hf backend generate b={plan.gen_batch} new={plan.gen_new}",
            new_tokens / seconds, "tok/s", note)


def fast_path(model, rows, plan: Plan, res: Results,  # noqa: ANN001
              new_tokens: int) -> float:
    from ppodeck.engine.rollout.decoder import generate as fg

    def run(graph: bool) -> list[list[int]]:
        tokens, _ = fg.fast_generate(model, rows, temperature=1.0, top_p=1.0, top_k=-1,
                                     max_new_tokens=plan.gen_new, eos_token_id=None,
                                     pad_token_id=0, seed=0, use_cuda_graph=graph)
        return tokens

    path = "cuda-graph" if plan.device.type == "cuda" else "eager (no CUDA)"
    try:
        first = timed(lambda: run(True), plan.device)
    except Exception:  # noqa: BLE001 - fall back to the eager static-cache loop, and say so
        traceback.print_exc()
        path = "eager static cache (CUDA graph capture FAILED, see traceback)"
        fg._DECODERS.clear()
        first = timed(lambda: run(False), plan.device)
    graph = path == "cuda-graph"
    seconds = timed(lambda: run(graph), plan.device, repeat=2)
    res.add("rollout", f"fast_generate b={plan.gen_batch} new={plan.gen_new}",
            new_tokens / seconds, "tok/s",
            f"{seconds:.3f} s/call; first call {first:.2f} s (capture); path={path}")
    return new_tokens / seconds


def logprob_agreement(model, rows, plan: Plan, res: Results) -> None:  # noqa: ANN001
    """fast_generate's log-probs vs transformers' forward on the same tokens (8 rows)."""
    from ppodeck.engine.rollout.decoder import generate as fg
    from ppodeck.engine.rollout.hf_backend import left_pad

    rows = rows[:8]
    greedy, ours = fg.fast_generate(model, rows, temperature=0.0, top_p=1.0, top_k=-1,
                                    max_new_tokens=plan.gen_new, eos_token_id=None,
                                    pad_token_id=0, seed=0)
    full = [r + t for r, t in zip(rows, greedy, strict=True)]
    ids, mask = left_pad(full, 0, plan.device)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, plan.gen_prompt - 1:-1]
    chosen = torch.tensor(greedy, device=plan.device)
    theirs = torch.log_softmax(logits.float(), -1).gather(-1, chosen[..., None]).squeeze(-1)
    diff = (torch.tensor(ours, device=plan.device) - theirs).abs()
    res.add("rollout", "fast vs transformers log-prob |diff| (greedy)", diff.max().item(), "nats",
            f"mean {diff.mean().item():.2e} over {diff.numel()} tokens "
            f"({str(plan.dtype).removeprefix('torch.')})")


# --------------------------------------------------------------------------------------------
# (d) SGLang
# --------------------------------------------------------------------------------------------
def sglang_args(plan: Plan, run_dir: str) -> dict:
    """Resolved args of a one-GPU colocated run whose rollout is one batch of the bench."""
    from ppodeck.engine.config.resolve import resolve_values

    return {**resolve_values({}, os.environ), "bf16": True, "colocate": True,
            "offload_rollout": True, "actor_num_nodes": 1, "actor_num_gpus_per_node": 1,
            "rollout_num_gpus_per_engine": 1,
            "rollout_batch_size": plan.gen_batch, "n_samples_per_prompt": 1,
            "model_init": "random", "run_dir": run_dir,
            # leave room for the hf backend's model and static KV cache in the same process
            "sglang_mem_fraction_static": 0.4}


def sglang_bench(plan: Plan, res: Results) -> None:
    import tempfile

    from ppodeck.engine.rollout import sglang_backend as sb
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    args = sglang_args(plan, tempfile.mkdtemp(prefix="sglang-bench-"))
    model_path, _ = sb.model_dir(plan.shape, "qwen3", args)
    kwargs = {**sb.engine_kwargs(args, model_path, random_weights=True),
              "log_level": "info"}  # SGLang's own lines time the CUDA-graph capture
    engine = sb.SGLangEngineActor(kwargs)
    info = engine.ready()
    res.add("sglang", "engine start (sglang.Engine)", info["start_seconds"], "s",
            f"import {info['import_seconds']:.1f} s; CUDA graphs to batch "
            f"{info['cuda_graph_max_bs_decode']}, {info['attention_backend']} attention")
    gen = sb.SGLangGenerator(plan.shape, "qwen3", args, engines=[engine])
    try:
        hf = HFGenerator(plan.shape, "qwen3", device=plan.device, dtype=plan.dtype)
        tied = bool(hf.model.config.tie_word_embeddings)  # as convert.mcore_to_hf exports
        state = {k: v.detach() for k, v in hf.model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        with res.guard("sglang", "weight push"):
            weight_push_bench(gen, state, res)
        rows = torch.randint(10, plan.shape.vocab_size, (plan.gen_batch, plan.gen_prompt),
                             generator=torch.Generator().manual_seed(1)).tolist()
        with res.guard("sglang", "rollout tok/s"):
            sglang_vs_hf_generate(gen, hf, rows, plan, res)
        with res.guard("sglang", "release/resume"):
            for name, call in (("release (offload)", gen.offload), ("resume (onload)",
                                                                    gen.onload)):
                report = call()
                res.add("sglang", f"{name} GPU memory", report["bytes"] / 2**30, "GiB",
                        f"{report['seconds']:.3f} s, NVML ({report['tags']})")
    finally:
        gen.shutdown()


def weight_push_bench(gen, state: dict, res: Results) -> None:  # noqa: ANN001
    """The colocated push: CUDA IPC handles of one flattened bucket vs host tensors."""
    from ppodeck.engine.model.weight_transfer import pack_cuda_ipc

    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    times, flatten = [], []
    for _ in range(3):
        handles, buffer = pack_cuda_ipc(state)
        flatten.append(handles.flatten_seconds)
        start = time.perf_counter()
        gen.load_weights(handles)
        times.append(time.perf_counter() - start)
        del buffer
    res.add("sglang", f"weight push CUDA IPC {nbytes / 1e9:.2f} GB", min(times), "s",
            f"update_weights_from_tensor(flattened_bucket), best of 3 "
            f"{[round(t, 3) for t in times]}; flatten+serialize {min(flatten):.3f} s; "
            "goal <= 0.1 s")
    host = {k: v.to("cpu") for k, v in state.items()}
    start = time.perf_counter()
    gen.load_weights(host)
    res.add("sglang", f"weight push host tensors {nbytes / 1e9:.2f} GB",
            time.perf_counter() - start, "s", "CPU tensors through SGLang's serializer")


def sglang_vs_hf_generate(gen, hf, rows, plan: Plan, res: Results) -> None:  # noqa: ANN001
    """Both backends as the rollout manager calls them, same prompts, sampling at T=1."""
    def run(backend, max_new: int) -> int:  # noqa: ANN001
        outs = backend.generate(rows, n_samples=1, temperature=1.0, top_p=1.0, top_k=-1,
                                max_new_tokens=max_new, eos_token_id=None, pad_token_id=0,
                                seed=0)
        return sum(len(o.response_ids) for o in outs)

    rates = {}
    for name, backend in (("sglang", gen), ("hf", hf)):
        run(backend, 8)  # warm-up (hf: CUDA-graph capture)
        best = 0.0
        for _ in range(3):
            start = time.perf_counter()
            tokens = run(backend, plan.gen_new)
            seconds = time.perf_counter() - start
            best = max(best, tokens / seconds)
        rates[name] = best
        res.add("sglang", f"{name} backend generate b={plan.gen_batch} new={plan.gen_new}", best,
                "tok/s", f"best of 3, {tokens} tokens, prefill included")
    res.add("sglang", "sglang / hf rollout tok/s", rates["sglang"] / rates["hf"], "x",
            "same prompts, same run")


# --------------------------------------------------------------------------------------------
def step_section(plan: Plan, res: Results) -> None:
    """(e) a real PPO step per phase, the weight-sync paths and decoder variants side by side
    (bench/step_bench.py: qwen3-0.6b-ppo-1gpu with the default path and decoder, then with
    PPODECK_WEIGHT_SYNC=packed, then with each train-state move waited on where it starts
    (PPODECK_OVERLAP_MOVES=0), then with PPODECK_DECODE=ref)."""
    from step_bench import step_breakdown

    cuda = plan.device.type == "cuda"
    preset = "qwen3-0.6b-ppo-1gpu" if cuda else "tiny-cpu"
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    columns = step_breakdown(preset, num_rollout=5, timeout_s=300.0, out_dir=out,
                             decoders=("ref",) if cuda else (), overlap=cuda)
    for name, column in columns.items():
        for key in ("update_weights", "generate", "critic_train", "actor_train",
                    "wall per rollout", "sync seconds"):
            value = column.get(key)
            res.add("step", f"{key} ({name})", value if isinstance(value, float) else None,
                    "s", f"path {column.get('sync path')}")


def environment(res: Results, plan: Plan) -> None:
    import importlib.metadata as md

    versions = []
    for pkg in ("torch", "megatron-core", "transformers", "transformer-engine-torch"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions.append(f"{pkg} {md.version(pkg)}")
    name = torch.cuda.get_device_name() if plan.device.type == "cuda" else "CPU (smoke)"
    print(f"device: {name}; {', '.join(versions)}; python {sys.version.split()[0]}")
    print(f"shape: {plan.shape}")
    print(f"actor params {plan.shape.num_params() / 1e6:.1f}M; matmul params actor "
          f"{matmul_params(plan.shape, 'actor') / 1e6:.1f}M, critic "
          f"{matmul_params(plan.shape, 'critic') / 1e6:.1f}M\n", flush=True)


def train_rows(plan: Plan, variants: list[str], batch_dim: str, res: Results,
               peak: float) -> None:
    """Each variant's actor and critic rows, then the default's (and te's) at twice the
    tokens per micro-batch."""
    for role in ("actor", "critic"):
        for variant in variants:
            with res.guard("train", f"{role} {variant}"):
                train_throughput(plan, role, variant, res, peak, batch_dim)
    big = Plan(**{**plan.__dict__, "train_batch": plan.train_batch * 2})
    doubled = ([DEFAULT_VARIANT] if set(variants) & set(VARIANTS) else []) + \
        ([TE_VARIANT] if TE_VARIANT in variants else [])
    for role in ("actor", "critic"):  # twice the tokens per micro-batch
        for variant in doubled:
            with res.guard("train", f"{role} {variant} x2 tokens"):
                train_throughput(big, role, variant, res, peak, batch_dim)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on CPU (checks the code paths in seconds)")
    parser.add_argument("--only", choices=("train", "offload", "rollout", "sglang", "step"),
                        action="append",
                        help="run only these sections (repeatable)")
    parser.add_argument("--variant", choices=tuple(VARIANTS), action="append",
                        help="local-spec train variants to run (repeatable; default: all)")
    parser.add_argument("--layer-spec", choices=LAYER_SPECS, action="append",
                        help="train with megatron's local spec (the --variant rows) and/or "
                             "transformer-engine's (the te row); repeatable; default: local, "
                             "plus te where transformer_engine.pytorch imports")
    parser.add_argument("--batch-dim", choices=BATCH_DIMS, action="append",
                        help="the compiled layers' batch dim: static (fixed-size micro-batches, "
                             "the default) or dynamic (token-budget ones); repeatable, each a "
                             "pass over the train rows after a dynamo reset, e.g. dynamic static "
                             "dynamic static for an A/B/A/B in one run")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    plan = Plan.make(ns.smoke)
    sections = set(ns.only or ("train", "offload", "rollout", "sglang"))  # step: asked for only
    res = Results()
    environment(res, plan)
    peak = 0.0
    with res.guard("matmul", f"{plan.matmul_n}^3 {plan.dtype}"):
        peak = matmul_tflops(plan)
        res.add("matmul", f"{plan.matmul_n}^3 {str(plan.dtype).removeprefix('torch.')}",
                peak, "TFLOP/s", "the ceiling for the fractions below")
    megatron_ok = False
    if sections & {"train", "offload"}:
        with res.guard("train", "megatron init"):
            init_megatron()
            megatron_ok = True
    if megatron_ok and "train" in sections:
        variants = train_variants(ns.layer_spec, ns.variant, te_importable())
        batch_dims = ns.batch_dim or ["static"]
        for batch_dim in batch_dims:
            if len(batch_dims) > 1:  # a graph of the other pass would serve this one's calls
                torch._dynamo.reset()
            train_rows(plan, variants, batch_dim, res, peak)
    if megatron_ok and "offload" in sections:
        with res.guard("offload", "offload/onload"):
            offload_bench(plan, res)
    if "rollout" in sections:
        with res.guard("rollout", "rollout"):
            rollout_bench(plan, res)
    if "sglang" in sections and plan.device.type == "cuda":
        with res.guard("sglang", "sglang"):
            sglang_bench(plan, res)
    if "step" in sections:  # only when asked: two whole `ppodeck run`s (bench/step_bench.py)
        with res.guard("step", "PPO step breakdown"):
            step_section(plan, res)
    print("\n" + res.table(), flush=True)
    with contextlib.suppress(Exception):
        from ppodeck.engine.train.platform import shutdown_distributed

        shutdown_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
