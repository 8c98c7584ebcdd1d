#!/usr/bin/env python3
"""Where a decode step's time goes in the hf backend's fast decoder, each variant side by side.

    PYTHONPATH=/tmp/site:$PWD timeout 170 python3 bench/gpu_decode_profile.py   # on the H200
    .venv/bin/python bench/gpu_decode_profile.py --smoke                        # tiny, on CPU

Issue 20: 10.7k tokens/s at batch 64 is about 6 ms per decode step, against 0.25 ms to read the
weights. For the Qwen3-0.6B shape (bench/gpu_bench.py's plan: random init, bf16), batch 64,
prompts of 128 tokens (a quarter of them 8-24 shorter: left padding), 256 new tokens, it first
times one layer's attention alone (mid-generation and at the last step): the batched matmuls
and decode-attn's Triton kernel at a few launch shapes, each with the GB/s of the K/V it must
read and its max |diff| from the fp32-softmax maths (--no-attention skips it).
Then for each decoder variant (engine/rollout/decoder/features.py; PPODECK_DECODE's names)
it prints:
  - tokens/s and wall ms per decode step (sampling at T=1 as the rollout does; the prefill,
    timed alone, is taken out of the per-step figure), and the first call (graph capture);
  - the step split in the real loop with CUDA events: sampling part vs decode (graph replay)
    part; then the graph replayed alone back to back and the sampling alone back to back:
    what the wall step has beyond those two is host overhead (the GPU waiting for the host);
  - torch.profiler over 20 decode steps: GPU kernel time and kernels per step, grouped by kind
    (from kernel names: which GEMMs are attention's is read from the eager op table after it);
  - agreement with `ref` (today's path): greedy tokens equal (share of tokens, of rows),
    log-prob max |diff| on each row's common prefix, sampled tokens equal for the same seed;
    and each variant's log-probs against transformers' forward on its own greedy tokens (the
    trainer's side: today's agreement is ref's row).
A summary table comes last. Every variant runs in its own try/except; --budget seconds bounds
the run (later variants' kernel tables, then the variants themselves, are skipped and said so).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gpu_bench as gb  # noqa: E402
import torch  # noqa: E402

from ppodeck.engine.rollout.decoder import features, static_decoder  # noqa: E402
from ppodeck.engine.rollout.decoder import generate as fg  # noqa: E402
from ppodeck.engine.rollout.decoder import sampling as samplers  # noqa: E402
from ppodeck.engine.rollout.decoder.kernels import decode_attention  # noqa: E402
from ppodeck.engine.rollout.decoder.state import DecodeState, Sampling  # noqa: E402

# today's path first, the backend's default next with its candidates beside it (the default
# without skinny-down and cdf-sampling, with each of them alone, without folded-norms too:
# then the `compiled` layers run), then other decode-attention variants compiled and not (so
# these fit whatever the budget: the compile, ~20-60 s on a cold inductor cache, is in a
# variant's first call), then each feature alone and in steps
BACKEND_DEFAULT = features.BACKEND_VARIANT
FOLDED = BACKEND_DEFAULT.replace("+skinny-down", "").replace("+cdf-sampling", "")
UNFOLDED = FOLDED.replace("+folded-norms", "+compiled")
DEFAULT_VARIANTS = ("ref", BACKEND_DEFAULT, FOLDED, FOLDED + "+skinny-down",
                    FOLDED + "+cdf-sampling", UNFOLDED,
                    "packed+decode-attn+graph-sampling+compiled",
                    "packed+decode-attn+graph-sampling", "packed+graph-sampling+compiled",
                    "packed+graph-sampling", "graph-sampling", "fused", "packed")
PROFILED_STEPS = 20
START = time.perf_counter()


@dataclass(frozen=True)
class Setup:
    shape: Any
    device: torch.device
    dtype: torch.dtype
    batch: int
    prompt: int
    new: int

    @classmethod
    def make(cls, smoke: bool) -> Setup:
        plan = gb.Plan.make(smoke)
        if plan.device.type == "cuda":
            return cls(plan.shape, plan.device, plan.dtype, 64, 128, 256)
        return cls(plan.shape, plan.device, plan.dtype, 4, 12, 28)

    def rows(self) -> list[list[int]]:
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(10, self.shape.vocab_size, (self.batch, self.prompt), generator=gen)
        shorter = [(i % 4) * max(1, self.prompt // 16) for i in range(self.batch)]
        return [row[cut:] for row, cut in zip(ids.tolist(), shorter, strict=True)]


@dataclass
class Figures:
    variant: str
    values: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, what: str, value: float | None, unit: str, note: str = "") -> None:
        self.values[what] = value
        shown = "-" if value is None else gb.fmt(value)
        print(f"  {what:44s} {shown:>12s} {unit:8s} {note}", flush=True)


def elapsed() -> float:
    return time.perf_counter() - START


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# timing helpers
# --------------------------------------------------------------------------------------------
class Clock:
    """Timestamps on the device timeline (CUDA events) or the host's (CPU)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def now(self) -> Any:  # noqa: ANN401
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, start: Any, end: Any) -> float:  # noqa: ANN401
        if self.cuda:
            end.synchronize()  # elapsed_time needs both events done (it raised on the H200)
            return start.elapsed_time(end)
        return (end - start) * 1e3


