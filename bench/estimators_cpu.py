"""PPO vs GRPO on tiny-cpu: two real runs (launcher + driver + Ray + Megatron) in one invocation.

Runs the preset with --advantage-estimator ppo, then with grpo (same seed, same data; one after
the other, so they do not share the 2 CPU cores), and prints for each: the mean
rollout/raw_reward of the first and last 5 rollouts, the whole run's wall time, the median
rollout step, and what ran (critic_train phases, critic worker processes, critic metrics).

Usage: .venv/bin/python bench/estimators_cpu.py [--set num-rollout=40] [--estimators ppo,grpo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engine_cpu import run as run_driver  # noqa: E402
from ppodeck.engine.config import BY_NAME, check, coerce  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.vocabulary import PHASE_START, Kind, Metric, Phase, State, StepKey  # noqa: E402

WINDOW = 5  # rollouts averaged at each end


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    values = {}
    for pair in pairs:
        name, _, raw = pair.partition("=")
        flag = BY_NAME["--" + name.lstrip("-")]
        values[flag.dest] = coerce(flag, raw)
    return values


def run(preset: str, overrides: dict[str, Any]) -> tuple[list[dict], float, dict]:
    """engine_cpu's real driver run, after check() accepts the config."""
    config = resolve_preset(load_preset(preset)).with_values(**overrides)
    report = check(config)
    if not report.ok:
        raise SystemExit(f"{overrides}: check() refuses it: "
                         + "; ".join(f"{i.code}: {i.message}" for i in report.errors))
    return run_driver(preset, overrides)


def summarize(events: list[dict]) -> dict[str, Any]:
    rollouts = [e["metrics"] for e in events
                if e["kind"] == Kind.METRICS and e.get("step_key") == StepKey.ROLLOUT]
    rewards = [m[Metric.REWARD] for m in rollouts if Metric.REWARD in m]
    starts = {e["rollout_id"]: e["ts"] for e in events if e["kind"] == Kind.PHASE
              and e["name"] == Phase.GENERATE and e["state"] == PHASE_START}
    ids = sorted(starts)
    steps = [starts[b] - starts[a] for a, b in zip(ids, ids[1:], strict=False)]
    pids = next((e.get("pids", {}) for e in events if e["kind"] == Kind.LOG and e.get("pids")),
                {})
    critic_metrics = {k for e in events if e["kind"] == Kind.METRICS
                      for k in e["metrics"] if "critic" in k}
    return {
        "rollouts": len(rewards),
        "first": statistics.fmean(rewards[:WINDOW]) if rewards else float("nan"),
        "last": statistics.fmean(rewards[-WINDOW:]) if rewards else float("nan"),
        "step": statistics.median(steps) if steps else float("nan"),
        "critic_phases": sum(1 for e in events if e["kind"] == Kind.PHASE
                             and e["name"] == Phase.CRITIC_TRAIN and e["state"] == PHASE_START),
        "critic_workers": sorted(name for name in pids if name.startswith("critic")),
        "critic_metrics": len(critic_metrics),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="tiny-cpu")
    parser.add_argument("--estimators", default="ppo,grpo")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    ns = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    base = parse_sets(ns.sets)
    rows = {}
    for estimator in ns.estimators.split(","):
        events, wall, status = run(ns.preset, {**base, "advantage_estimator": estimator})
        if status.get("state") != State.SUCCEEDED:
            print(f"{estimator}: run did not succeed: {status.get('state')}: "
                  f"{status.get('detail')}")
            return 1
        rows[estimator] = {**summarize(events), "wall": wall}
    print(f"{ns.preset} {' '.join(ns.sets)}: mean rollout/raw_reward of the first and last "
          f"{WINDOW} rollouts")
    print(f"{'estimator':<10}{'rollouts':>9}{'first':>8}{'last':>8}{'wall s':>8}"
          f"{'step ms':>9}{'critic phases':>15}{'critic workers':>16}{'critic metrics':>16}")
    for name, r in rows.items():
        print(f"{name:<10}{r['rollouts']:>9}{r['first']:>8.3f}{r['last']:>8.3f}"
              f"{r['wall']:>8.1f}{r['step'] * 1000:>9.0f}{r['critic_phases']:>15}"
              f"{len(r['critic_workers']):>16}{r['critic_metrics']:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
