"""CPU engine benchmark: one real tiny-cpu run (Ray + Megatron + PPO), figures from its events.

Prints, side by side from the same run:
  - wall time per phase (median per rollout) and its share of the rollout step;
  - the driver's share of the step spent outside any phase (goal <= 5%), and the share spent in
    Ray/driver overhead inside phases (phase wall time minus what the workers report computing);
  - time to a mean reward of 0.8 (3-rollout rolling mean), and the whole run's wall time.

Usage: .venv/bin/python bench/engine_cpu.py [--set num-rollout=40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.config import BY_NAME, coerce  # noqa: E402
from ppodeck.engine.launch.local import prepare_run, start_driver  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.events import read_events  # noqa: E402
from ppodeck.engine.run.rundir import read_status  # noqa: E402
from ppodeck.engine.vocabulary import PHASE_END, PHASE_START, Kind, Metric, Phase, State, StepKey  # noqa: E402

GOAL_DRIVER_SHARE = 0.05
TARGET_REWARD = 0.8


def parse_sets(pairs: list[str]) -> dict:
    values = {}
    for pair in pairs:
        name, _, raw = pair.partition("=")
        flag = BY_NAME["--" + name.lstrip("-")]
        values[flag.dest] = coerce(flag, raw)
    return values


def run(preset: str, overrides: dict) -> tuple[list[dict], float, dict]:
    config = resolve_preset(load_preset(preset)).with_values(**overrides)
    with tempfile.TemporaryDirectory() as tmp:
        rundir = prepare_run(config, preset, run_dir=Path(tmp) / "run")
        start = time.perf_counter()
        proc = start_driver(rundir, env={"RAY_AUTH_MODE": "disabled",
                                         "RAY_USAGE_STATS_ENABLED": "0"})
        proc.wait()
        wall = time.perf_counter() - start
        events, _ = read_events(rundir.events_jsonl)
        return events, wall, read_status(rundir)


def phase_table(events: list[dict]) -> tuple[dict[str, float], float, float]:
    """Median seconds per phase per rollout, median step time, median time outside phases."""
    per_rollout: dict[int, dict[str, float]] = defaultdict(dict)
    step_start: dict[int, float] = {}
    for e in events:
        if e["kind"] != Kind.PHASE or e.get("rollout_id") is None:
            continue
        rid = e["rollout_id"]
        if e["state"] == PHASE_START and e["name"] == Phase.GENERATE:
            step_start[rid] = e["ts"]
        if e["state"] == PHASE_END:
            per_rollout[rid][e["name"]] = per_rollout[rid].get(e["name"], 0.0) + e["seconds"]
    rids = sorted(step_start)
    steps = [step_start[b] - step_start[a] for a, b in zip(rids, rids[1:], strict=False)]
    outside = [steps[i] - sum(per_rollout[rids[i]].values()) for i in range(len(steps))]
    names = sorted({n for phases in per_rollout.values() for n in phases})
    medians = {n: statistics.median([p[n] for p in per_rollout.values() if n in p])
               for n in names}
    return medians, statistics.median(steps), statistics.median(outside)


def time_to_reward(events: list[dict], target: float) -> float | None:
    t0 = next(e["ts"] for e in events
              if e["kind"] == Kind.PHASE and e["name"] == Phase.GENERATE)
    rewards = [(e["ts"], e["metrics"][Metric.REWARD]) for e in events
               if e["kind"] == Kind.METRICS and e.get("step_key") == StepKey.ROLLOUT
               and Metric.REWARD in e["metrics"]]
    for i in range(2, len(rewards)):
        if statistics.mean(r for _, r in rewards[i - 2:i + 1]) >= target:
            return rewards[i][0] - t0
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="tiny-cpu")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    ns = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    events, wall, status = run(ns.preset, parse_sets(ns.sets))
    if status.get("state") != State.SUCCEEDED:
        print(f"run did not succeed: {status.get('state')}: {status.get('detail')}")
        return 1
    medians, step, outside = phase_table(events)
    print(f"{ns.preset}: whole run {wall:.1f} s wall (Ray start included)")
    print(f"median rollout step {step * 1000:.0f} ms")
    print(f"{'phase':<18}{'median ms':>10}{'share':>8}")
    for name, seconds in sorted(medians.items(), key=lambda kv: -kv[1]):
        print(f"{name:<18}{seconds * 1000:>10.1f}{seconds / step:>8.1%}")
    share = outside / step
    print(f"driver outside phases: {outside * 1000:.1f} ms/step = {share:.1%} of the step "
          f"(goal <= {GOAL_DRIVER_SHARE:.0%}: {share / GOAL_DRIVER_SHARE:.2f}x the budget)")
    reached = time_to_reward(events, TARGET_REWARD)
    rewards = [e["metrics"][Metric.REWARD] for e in events if e["kind"] == Kind.METRICS
               and e.get("step_key") == StepKey.ROLLOUT and Metric.REWARD in e["metrics"]]
    print(f"reward first 3 {statistics.mean(rewards[:3]):.3f} -> last 3 "
          f"{statistics.mean(rewards[-3:]):.3f}")
    print("time to reward 0.8: " + (f"{reached:.1f} s after the first generate"
                                    if reached is not None else "not reached"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