class MarkHook:
    """fast_generate's StepHook: a timestamp at each phase boundary, optionally a profiler
    started and stopped at given decode steps."""

    def __init__(self, clock: Clock, profile_from: int | None = None) -> None:
        self.clock = clock
        self.marks: list[tuple[str, int, Any]] = []
        self.profile_from = profile_from
        self.profiler: Any = None
        self._stopped = False

    def mark(self, label: str, step: int) -> None:
        if self.profile_from is not None and label == "decode":
            if step == self.profile_from:
                sync(self.clock.device)  # the window holds these steps' kernels only
                self.profiler = kernel_profiler(self.clock.device)
                self.profiler.start()
            elif step == self.profile_from + PROFILED_STEPS and self.profiler is not None:
                sync(self.clock.device)
                self.profiler.stop()
                self._stopped = True
        self.marks.append((label, step, self.clock.now()))

    def stop_profiler(self) -> None:
        """Stop it if the loop ended before its last step (early stop, an error)."""
        if self.profiler is not None and not self._stopped:
            self.profiler.stop()
        self._stopped = True

    def phases(self) -> dict[str, float]:
        """Median ms of each phase: from a mark to the next one, named by the first."""
        sync(self.clock.device)
        spans: dict[str, list[float]] = defaultdict(list)
        for (label, _, start), (_, _, end) in zip(self.marks, self.marks[1:], strict=False):
            spans[label].append(self.clock.ms(start, end))
        return {label: statistics.median(ms) for label, ms in spans.items()}


def kernel_profiler(device: torch.device) -> Any:  # noqa: ANN401
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities)


