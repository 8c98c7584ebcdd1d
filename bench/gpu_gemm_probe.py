#!/usr/bin/env python3
"""The decode step's GEMMs alone: cuBLAS against the skinny Triton GEMM, and its tilings.

    PYTHONPATH=/tmp/site:$PWD python3 bench/gpu_gemm_probe.py        # on the H200 (~1-2 min)
    TRITON_INTERPRET=1 .venv/bin/python bench/gpu_gemm_probe.py --smoke   # CPU: the plumbing

At batch 64 the hf decoder's projections are [64, K] x [K, N]; their bytes are the weight's, so
each row of the table is a weight-streaming rate. Per shape of the Qwen3-0.6B decode step, in
one run, each timed as a CUDA graph of REPEAT calls (the decode step replays a graph, so launch
cost is not what is measured) that cycle through copies of the weight filling --cold-mb (256 MB,
past the H200's L2: in the decoder each layer's weights come from HBM, not L2):
  cublas        F.linear (and addmm_ into a residual where the decoder adds one);
  skinny plan   engine/rollout/decoder/kernels/skinny_gemm.py with `plan`'s tiles;
  skinny sweep  other (BLOCK_N, SPLIT_K) tilings, then warps and stages around the best one.
The last table gives, per shape, the best tiling and its time against cuBLAS's, and the sum over
one decode step (28 layers + the lm head): what the skinny GEMM can save at most, and what `plan`
saves as it stands.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpu_decode_profile import cycling, per_call_us  # noqa: E402

from ppodeck.engine.rollout.decoder.kernels import skinny_gemm  # noqa: E402

# (name, N, K, calls per decode step, adds a residual): Qwen3-0.6B's packed projections
H200_SHAPES = (("qkv", 4096, 1024, 28, False), ("o", 1024, 2048, 28, True),
               ("gate_up", 6144, 1024, 28, False), ("down", 1024, 3072, 28, True),
               ("lm_head", 151936, 1024, 1, False))
SMOKE_SHAPES = (("qkv", 64, 32, 2, False), ("down", 32, 64, 2, True))
BLOCK_NS = (16, 32, 64, 128)
SPLITS = (1, 2, 4, 8)
WARPS_STAGES = ((2, 3), (4, 2), (4, 4), (8, 3), (8, 4))


@dataclass(frozen=True)
class Timing:
    label: str
    us: float
    gbps: float
    max_diff: float
    tiles: tuple[int, int, int] | None = None  # the skinny GEMM's (BLOCK_N, BLOCK_K, SPLIT_K)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU interpreter)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds for the sweeps")
    parser.add_argument("--only", action="append", metavar="SHAPE",
                        help="probe only this shape (repeatable): qkv, o, gate_up, down, lm_head")
    parser.add_argument("--cold-mb", type=float, default=256.0,
                        help="weight copies cycled through, in MB (0: one copy, L2-warm)")
    ns = parser.parse_args(argv)
    device = torch.device("cpu" if ns.smoke else "cuda")
    shapes = [s for s in (SMOKE_SHAPES if ns.smoke else H200_SHAPES)
              if not ns.only or s[0] in ns.only]
    if not shapes:
        parser.error(f"--only {ns.only}: no such shape")
    repeat = 2 if ns.smoke else 50
    deadline = time.perf_counter() + ns.budget
    cold_bytes = 16_000 if ns.smoke else int(ns.cold_mb * 1e6)  # smoke: a few copies
    print(f"gemm probe: {ns.rows} rows, bf16, {device}, torch {torch.__version__}, "
          f"{skinny_gemm.multiprocessors(device) if device.type == 'cuda' else 0} SMs, weights "
          f"cycled through {cold_bytes / 1e6:.3g} MB of copies")
    summary = []
    for name, n, k, calls, residual in shapes:
        print(f"\n=== {name}: [{ns.rows}, {k}] x [{k}, {n}]{' + residual' if residual else ''}, "
              f"{n * k * 2 / 1e6:.1f} MB of weight, {calls} per decode step ===")
        rows = probe_shape(ns.rows, n, k, residual, device, repeat, deadline, cold_bytes)
        for row in rows:
            print(f"  {row.label:<44} {row.us:9.2f} us {row.gbps:8.1f} GB/s  "
                  f"max|diff| {row.max_diff:.2e}")
        summary.append((name, calls, rows))
    print_summary(summary)
    return 0


def probe_shape(m: int, n: int, k: int, residual: bool, device: torch.device, repeat: int,
                deadline: float, cold_bytes: int = 0) -> list[Timing]:
    """cuBLAS, `plan`'s tiling, then the sweep (while the budget lasts) for one shape; the
    timed calls cycle through copies of the weight filling `cold_bytes`."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(m, k, generator=gen, device=device).bfloat16()
    weight = (torch.randn(n, k, generator=gen, device=device) * k ** -0.5).bfloat16()
    base = torch.randn(m, n, generator=gen, device=device).bfloat16()
    exact = x.float() @ weight.float().t() + (base.float() if residual else 0)
    # each call reads the next copy (each captured call keeps its own)
    copies = [(w,) for w in [weight] + [weight.clone()
                                        for _ in range(cold_bytes // (n * k * 2))]]
    acc = base.clone()
    out = torch.empty(m, n, device=device, dtype=torch.bfloat16)

    def cublas_on(w: torch.Tensor) -> torch.Tensor:
        return acc.copy_(base).addmm_(x, w.t()) if residual else torch.mm(x, w.t(), out=out)

    cublas = cycling(cublas_on, copies)

    def skinny(tiles: tuple[int, int, int] | None) -> Callable[[], torch.Tensor]:
        def call_on(w: torch.Tensor) -> torch.Tensor:
            if residual:
                return skinny_gemm.linear(x, w, residual=acc.copy_(base), tiles=tiles)
            return skinny_gemm.linear(x, w, out=out, tiles=tiles)
        return cycling(call_on, copies)

    weight_bytes = n * k * 2
    plan = skinny_gemm.plan(m, n, k, skinny_gemm.multiprocessors(device)
                            if device.type == "cuda" else 132)
    rows = [_timed("cublas", cublas, exact, weight_bytes, repeat),
            _timed(f"skinny plan {_tiles_label(plan)}", skinny(plan), exact, weight_bytes,
                   repeat, plan)]
    sweep = [t for t in _tilings(m, n, k) if t != plan]
    for tiles in sweep:
        if time.perf_counter() > deadline:
            rows.append(Timing("(sweep stopped: budget spent)", float("nan"), 0.0, 0.0))
            return rows
        rows.append(_timed(f"skinny {_tiles_label(tiles)}", skinny(tiles), exact,
                           weight_bytes, repeat, tiles))
    timed = [r for r in rows[1:] if r.us == r.us]
    if not timed:
        return rows
    best_tiles = min(timed, key=lambda r: r.us).tiles
    for warps, stages in WARPS_STAGES:
        if time.perf_counter() > deadline:
            break
        with _launch_config(warps, stages):
            rows.append(_timed(f"skinny {_tiles_label(best_tiles)} w{warps} s{stages}",
                               skinny(best_tiles), exact, weight_bytes, repeat, best_tiles))
    return rows


def _tilings(m: int, n: int, k: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, SPLIT_K) over BLOCK_NS x SPLITS, BLOCK_K as `plan` would pick it."""
    found = []
    for split in SPLITS:
        if split > 1 and k // split < skinny_gemm.MIN_K_CHUNK // 2:
            continue
        for block_n in BLOCK_NS:
            if block_n <= max(16, n):
                found.append((block_n, skinny_gemm._block_k(block_n, k, split), split))
    return found


@contextlib.contextmanager
def _launch_config(warps: int, stages: int) -> Iterator[None]:
    """skinny_gemm's NUM_WARPS / NUM_STAGES for one timing, restored after."""
    saved = (skinny_gemm.NUM_WARPS, skinny_gemm.NUM_STAGES)
    skinny_gemm.NUM_WARPS, skinny_gemm.NUM_STAGES = warps, stages
    try:
        yield
    finally:
        skinny_gemm.NUM_WARPS, skinny_gemm.NUM_STAGES = saved


def _timed(label: str, call: Callable[[], torch.Tensor], exact: torch.Tensor,
           weight_bytes: int, repeat: int,
           tiles: tuple[int, int, int] | None = None) -> Timing:
    """Mean microseconds per call over a CUDA graph of `repeat` calls (CPU: wall clock)."""
    try:
        diff = (call().float() - exact).abs().max().item()  # compiles outside the capture
        us = per_call_us(call, exact.device, repeat)
    except Exception as err:  # a tiling Triton cannot build here: say so, go on
        return Timing(f"{label} failed: {type(err).__name__}: {str(err)[:60]}", float("nan"),
                      0.0, float("nan"))
    return Timing(label, us, weight_bytes / us / 1e3, diff, tiles)


def _tiles_label(tiles: tuple[int, int, int]) -> str:
    return f"n{tiles[0]} k{tiles[1]} split{tiles[2]}"


def print_summary(summary: list[tuple[str, int, list[Timing]]]) -> None:
    """Per shape: cuBLAS, plan, best; then one decode step's GEMM time under each."""
    print("\n=== summary: us per call (x calls per decode step) ===")
    print(f"  {'shape':<8} {'cublas':>9} {'plan':>9} {'best':>9}  best tiling")
    totals = [0.0, 0.0, 0.0]
    for name, calls, rows in summary:
        timed = [r for r in rows if r.us == r.us]
        best = min(timed[1:], key=lambda r: r.us) if len(timed) > 1 else timed[0]
        best = best if best.us < timed[0].us else timed[0]
        figures = (rows[0].us, rows[1].us, best.us)
        totals = [t + f * calls for t, f in zip(totals, figures, strict=True)]
        print(f"  {name:<8} {figures[0]:9.2f} {figures[1]:9.2f} {figures[2]:9.2f}  {best.label}")
    print(f"  one decode step's GEMMs: cublas {totals[0] / 1e3:.3f} ms, plan "
          f"{totals[1] / 1e3:.3f} ms ({totals[1] / totals[0]:.2f}x), best per shape "
          f"{totals[2] / 1e3:.3f} ms ({totals[2] / totals[0]:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
