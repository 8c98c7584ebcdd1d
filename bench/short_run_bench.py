#!/usr/bin/env python3
"""What a short real run pays around its rollouts, in this checkout and another, side by side.

The suite's real runs (tests/engine, tests/reliability, tests/health) are short tiny-cpu runs,
so their time is mostly start and end: Ray's start, the rollout worker's start, and the time
from the run's last event to the process's exit. This runs `ppodeck run tiny-cpu --yes --set
num-rollout=3` from each checkout in turn (the other first), with this virtualenv's Python and
each checkout on PYTHONPATH, and prints the medians.

    .venv/bin/python bench/short_run_bench.py --compare DIR [--runs 3]

DIR is another checkout (e.g. `git worktree add /tmp/before <commit>`). Note the machine's load
beside the figures: on a shared 2-core machine they move with whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RUN = ["-m", "ppodeck", "run", "tiny-cpu", "--yes", "--set", "num-rollout=3"]
QUIET_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
             "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def one_run(checkout: Path, run_dir: Path) -> dict[str, float]:
    env = {**os.environ, **QUIET_ENV, "PYTHONPATH": str(checkout)}
    began = time.time()
    done = subprocess.run([sys.executable, *RUN, "--run-dir", str(run_dir)], cwd=checkout,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=600)
    exited = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the run failed ({done.returncode}); see {run_dir}")
    return figures(run_dir, began, exited)


def figures(run_dir: Path, began: float, exited: float) -> dict[str, float]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    ends = {e["name"]: e for e in events
            if e["kind"] == "phase" and e["state"] == "end" and e.get("rollout_id") is None}
    rollout_start = ends["rollout_start"]
    return {
        "whole run (command to exit)": exited - began,
        "command -> first event": events[0]["ts"] - began,
        "ray_start": ends["ray_start"]["seconds"],
        "rollout_start": rollout_start["seconds"],
        "  of it: prompt data": rollout_start["parts"].get("prompt data", 0.0),
        "init": ends["init"]["seconds"],
        "last event -> exit": exited - events[-1]["ts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, required=True, help="another checkout")
    parser.add_argument("--runs", type=int, default=3)
    ns = parser.parse_args()
    checkouts = {"other": ns.compare.resolve(), "this": HERE}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    with tempfile.TemporaryDirectory(prefix="short-run-bench-") as tmp:
        for i in range(ns.runs):
            for name, checkout in checkouts.items():
                results[name].append(one_run(checkout, Path(tmp) / f"{name}-{i}"))
                print(f"run {i + 1}/{ns.runs} {name}: "
                      f"{results[name][-1]['whole run (command to exit)']:.1f} s", flush=True)
    print(f"\nmedians of {ns.runs} runs each, alternating; load now {os.getloadavg()[0]:.1f}")
    print(f"{'':32}{'other':>10}{'this':>10}{'this/other':>12}")
    for row in results["this"][0]:
        other = statistics.median(r[row] for r in results["other"])
        this = statistics.median(r[row] for r in results["this"])
        ratio = f"{this / other:.2f}" if other > 0 else "-"
        print(f"{row:32}{other:10.2f}{this:10.2f}{ratio:>12}")


if __name__ == "__main__":
    main()