# --------------------------------------------------------------------------------------------
# kernel tables
# --------------------------------------------------------------------------------------------
KINDS = (
    ("attn-kernel", ("decode_attention",)),  # decode-attn's Triton kernel
    ("compiled", ("triton_",)),  # inductor's fused kernels (`compiled`): norms, RoPE, residuals
    ("sampling", ("exponential", "multinomial", "distribution", "sort", "topk", "cumsum",
                  "argmax", "logsoftmax", "cunn_softmax", "philox", "radix")),
    ("attn-softmax", ("softmax",)),
    ("attn-matmul?", ("gemv", "gemmsn", "batched")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90", "sm100")),
    ("norm/reduce", ("norm", "reduce", "mean", "sum")),
    ("copy", ("copy", "memcpy", "memset", "cat", "index", "fill", "scatter", "gather", "roll",
              "flip")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise")),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    for kind, keys in KINDS:
        if any(k in lowered for k in keys):
            return kind
    return "other"


def device_events(prof: Any, cuda: bool) -> list[tuple[str, float]]:  # noqa: ANN401
    """(name, ms) of each GPU kernel (CUDA), or each top-level op's CPU time (smoke)."""
    out = []
    for evt in prof.events():
        if cuda and evt.device_type == torch.autograd.DeviceType.CUDA:
            out.append((evt.name, evt.device_time_total / 1e3))
        elif not cuda and evt.device_type == torch.autograd.DeviceType.CPU \
                and evt.cpu_parent is None:
            out.append((evt.name, evt.cpu_time_total / 1e3))
    return out


def kernel_table(prof: Any, steps: int, cuda: bool, fig: Figures) -> None:  # noqa: ANN401
    events = device_events(prof, cuda)
    what = "GPU kernels" if cuda else "CPU ops (smoke: no GPU)"
    if not events:
        print(f"  no {what} recorded (the profiler saw none inside the graph replays)")
        return
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, ms in events:
        per_name[name][0] += ms / steps
        per_name[name][1] += 1 / steps
    total = sum(ms for ms, _ in per_name.values())
    count = sum(c for _, c in per_name.values())
    fig.add("profiled busy ms/step", total, "ms", f"{what}, {steps} steps")
    fig.add("kernels/step", count, "")
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, (ms, calls) in per_name.items():
        kinds[kernel_kind(name)][0] += ms
        kinds[kernel_kind(name)][1] += calls
    for kind, (ms, calls) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"    {kind:14s} {ms:8.3f} ms/step {ms / total:6.1%} {calls:7.0f} kernels/step")
    print("    top kernels (ms/step, calls/step):")
    for name, (ms, calls) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"    {ms:8.3f} {calls:6.0f}  {kernel_kind(name):13s} {name[:100]}")


def eager_op_table(decoder: static_decoder.StaticDecoder, state: DecodeState, slot: int,
                   sampling: Sampling | None, device: torch.device) -> None:
    """The decode step run eagerly under the profiler: device time by aten op (which GEMMs
    are attention's bmm and which the weights' mm/addmm)."""
    steps = 3
    with kernel_profiler(device) as prof:
        for _ in range(steps):
            reset_step(state, slot)
            decoder.decode_step(state, sampling)
        sync(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    rows = []
    for avg in prof.key_averages():
        ms = getattr(avg, key, 0.0) / 1e3 / steps
        if ms > 0:
            rows.append((ms, avg.count / steps, avg.key))
    print(f"    eager decode step by op ({key}, ms/step, calls/step):")
    for ms, calls, name in sorted(rows, reverse=True)[:14]:
        print(f"    {ms:8.3f} {calls:6.0f}  {name[:80]}")


def reset_step(state: DecodeState, slot: int) -> None:
    """A valid mid-generation step: cache slot `slot`, output column 1 (the graph-sampling
    graph moves both forward; replayed alone they must stay in range)."""
    state.index.fill_(slot)
    state.step.fill_(1)


# --------------------------------------------------------------------------------------------
# attention alone: one layer's decode attention at the run's shape, each implementation
# --------------------------------------------------------------------------------------------
# decode-attn launches tried: (block, warps, stages); the decoder's is (64, 4, 2). Of twelve
# on the H200 (2026-12-04, slots 256 / 383) these four were within 5% of each other (20.4-21.6
# / 27.4-27.9 us), with no launch first at both; every other one was slower
ATTENTION_LAUNCHES = ((64, 4, 2), (32, 4, 3), (16, 2, 3), (64, 2, 2))
# layers' caches attention_cost cycles through (8 x ~100 MB at the 0.6B decode shape: past the
# H200's 50 MB of L2, as the decoder's 28 layers are)
ATTENTION_CACHES = 8


@dataclass
class AttentionCase:
    """One layer's q and cache at the step writing slot `index` (rows left-padded as the
    profile's prompts are)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    pad: torch.Tensor
    index: torch.Tensor

    @classmethod
    def make(cls, setup: Setup, rows: list[list[int]], slot: int) -> AttentionCase:
        shape, device, dtype = setup.shape, setup.device, setup.dtype
        heads, kv, d = shape.num_attention_heads, shape.num_query_groups, shape.kv_channels
        length = -(-(setup.prompt + setup.new) // fg.CACHE_ROUND) * fg.CACHE_ROUND
        gen = torch.Generator(device=device).manual_seed(0)

        def randn(*size: int) -> torch.Tensor:
            return torch.randn(size, generator=gen, device=device).to(dtype)

        q = randn(setup.batch, heads + kv, d)[:, :heads]  # the packed projection's slice
        pad = fg.left_padded(rows, 0, device)[1]
        return cls(q, randn(setup.batch, kv, length, d), randn(setup.batch, kv, length, d), pad,
                   torch.tensor(slot, device=device))

    def kernel_args(self) -> dict[str, Any]:
        return dict(q=self.q, cache_k=self.k, cache_v=self.v, pad=self.pad, index=self.index,
                    scale=self.q.shape[-1] ** -0.5)

    def new_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's k/v [B, KV, d], which the kernel writes into slot `index` (the values
        already there: the case's cache is unchanged)."""
        index = int(self.index)
        return self.k[:, :, index].clone(), self.v[:, :, index].clone()

    def useful_bytes(self) -> int:
        """K and V bytes of the rows' filled slots: what attention must read at least."""
        filled = int((self.index + 1 - self.pad).sum())
        return 2 * filled * self.k.shape[1] * self.k.shape[-1] * self.k.element_size()

    def matmul(self) -> torch.Tensor:
        """The fused path without decode-attn: matmul, fp32 scale+bias, softmax, cast, matmul."""
        b, heads, d = self.q.shape
        kv = self.k.shape[1]
        qg = self.q.reshape(b, kv, heads // kv, d)
        keys, values = self.k, self.v
        slots = torch.arange(self.k.shape[2], device=self.q.device)
        masked = (slots[None, :] < self.pad[:, None]) | (slots[None, :] > self.index)
        bias = torch.zeros(masked.shape, device=self.q.device).masked_fill(
            masked, torch.finfo(torch.float32).min)[:, None, None, :]
        scores = torch.matmul(qg, keys.transpose(-1, -2))
        probs = torch.softmax(torch.add(bias, scores, alpha=d ** -0.5), dim=-1)
        return torch.matmul(probs.to(self.q.dtype), values)


def per_call_us(fn: Any, device: torch.device, calls: int = 20) -> float:  # noqa: ANN401
    """Device microseconds per call: `calls` calls captured in one CUDA graph, replayed (no
    launch gaps, as in the decoder's graphs); on CPU the wall time of eager calls."""
    for _ in range(2):  # compile, autotune, allocator
        fn()
    sync(device)
    if device.type != "cuda":
        return gb.timed(fn, device, calls) * 1e6
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    clock = Clock(device)
    times = []
    for _ in range(5):
        start = clock.now()
        graph.replay()
        times.append(clock.ms(start, clock.now()))
    return statistics.median(times) * 1e3 / calls


def attention_alone(setup: Setup, rows: list[list[int]]) -> None:
    """Each attention implementation on one layer, mid-generation and at the last step: us
    per call, the GB/s of the K/V it must read (the filled slots), x layers as ms per step,
    and max |diff| against decode_attention.attend_by_matmul (fp32 softmax). Then the
    decoder's launch at the first, middle and last step over caches cycled as the decoder
    reads them (attention_cost)."""
    layers = setup.shape.num_layers
    usable, why = decode_attention.kernel_status(setup.device)
    if usable:
        attention_cost(setup, rows)
    else:
        print(f"\n=== decode-attn's per-call cost: not run here ({why}) ===")
    for slot in (setup.prompt + setup.new // 2, setup.prompt + setup.new - 1):
        case = AttentionCase.make(setup, rows, slot)
        expected = decode_attention.attend_by_matmul(**case.kernel_args()).float()
        print(f"\n=== attention alone: one layer, step writing slot {slot}, "
              f"{case.useful_bytes() / 1e6:.1f} MB of filled K/V ===")
        candidates: list[tuple[str, Any]] = [("matmul (fused)", case.matmul)]
        if usable:
            candidates += [(f"decode-attn block {block} warps {warps} stages {stages}",
                            lambda block=block, warps=warps, stages=stages, case=case:
                            decode_attention.attend(**case.kernel_args(), block=block,
                                                       num_warps=warps, num_stages=stages))
                           for block, warps, stages in ATTENTION_LAUNCHES]
            candidates.append((
                "decode-attn writing the step's k/v (new_kv)",
                lambda case=case, new=case.new_kv(): decode_attention.attend(
                    **case.kernel_args(), new_kv=new)))
        else:
            print(f"  decode-attn kernel not run here: {why}")
        for name, fn in candidates:
            try:
                us = per_call_us(fn, setup.device)
                diff = (fn().float().reshape(expected.shape) - expected).abs().max().item()
            except Exception as err:  # noqa: BLE001 - the other implementations still count
                print(f"  {name:50s} FAILED: {type(err).__name__}: {str(err)[:160]}")
                continue
            print(f"  {name:50s} {us:9.2f} us  {case.useful_bytes() / us / 1e3:8.1f} GB/s  "
                  f"x{layers} = {us * layers / 1e3:.3f} ms/step  max|diff| {diff:.2e}")


def attention_cost(setup: Setup, rows: list[list[int]]) -> None:
    """decode-attn's launch (with new_kv, as the decoder runs it) at the first, middle and last
    decode step, each call on another of ATTENTION_CACHES layers' caches (one cache replayed
    would sit partly in L2; the decoder's 28 do not): us per call, then a least-squares line
    through them, us = fixed + bytes / rate: the per-call cost that does not shrink with the
    cache (launch, prologue, the last wave) against the streaming rate."""
    slots = (setup.prompt, setup.prompt + setup.new // 2, setup.prompt + setup.new - 1)
    points = []
    print(f"\n=== decode-attn's per-call cost: {ATTENTION_CACHES} caches cycled ===")
    for slot in slots:
        cases = [AttentionCase.make(setup, rows, slot) for _ in range(ATTENTION_CACHES)]
        launches = [(case.kernel_args(), case.new_kv()) for case in cases]  # no copy timed
        us = per_call_us(cycling(lambda args, new: decode_attention.attend(
            **args, new_kv=new), launches), setup.device)
        megabytes = cases[0].useful_bytes() / 1e6
        points.append((megabytes, us))
        print(f"  slot {slot:4d}: {megabytes:7.1f} MB of K/V  {us:8.2f} us  "
              f"{megabytes / us:7.2f} TB/s")
        del cases
        gb.release_memory()
    slope, fixed = _line(points)
    rate = 1 / slope if slope > 0 else float("inf")
    print(f"  fit: {fixed:.2f} us per call + the K/V at {rate:.2f} TB/s "
          f"(x{setup.shape.num_layers} layers: {fixed * setup.shape.num_layers / 1e3:.3f} ms "
          f"per step fixed)")


def cycling(fn: Any, inputs: list[tuple[Any, ...]]) -> Any:  # noqa: ANN401
    """A call of fn on the next of `inputs` each time (each captured call keeps its own)."""
    turn = [0]

    def call() -> Any:  # noqa: ANN401
        turn[0] += 1
        return fn(*inputs[turn[0] % len(inputs)])
    return call


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through (x, y) points."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return slope, mean_y - slope * mean_x


# --------------------------------------------------------------------------------------------
# one variant
# --------------------------------------------------------------------------------------------
@dataclass
class Reference:
    greedy: tuple[list[list[int]], list[list[float]]]
    sampled: list[list[int]]


def generate(model: Any, rows: list[list[int]], setup: Setup, options: features.DecodeOptions,  # noqa: ANN401
             temperature: float = 1.0, new: int | None = None,
             hook: Any = None) -> tuple[list[list[int]], list[list[float]]]:  # noqa: ANN401
    return fg.fast_generate(model, rows, temperature=temperature, top_p=1.0, top_k=-1,
                            max_new_tokens=new or setup.new, eos_token_id=None, pad_token_id=0,
                            seed=0, options=options, hook=hook)


def speed(model: Any, rows: list[list[int]], setup: Setup, options: features.DecodeOptions,  # noqa: ANN401
          fig: Figures) -> float:
    """tokens/s end to end and ms per decode step (prefill taken out); returns the step ms."""
    first = gb.timed(lambda: generate(model, rows, setup, options), setup.device)
    prefill = gb.timed(lambda: generate(model, rows, setup, options, new=1), setup.device, 2)
    wall = gb.timed(lambda: generate(model, rows, setup, options), setup.device, 2)
    step_ms = (wall - prefill) / (setup.new - 1) * 1e3
    fig.add("tokens/s", setup.batch * setup.new / wall, "tok/s",
            f"{wall:.3f} s per call of {setup.batch}x{setup.new}")
    fig.add("wall ms/decode step", step_ms, "ms", f"prefill+first sample {prefill * 1e3:.1f} ms")
    fig.add("first call (capture)", first, "s",
            "incl. torch.compile's build" if options.compiled else "")
    return step_ms


def loop_split(model: Any, rows: list[list[int]], setup: Setup, options: features.DecodeOptions,  # noqa: ANN401
               fig: Figures, profile_from: int | None) -> Any:  # noqa: ANN401
    """Phases of the real loop (events); the profiler over PROFILED_STEPS steps if asked."""
    hook = MarkHook(Clock(setup.device), profile_from)
    try:
        generate(model, rows, setup, options, hook=hook)
    finally:
        hook.stop_profiler()
    phases = hook.phases()
    if "sample" in phases and not options.graph_sampling:
        fig.add("in loop: sampling part", phases["sample"], "ms", "events, median step")
    fig.add("in loop: decode part", phases.get("decode"), "ms",
            "graph replay" + (" incl. sampling" if options.graph_sampling else ""))
    return hook.profiler


def alone(decoder: static_decoder.StaticDecoder, setup: Setup,
          options: features.DecodeOptions, fig: Figures,
          rows: list[list[int]]) -> tuple[float, float]:
    """(decode ms, sampling ms) each back to back: the graphs (or eager steps), the sampler."""
    clock, repeat = Clock(setup.device), 20
    state = decoder._graph_state or fg._state_for(
        decoder, len(rows), -(-(setup.prompt + setup.new) // fg.CACHE_ROUND) * fg.CACHE_ROUND,
        fg.left_padded(rows, 0, setup.device)[1])
    sampling = Sampling(1.0, 1.0, -1)
    in_graph = sampling if options.graph_sampling else None
    graph = decoder._graphs.get(in_graph)
    last = state.key_index.shape[0] - 1  # the cache's last slot: every step reads at most this
    times = []
    for _ in range(repeat):
        reset_step(state, last)
        start = clock.now()
        if graph is not None:
            graph.replay()
        else:
            decoder.decode_step(state, in_graph)
        times.append(clock.ms(start, clock.now()))
    decode_ms = statistics.median(times)
    fig.add("decode alone (replay)", decode_ms, "ms", f"at cache slot {last}")
    sample_ms = sampler_alone(state, sampling, options, clock, repeat,
                              decoder.sampling_kernel, decoder.cdf_kernel)
    fig.add("sampling alone", sample_ms, "ms",
            "cdf-sampling's kernels, eager" if decoder.cdf_kernel else
            "fused-sampling's kernels, eager" if decoder.sampling_kernel else
            "sync-free sampler, eager" if options.graph_sampling else "torch.multinomial path")
    return decode_ms, sample_ms


def sampler_alone(state: DecodeState, sampling: Sampling, options: features.DecodeOptions,
                  clock: Clock, repeat: int, kernel: bool, cdf: bool = False) -> float:
    generator = torch.Generator(device=state.logits.device).manual_seed(0)
    logits = torch.randn(state.logits.shape, generator=None, device=state.logits.device)
    logits = logits.to(state.logits.dtype) * 4
    times = []
    for _ in range(repeat):
        start = clock.now()
        if kernel:
            samplers.sample_fused(logits, sampling, generator, cdf)
        elif options.graph_sampling:
            samplers.sample_sync_free(logits, sampling, generator)
        else:
            samplers.sample(logits, 1.0, 1.0, -1, generator)
        times.append(clock.ms(start, clock.now()))
    return statistics.median(times)


def agreement(ref: Reference, greedy: tuple[list[list[int]], list[list[float]]],
              sampled: list[list[int]], fig: Figures) -> None:
    ref_tokens, ref_lps = ref.greedy
    tokens, lps = greedy
    equal = sum(a == b for ra, rb in zip(ref_tokens, tokens, strict=True)
                for a, b in zip(ra, rb, strict=True))
    total = sum(len(r) for r in ref_tokens)
    rows_equal = sum(ra == rb for ra, rb in zip(ref_tokens, tokens, strict=True))
    fig.add("greedy tokens = ref", equal / total, "share",
            f"{rows_equal}/{len(tokens)} rows identical")
    diffs = [abs(x - y) for ra, rb, la, lb in zip(ref_tokens, tokens, ref_lps, lps, strict=True)
             for x, y in zip(la[:common_prefix(ra, rb)], lb[:common_prefix(ra, rb)],
                             strict=True)]
    fig.add("greedy log-prob max|diff| vs ref", max(diffs) if diffs else None, "nats",
            f"on the common prefix ({len(diffs)} tokens)")
    same = sum(a == b for ra, rb in zip(ref.sampled, sampled, strict=True)
               for a, b in zip(ra, rb, strict=True))
    fig.add("sampled tokens = ref (same seed)", same / total, "share")


def common_prefix(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return i
    return len(a)


def versus_transformers(model: Any, rows: list[list[int]],  # noqa: ANN401
                        greedy: tuple[list[list[int]], list[list[float]]], setup: Setup,
                        fig: Figures) -> None:
    """The variant's greedy log-probs against transformers' forward on the same tokens, in the
    model's dtype and in fp32 (a float copy of the same weights: how far each is from the
    maths, beside how far transformers' own bf16 forward is)."""
    count = min(8, len(rows))
    tokens, lps = greedy[0][:count], greedy[1][:count]
    ours = torch.tensor(lps, device=setup.device)
    theirs = _teacher_forced(model, rows[:count], tokens, setup)
    diff = (ours - theirs).abs()
    fig.add("log-prob max|diff| vs transformers", diff.max().item(), "nats",
            f"mean {diff.mean().item():.2e}, {count} rows teacher-forced "
            f"({str(setup.dtype).removeprefix('torch.')})")
    exact = _teacher_forced(_fp32_copy(model), rows[:count], tokens, setup)
    for label, lp in (("ours", ours), ("transformers'", theirs)):
        diff = (lp - exact).abs()
        fig.add(f"log-prob max|diff| vs fp32 ({label})", diff.max().item(), "nats",
                f"mean {diff.mean().item():.2e}, the same tokens in fp32")


def _teacher_forced(model: Any, rows: list[list[int]], tokens: list[list[int]],  # noqa: ANN401
                    setup: Setup) -> torch.Tensor:
    """[rows, new] fp32 log-probs of `tokens` after each prompt, by the model's forward."""
    from ppodeck.engine.rollout.hf_backend import left_pad

    full = [r + t for r, t in zip(rows, tokens, strict=True)]
    ids, mask = left_pad(full, 0, setup.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    logits = logits[:, -setup.new - 1:-1].float()
    chosen = torch.tensor(tokens, device=setup.device)
    return torch.log_softmax(logits, -1).gather(-1, chosen[..., None]).squeeze(-1)


_FP32: dict[int, Any] = {}


def _fp32_copy(model: Any) -> Any:  # noqa: ANN401
    """One fp32 copy of `model` per run (built at first use, kept for the other variants)."""
    if id(model) not in _FP32:
        _FP32[id(model)] = copy.deepcopy(model).float()
    return _FP32[id(model)]


def run_variant(name: str, model: Any, rows: list[list[int]], setup: Setup,  # noqa: ANN401
                ref: Reference, budget: float) -> Figures:
    options = features.parse_variant(name)
    fig = Figures(options.name)
    print(f"\n=== {options.name} ({options}) at {elapsed():.0f} s ===", flush=True)
    step_ms = speed(model, rows, setup, options, fig)
    profile = elapsed() < budget * 0.7
    profile_from = None
    if profile and setup.new > PROFILED_STEPS + 4:  # PROFILED_STEPS decode steps, mid-run
        profile_from = min(setup.new // 2, setup.new - PROFILED_STEPS - 3)
    profiler = loop_split(model, rows, setup, options, fig, profile_from)
    decoder = fg.decoder_for(model, options)
    decode_ms, sample_ms = alone(decoder, setup, options, fig, rows)
    extra = 0.0 if options.graph_sampling else sample_ms
    fig.add("host overhead (wall - alone)", step_ms - decode_ms - extra, "ms",
            "GPU idle, waiting for the host")
    greedy = generate(model, rows, setup, options, temperature=0.0)
    sampled = generate(model, rows, setup, options)[0]
    agreement(ref, greedy, sampled, fig)
    versus_transformers(model, rows, greedy, setup, fig)
    if profiler is None:
        print("  kernel tables skipped (time budget)" if not profile else "")
    else:
        kernel_table(profiler, PROFILED_STEPS, setup.device.type == "cuda", fig)
        state = decoder._graph_state or fg._state_for(
            decoder, len(rows), -(-(setup.prompt + setup.new) // fg.CACHE_ROUND) * fg.CACHE_ROUND,
            fg.left_padded(rows, 0, setup.device)[1])
        eager_op_table(decoder, state, setup.prompt + setup.new // 2,
                       Sampling(1.0, 1.0, -1) if options.graph_sampling else None,
                       setup.device)
    return fig


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------
def summary(figures: list[Figures]) -> None:
    columns = ("tokens/s", "wall ms/decode step", "decode alone (replay)", "sampling alone",
               "host overhead (wall - alone)", "kernels/step", "greedy tokens = ref",
               "greedy log-prob max|diff| vs ref", "sampled tokens = ref (same seed)",
               "log-prob max|diff| vs transformers", "log-prob max|diff| vs fp32 (ours)",
               "log-prob max|diff| vs fp32 (transformers')", "first call (capture)")
    print("\n=== summary (one run, same model and prompts) ===")
    for number, f in enumerate(figures, 1):  # names are long: columns are numbered
        print(f"  ({number}) {f.variant}")
    print(f"{'measurement':36s} " + " ".join(f"{f'({n})':>12s}" for n in
                                             range(1, len(figures) + 1)))
    for column in columns:
        cells = []
        for f in figures:
            value = f.values.get(column)
            cells.append(f"{'-' if value is None else gb.fmt(value):>12s}")
        print(f"{column:36s} " + " ".join(cells))
    for f in figures:
        for note in f.notes:
            print(f"  {f.variant}: {note}")


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU")
    parser.add_argument("--variant", action="append",
                        help=f"a variant name (repeatable); default: {', '.join(DEFAULT_VARIANTS)}")
    parser.add_argument("--attention", action=argparse.BooleanOptionalAction, default=True,
                        help="time each attention implementation alone first (default on)")
    parser.add_argument("--budget", type=float, default=150.0,
                        help="seconds: later work is skipped past it (default 150)")
    ns = parser.parse_args(argv)
    setup = Setup.make(ns.smoke)
    threads = torch.get_num_threads()
    if setup.device.type == "cpu":
        torch.set_num_threads(1)  # tiny shapes: threads only contend
    try:
        return profile_all(setup, ns.variant or list(DEFAULT_VARIANTS), ns.budget,
                           ns.attention)
    finally:
        torch.set_num_threads(threads)


def profile_all(setup: Setup, variants: list[str], budget: float, attention: bool) -> int:
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    print(f"decode profile: {setup.batch} rows x {setup.prompt}-token prompts, {setup.new} new "
          f"tokens, {setup.shape.num_layers} layers, hidden {setup.shape.hidden_size}, vocab "
          f"{setup.shape.vocab_size}, {setup.dtype}, {setup.device}; torch {torch.__version__}",
          flush=True)
    model = HFGenerator(setup.shape, "qwen3", device=setup.device, dtype=setup.dtype).model
    rows = setup.rows()
    print(f"model built at {elapsed():.0f} s", flush=True)
    if attention:
        try:
            attention_alone(setup, rows)
        except Exception:  # noqa: BLE001 - the variants must still be measured
            traceback.print_exc()
        gb.release_memory()
    ref = Reference(greedy=generate(model, rows, setup, features.REFERENCE, temperature=0.0),
                    sampled=generate(model, rows, setup, features.REFERENCE)[0])
    figures = []
    for name in variants:
        if elapsed() > budget:
            print(f"\n=== {name}: skipped, past the {budget:.0f} s budget ===")
            continue
        try:
            figures.append(run_variant(name, model, rows, setup, ref, budget))
        except Exception as err:  # noqa: BLE001 - the other variants must still be measured
            traceback.print_exc()
            failed = Figures(name)
            failed.notes.append(f"FAILED: {type(err).__name__}: {err}"[:200])
            figures.append(failed)
        finally:
            fg.release_decoders()
            gb.release_memory()
    summary(figures)
    print(f"\ntotal {elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # a timeout keeps every line printed so far
    sys.exit(main())
