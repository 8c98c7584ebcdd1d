#!/usr/bin/env python3
"""A run's reward curve from its events.jsonl: mean reward per rollout against wall time.

    python3 bench/reward_curve.py events.jsonl [--start-max 0.3] [--target 0.8]

One row per rollout: seconds since launch (the first status event) and since init ended, the
mean reward, its min and max. Then the learning goal of issue 20: did the run start at or below
--start-max (the first rollout's mean) and when did it first reach --target, per rollout and as
the mean of three rollouts in a row (the steadier figure), timed from launch and from the end of
init.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ppodeck.engine.vocabulary import INIT_PHASE, Metric  # noqa: E402

WINDOW = 3


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve(events: list[dict]) -> tuple[float, float | None, list[tuple[int, float, dict]]]:
    """(launch ts, init end ts, [(rollout id, ts, metrics)]) from the rollout metrics events."""
    launch = next(e["ts"] for e in events if e.get("kind") == "status")
    init_end = next((e["ts"] for e in events if e.get("kind") == "phase"
                     and e.get("name") == INIT_PHASE and e.get("state") == "end"), None)
    rows = [(e["rollout_id"], e["ts"], e["metrics"]) for e in events
            if e.get("kind") == "metrics" and Metric.REWARD in e.get("metrics", {})]
    return launch, init_end, rows


def first_reaching(values: list[float], target: float, window: int) -> int | None:
    for end in range(window, len(values) + 1):
        if sum(values[end - window:end]) / window >= target:
            return end - 1
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", type=Path)
    parser.add_argument("--start-max", type=float, default=0.3)
    parser.add_argument("--target", type=float, default=0.8)
    opts = parser.parse_args()
    launch, init_end, rows = curve(load(opts.events))
    if not rows:
        print(f"{opts.events}: no rollout reward yet")
        return 1
    since_init = (lambda ts: ts - init_end) if init_end else (lambda ts: float("nan"))
    print(f"{'rollout':>7} {'s launch':>9} {'s init':>8} {'reward':>7} {'min':>5} {'max':>5}")
    for rollout, ts, m in rows:
        print(f"{rollout:>7} {ts - launch:>9.1f} {since_init(ts):>8.1f} {m[Metric.REWARD]:>7.3f} "
              f"{m.get(Metric.REWARD_MIN, float('nan')):>5.2f} "
              f"{m.get(Metric.REWARD_MAX, float('nan')):>5.2f}")
    rewards = [m[Metric.REWARD] for _, _, m in rows]
    print(f"start: rollout {rows[0][0]} mean reward {rewards[0]:.3f} "
          f"({'<=' if rewards[0] <= opts.start_max else '>'} {opts.start_max})")
    for window, label in ((1, "one rollout"), (WINDOW, f"mean of {WINDOW} rollouts")):
        hit = first_reaching(rewards, opts.target, window)
        if hit is None:
            print(f"target {opts.target} ({label}): not reached in {len(rows)} rollouts")
            continue
        rollout, ts, _ = rows[hit]
        print(f"target {opts.target} ({label}): rollout {rollout}, {ts - launch:.1f} s after "
              f"launch, {since_init(ts):.1f} s after init")
    return 0


if __name__ == "__main__":
    sys.exit(main())
