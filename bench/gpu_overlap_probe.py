#!/usr/bin/env python3
"""Does a train-state copy in one process run beside another process's kernels on one GPU?

    PYTHONPATH=/tmp/site:$PWD python3 bench/gpu_overlap_probe.py      # on the H200 (~30 s)
    .venv/bin/python bench/gpu_overlap_probe.py --smoke                # CPU, tiny: the plumbing

PPODECK_OVERLAP_MOVES=1 (engine/driver/offload.py) sends a trainer's onload/offload while
another role's process computes. Without MPS, processes time-slice the GPU, so whether the copy
engines serve one process while the SMs serve another decides what that overlap can save. Two
spawned processes, side by side in one run:
  compute  bf16 GEMMs back to back (what training and decoding keep the SMs busy with);
  copy     pinned host <-> device copies of a train-state-sized buffer (what a move does), H2D
           then D2H, as the offload and onload do.
Each runs alone, then both at once (started together at a barrier), and the table prints the
compute ms per GEMM, the copy GB/s and, for the pair, each one's ratio to its solo figure and
the wall time against the two solo times added: 1.0 = serialized, 0.5 = fully overlapped.
The same pair as two CUDA streams of ONE process is the bound the hardware allows.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sizes:
    device: str
    gemm: int          # square GEMM side
    gemms: int         # GEMMs per timed run
    copy_bytes: int    # the moved buffer
    copies: int        # H2D + D2H rounds per timed run


H200 = Sizes("cuda", 8192, 400, 4 << 30, 4)
SMOKE = Sizes("cpu", 256, 20, 16 << 20, 2)


def compute(sizes: Sizes) -> float:
    """Seconds for `gemms` bf16 GEMMs back to back."""
    a = torch.randn(sizes.gemm, sizes.gemm, device=sizes.device, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    a @ b  # warm-up: cuBLAS handles and heuristics
    _sync(sizes.device)
    start = time.perf_counter()
    for _ in range(sizes.gemms):
        a @ b
    _sync(sizes.device)
    return time.perf_counter() - start


def copy(sizes: Sizes) -> float:
    """Seconds for `copies` H2D + D2H rounds of a pinned buffer."""
    pin = sizes.device == "cuda"
    host = torch.empty(sizes.copy_bytes, dtype=torch.uint8, pin_memory=pin)
    dev = torch.empty(sizes.copy_bytes, dtype=torch.uint8, device=sizes.device)
    dev.copy_(host, non_blocking=pin)  # warm-up
    _sync(sizes.device)
    start = time.perf_counter()
    for _ in range(sizes.copies):
        dev.copy_(host, non_blocking=pin)
        host.copy_(dev, non_blocking=pin)
    _sync(sizes.device)
    return time.perf_counter() - start


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _child(kind: str, sizes: Sizes, barrier: mp.Barrier, results: mp.Queue) -> None:
    work = compute if kind == "compute" else copy
    work(sizes)  # allocation and warm-up outside the timed pair
    barrier.wait()
    results.put((kind, work(sizes)))


def in_processes(kinds: tuple[str, ...], sizes: Sizes) -> tuple[dict[str, float], float]:
    """Each kind in its own spawned process, timed from a shared barrier; and the wall time."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(kinds) + 1), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(kind, sizes, barrier, results)) for kind in kinds]
    for proc in procs:
        proc.start()
    barrier.wait()
    start = time.perf_counter()
    out = dict(results.get(timeout=600) for _ in kinds)
    wall = time.perf_counter() - start
    for proc in procs:
        proc.join(timeout=60)
    return out, wall


def in_one_process(sizes: Sizes) -> float:
    """Wall seconds of the pair as two CUDA streams of this process (the copies on a side
    stream, the GEMMs on the default one)."""
    side = torch.cuda.Stream()
    host = torch.empty(sizes.copy_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(sizes.copy_bytes, dtype=torch.uint8, device="cuda")
    a = torch.randn(sizes.gemm, sizes.gemm, device="cuda", dtype=torch.bfloat16)
    a @ a  # warm-up
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.cuda.stream(side):
        for _ in range(sizes.copies):
            dev.copy_(host, non_blocking=True)
            host.copy_(dev, non_blocking=True)
    for _ in range(sizes.gemms):
        a @ a
    torch.cuda.synchronize()
    return time.perf_counter() - start


def report(sizes: Sizes) -> None:
    solo_compute, _ = in_processes(("compute",), sizes)
    solo_copy, _ = in_processes(("copy",), sizes)
    pair, wall = in_processes(("compute", "copy"), sizes)
    gb = 2 * sizes.copies * sizes.copy_bytes / 1e9
    c1, c2 = solo_compute["compute"], pair["compute"]
    m1, m2 = solo_copy["copy"], pair["copy"]
    print(f"device {sizes.device}: {sizes.gemms} GEMMs of {sizes.gemm}^2 bf16; "
          f"{sizes.copies} x (H2D + D2H) of {sizes.copy_bytes / 2**30:.2f} GiB pinned")
    print(f"{'':<28}{'alone':>12}{'beside the other':>18}{'ratio':>8}")
    print(f"{'compute, ms per GEMM':<28}{1e3 * c1 / sizes.gemms:>12.3f}"
          f"{1e3 * c2 / sizes.gemms:>18.3f}{c2 / c1:>8.2f}")
    print(f"{'copy, GB/s':<28}{gb / m1:>12.1f}{gb / m2:>18.1f}{m1 / m2:>8.2f}")
    print(f"two processes at once: {wall:.2f} s against {c1 + m1:.2f} s for the two alone "
          f"(ratio {wall / (c1 + m1):.2f}: 1.0 serialized, "
          f"{max(c1, m1) / (c1 + m1):.2f} fully overlapped)")
    if sizes.device == "cuda":
        one = in_one_process(sizes)
        print(f"one process, two streams: {one:.2f} s (ratio {one / (c1 + m1):.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU")
    ns = parser.parse_args(argv)
    if not ns.smoke and not torch.cuda.is_available():
        print("no CUDA: run with --smoke for the plumbing on CPU", file=sys.stderr)
        return 2
    report(SMOKE if ns.smoke else H200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
