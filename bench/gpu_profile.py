#!/usr/bin/env python3
"""Where a train step's time goes on the GPU (a diagnosis tool, not a benchmark table).

    PYTHONPATH=/tmp/site python3 bench/gpu_profile.py [--role critic]   # on the H200
    .venv/bin/python bench/gpu_profile.py --smoke                       # tiny shapes on CPU

For the Qwen3-0.6B shape (bench/gpu_bench.py's plan) and each --role (the actor by
default) it prints, for our SDPA attention:
  - the step split into forward+loss / backward / optimizer, with CUDA events;
  - the sum of GPU kernel time against the wall time of a step (a large gap = the host cannot
    launch kernels fast enough);
  - the top kernels by GPU time and their share grouped by kind (GEMM, attention, elementwise,
    reductions, copies, optimizer).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gpu_bench as gb  # noqa: E402
import torch  # noqa: E402


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    for kind, keys in (("gemm", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas")),
                       ("attention", ("flash", "fmha", "attention")),
                       ("optimizer", ("adam", "multi_tensor", "foreach")),
                       ("copy", ("copy", "memcpy", "memset", "cat", "index")),
                       ("reduce", ("reduce", "norm", "softmax", "max", "sum", "logsumexp")),
                       ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise"))):
        if any(k in lowered for k in keys):
            return kind
    return "other"


def phase_split(ddp, optimizer, role: str, ids, positions,  # noqa: ANN001
                device) -> dict[str, float]:  # noqa: ANN001
    """Median-ready CUDA-event split of one step: forward+loss, backward, optimizer (the loss
    gpu_bench.train_step takes for `role`)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    events[0].record()
    loss = gb.step_loss(ddp(ids, positions, None), ids, role)
    events[1].record()
    optimizer.scale_loss(loss).backward()
    ddp.finish_grad_sync()
    events[2].record()
    optimizer.step()
    events[3].record()
    torch.cuda.synchronize(device)
    names = ("forward+loss", "backward", "optimizer")
    return {n: events[i].elapsed_time(events[i + 1]) for i, n in enumerate(names)}


def kernel_table(prof, steps: int, wall_ms: float) -> None:  # noqa: ANN001
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for evt in prof.events():
        if (evt.device_type == torch.autograd.DeviceType.CUDA
                and not evt.name.startswith("Optimizer.")):  # annotations, not kernels
            per_kernel[evt.name][0] += evt.device_time_total / 1e3 / steps
            per_kernel[evt.name][1] += 1 / steps
    total = sum(ms for ms, _ in per_kernel.values())
    print(f"\nGPU kernel time per step {total:.1f} ms vs wall {wall_ms:.1f} ms "
          f"(GPU busy {total / wall_ms:.0%}); kernels per step "
          f"{sum(c for _, c in per_kernel.values()):.0f}")
    kinds: dict[str, float] = defaultdict(float)
    for name, (ms, _) in per_kernel.items():
        kinds[kernel_kind(name)] += ms
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:12s} {ms:8.1f} ms  {ms / total:6.1%}")
    print("\ntop kernels (ms/step, calls/step):")
    for name, (ms, calls) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"  {ms:8.2f} {calls:6.0f}  {kernel_kind(name):10s} {name[:120]}")


def op_table(prof) -> None:  # noqa: ANN001
    """Top torch ops by their own GPU time, with input shapes (to name the copies)."""
    averages = prof.key_averages(group_by_input_shape=True)
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            print(averages.table(sort_by=key, row_limit=25, max_name_column_width=40,
                                 max_shapes_column_width=70))
            return
        except (AttributeError, KeyError, ValueError):
            continue


def profile_role(plan: gb.Plan, role: str, batch: int, variant: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    plan = gb.Plan(**{**plan.__dict__, "train_batch": batch})
    ddp, optimizer, kinds = gb.build_trainable(plan, role, variant)
    ids = torch.randint(0, plan.shape.vocab_size, (batch, plan.train_seq), device=plan.device)
    positions = torch.arange(plan.train_seq, device=plan.device).expand_as(ids)
    for _ in range(3):
        gb.train_step(ddp, optimizer, role, ids, positions)
    print(f"\n=== {role} {variant} {batch}x{plan.train_seq} (core_attention={kinds}) ===")
    if plan.device.type == "cuda":
        splits = [phase_split(ddp, optimizer, role, ids, positions, plan.device)
                  for _ in range(3)]
        for name in splits[0]:
            print(f"  {name:14s} {sorted(s[name] for s in splits)[1]:8.1f} ms")
    steps = 3
    gb.sync(plan.device)
    start = time.perf_counter()
    for _ in range(steps):
        gb.train_step(ddp, optimizer, role, ids, positions)
    gb.sync(plan.device)
    wall_ms = (time.perf_counter() - start) / steps * 1e3
    flops = gb.step_flops(plan.shape, role, batch, plan.train_seq)
    print(f"  wall {wall_ms:.1f} ms/step, {batch * plan.train_seq / wall_ms * 1e3:,.0f} tok/s, "
          f"{flops / wall_ms / 1e9:.1f} TFLOP/s")
    if plan.device.type != "cuda":
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(steps):
            gb.train_step(ddp, optimizer, role, ids, positions)
        gb.sync(plan.device)
    kernel_table(prof, steps, wall_ms)
    op_table(prof)
    del ddp, optimizer
    gb.release_memory()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--variant", choices=tuple(gb.VARIANTS), action="append")
    parser.add_argument("--role", choices=("actor", "critic"), action="append")
    ns = parser.parse_args()
    plan = gb.Plan.make(ns.smoke)
    gb.init_megatron()
    for role in ns.role or ["actor"]:
        for variant in ns.variant or [gb.DEFAULT_VARIANT]:
            for batch in ns.batch or [plan.train_batch]:
                profile_role(plan, role, batch, variant=variant)
    return 0


if __name__ == "__main__":
    sys.exit(main())
