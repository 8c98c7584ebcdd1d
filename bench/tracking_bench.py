"""What --use-wandb / --use-tensorboard cost the driver: start-up, and the time one metrics call
(Telemetry.metrics -> events.jsonl + the trackers) blocks the training loop.

    .venv/bin/python bench/tracking_bench.py [--calls 2000]

Offline wandb and TensorBoard files go to a temporary run directory. Prints one line per
configuration: start seconds, mean and p99 microseconds per metrics call (12 metrics each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.config import resolve  # noqa: E402
from ppodeck.engine.driver.telemetry import Telemetry  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.events import EventWriter  # noqa: E402

METRICS = {f"train/metric_{i}": 0.1 * i for i in range(12)}


def measure(flags: dict, calls: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = resolve_preset(load_preset("tiny-cpu")).with_values(run_dir=tmp, **flags)
        args = dict(resolve(config, os.environ))
        writer = EventWriter(Path(tmp) / "events.jsonl")
        tm = Telemetry(writer, 0)
        start = time.perf_counter()
        tm.start_tracking(args)
        started = time.perf_counter() - start
        times = []
        for step in range(calls):
            t0 = time.perf_counter()
            tm.metrics("train/step", step, step // 4, dict(METRICS))
            times.append(time.perf_counter() - t0)
        tm.close()
        writer.close()
    times.sort()
    return started, statistics.fmean(times) * 1e6, times[int(0.99 * len(times))] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    ns = parser.parse_args()
    for name, flags in (("events only", {}),
                        ("tensorboard", {"use_tensorboard": True, "tb_project_name": "b"}),
                        ("wandb offline", {"use_wandb": True})):
        started, mean_us, p99_us = measure(flags, ns.calls)
        print(f"{name:14s} start {started:6.2f} s   per metrics call: mean {mean_us:7.1f} us, "
              f"p99 {p99_us:7.1f} us  ({ns.calls} calls)")


if __name__ == "__main__":
    main()
