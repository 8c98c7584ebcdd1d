"""Config-layer benchmarks: a full check() of the seed preset, and `ppodeck --help` cold.

Goals: check() median <= 0.5 ms over >= 1000 runs; `ppodeck --help` cold median <= 0.3 s over
>= 7 fresh interpreters. Run: .venv/bin/python bench/config_bench.py [--runs N] [--help-runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHECK_GOAL_MS = 0.5
HELP_GOAL_S = 0.3


def bench_check(runs: int) -> float:
    from ppodeck.engine.config import check
    from ppodeck.engine.presets import load_preset, resolve_preset

    config = resolve_preset(load_preset("qwen3-4b-ppo"))
    for _ in range(100):  # warm up caches and the filesystem stat cache
        check(config)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        check(config)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def bench_help(runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ppodeck", "--help"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000, help="check() runs (>= 1000)")
    parser.add_argument("--help-runs", type=int, default=9, help="--help runs (>= 7)")
    args = parser.parse_args()
    check_ms = bench_check(max(args.runs, 1000))
    help_s = bench_help(max(args.help_runs, 7))
    print(f"check(qwen3-4b-ppo) median {check_ms:.3f} ms over {max(args.runs, 1000)} runs  "
          f"goal {CHECK_GOAL_MS} ms  ratio {check_ms / CHECK_GOAL_MS:.2f}")
    print(f"ppodeck --help cold median {help_s:.3f} s over {max(args.help_runs, 7)} runs  "
          f"goal {HELP_GOAL_S} s  ratio {help_s / HELP_GOAL_S:.2f}")


if __name__ == "__main__":
    main()
