#!/usr/bin/env python3
"""What this GPU machine can do at most, for holding each PPO phase against a bound: pinned
host->device and device->host copy GB/s, HBM bandwidth (a large device-to-device copy) and dense
bf16 matmul TFLOP/s.

    python3 bench/gpu_bounds_probe.py [--gib 2] [--matmul 8192] [--repeats 10] [--json FILE]

One line per figure ("name value unit"), each the median of --repeats timed repeats after
warm-ups, timed with CUDA events. HBM GB/s counts the bytes read and the bytes written (a copy of
N bytes moves 2N), as vendors' bandwidth figures do; the copy-size rate is printed beside it.
Needs CUDA; exits 2 without it. The measuring functions are the launch probe's
(engine/host/probe.py), run here with larger sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ppodeck.engine.host.probe import gpu_figures  # noqa: E402  (the launch probe's method)


def probe(gib: float, n: int, repeats: int) -> dict[str, Any]:
    import torch

    figures: dict[str, Any] = {"torch": torch.__version__, "copy_bytes": int(gib * 2**30),
                               "matmul_n": n, "repeats": repeats}
    figures.update(gpu_figures(gib, n, repeats))
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
