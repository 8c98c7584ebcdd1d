#!/usr/bin/env python3
"""Try a canary recipe at a few learning rates side by side before a corridor is kept from it.

    python3 bench/canary_trial.py [--preset qwen3-0.6b-ppo-1gpu] [--lr 1e-5 --lr 3e-5 ...]
                                  [--flip-lr 3e-5] [--runs-dir DIR] [--timeout 300]

Each --lr runs the canary's recipe (engine/launch/canary.py) with that actor and critic learning
rate; each --flip-lr also runs it with negated advantages (PPODECK_TEST_FLIP_ADVANTAGES=1). All
runs start at once on this machine. Prints each run's per-rollout reward (the corridor's 3-rollout
mean), KL and clip fraction, and, for each flipped run, the breaches it makes against a corridor
of the unflipped run at the same rate: a recipe the canary can use rises in its trusted runs and
leaves the corridor when the loss is broken. Each run holds its own actor, critic and rollout
model on the GPU: four runs of the 1-GPU recipe at once do not fit one 80 GB card.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppodeck.engine.host.kind import machine_kind  # noqa: E402
from ppodeck.engine.launch import canary  # noqa: E402
from ppodeck.engine.launch.local import prepare_run, start_driver  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.corridor import build_corridor, judge, run_series  # noqa: E402
from ppodeck.engine.run.events import read_events  # noqa: E402
from ppodeck.engine.run.rundir import RunDir, read_status  # noqa: E402

SHOWN = ("rollout/raw_reward", "train/ppo_kl", "train/pg_clipfrac", "train/critic-value_loss")


def start(preset: str, lr: float, flip: bool, runs_dir: Path
          ) -> tuple[RunDir, subprocess.Popen[bytes]]:
    overrides = {**canary.recipe_overrides(preset), "lr": lr, "critic_lr": lr}
    config = resolve_preset(load_preset(preset)).with_values(**overrides)
    name = f"trial-lr{lr:g}{'-flip' if flip else ''}"
    rundir = prepare_run(config, preset, run_dir=runs_dir / name)
    return rundir, start_driver(rundir, env={"PPODECK_TEST_FLIP_ADVANTAGES": "1" if flip else "0"})


def wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # the driver stops its Ray and workers itself
            proc.wait(timeout=60)


def series_of(rundir: RunDir) -> dict[str, dict[int, float]]:
    events, _ = read_events(rundir.events_jsonl)
    return run_series(events)


def show(label: str, rundir: RunDir, series: dict[str, Any]) -> None:
    state = read_status(rundir).get("state")
    print(f"{label}: {state} ({rundir.path.name})")
    for metric in SHOWN:
        values = series.get(metric, {})
        print(f"  {metric:<26} " + " ".join(f"{values[r]:.3f}" for r in sorted(values)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=canary.GPU_RECIPE)
    parser.add_argument("--lr", type=float, action="append", default=[])
    parser.add_argument("--flip-lr", type=float, action="append", default=[])
    parser.add_argument("--runs-dir", type=Path, default=Path("/tmp/ppodeck-canary-trial"))
    parser.add_argument("--timeout", type=float, default=300.0)
    ns = parser.parse_args(argv)
    plan = [(lr, False) for lr in ns.lr] + [(lr, True) for lr in ns.flip_lr]
    ns.runs_dir.mkdir(parents=True, exist_ok=True)
    started = [(lr, flip, *start(ns.preset, lr, flip, ns.runs_dir)) for lr, flip in plan]
    wait_all([proc for *_, proc in started], ns.timeout)
    trusted: dict[float, dict[str, Any]] = {}
    for lr, flip, rundir, _ in started:
        series = series_of(rundir)
        show(f"lr {lr:g}{' flipped' if flip else ''}", rundir, series)
        if not flip:
            trusted[lr] = series
    for lr, flip, rundir, _ in started:
        if flip and lr in trusted:
            corridor = build_corridor(canary.recipe(ns.preset), [trusted[lr]], machine_kind())
            breaches = judge(corridor, series_of(rundir))
            print(f"lr {lr:g} flipped against its one-run corridor: {len(breaches)} breaches")
            for breach in breaches[:6]:
                print(f"  {breach.text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
