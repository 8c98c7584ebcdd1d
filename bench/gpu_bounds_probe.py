#!/usr/bin/env python3
"""What this GPU machine can do at most, for holding each PPO phase against a bound: pinned
host->device and device->host copy GB/s, HBM bandwidth (a large device-to-device copy) and dense
bf16 matmul TFLOP/s.

    python3 bench/gpu_bounds_probe.py [--gib 2] [--matmul 8192] [--repeats 10] [--json FILE]

One line per figure ("name value unit"), each the median of --repeats timed repeats after
warm-ups, timed with CUDA events. HBM GB/s counts the bytes read and the bytes written (a copy of
N bytes moves 2N), as vendors' bandwidth figures do; the copy-size rate is printed beside it.
Needs CUDA; exits 2 without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any


def timed_ms(torch: Any, work: Callable[[], object], repeats: int, warmups: int = 3) -> float:  # noqa: ANN401
    """Median milliseconds of `work` over `repeats` runs, each between two CUDA events."""
    for _ in range(warmups):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_rates(torch: Any, nbytes: int, repeats: int) -> dict[str, float]:  # noqa: ANN401
    """Pinned host<->device and device->device copy rates, GB/s (1e9 bytes)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    other = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host.fill_(1)
    h2d = timed_ms(torch, lambda: device.copy_(host, non_blocking=True), repeats)
    d2h = timed_ms(torch, lambda: host.copy_(device, non_blocking=True), repeats)
    d2d = timed_ms(torch, lambda: other.copy_(device), repeats)
    return {"h2d_pinned_GBps": nbytes / h2d / 1e6, "d2h_pinned_GBps": nbytes / d2h / 1e6,
            "hbm_copy_GBps": nbytes / d2d / 1e6, "hbm_read_write_GBps": 2 * nbytes / d2d / 1e6}


def matmul_tflops(torch: Any, n: int, repeats: int) -> float:  # noqa: ANN401
    """Dense bf16 n x n x n matmul TFLOP/s on random data (2 n^3 FLOPs a product)."""
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    ms = timed_ms(torch, lambda: torch.matmul(a, b, out=out), repeats, warmups=5)
    return 2 * n**3 / ms / 1e9


def probe(gib: float, n: int, repeats: int) -> dict[str, Any]:
    import torch

    figures: dict[str, Any] = {"device": torch.cuda.get_device_name(0),
                               "torch": torch.__version__, "copy_bytes": int(gib * 2**30),
                               "matmul_n": n, "repeats": repeats}
    figures.update(copy_rates(torch, int(gib * 2**30), repeats))
    figures["bf16_matmul_TFLOPs"] = matmul_tflops(torch, n, repeats)
    return figures


UNITS = {"h2d_pinned_GBps": "GB/s", "d2h_pinned_GBps": "GB/s", "hbm_copy_GBps": "GB/s",
         "hbm_read_write_GBps": "GB/s", "bf16_matmul_TFLOPs": "TFLOP/s"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="bytes per copy, GiB")
    parser.add_argument("--matmul", type=int, default=8192, help="matmul size n (n x n x n)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ns = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_bounds_probe: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_bounds_probe: no CUDA device visible", file=sys.stderr)
        return 2
    figures = probe(ns.gib, ns.matmul, ns.repeats)
    print(f"device {figures['device']} (torch {figures['torch']}, {ns.gib} GiB copies, "
          f"n={ns.matmul}, median of {ns.repeats})")
    for name, unit in UNITS.items():
        print(f"{name} {figures[name]:.1f} {unit}")
    if ns.json:
        with open(ns.json, "w") as out:
            json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
