"""The tiny model-family presets against tiny-cpu: does each layout learn the copy-digit task?

Three real CPU runs (Ray + Megatron + PPO), same seed and settings except the model layout:
  tiny-cpu         Llama layout (no biases, default RoPE)
  tiny-qwen2-cpu   Qwen2 / Qwen2.5 layout: q/k/v biases (--add-qkv-bias), RoPE base 1e6
  tiny-llama3-cpu  Llama 3.1 / 3.2 RoPE: base 5e5, frequency scaling factor 32
Prints rollout/raw_reward's mean over the first and last 3 rollouts and each run's wall time.

Usage: .venv/bin/python bench/model_families_cpu.py [--rollouts 60] [--presets a,b]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppodeck.engine.launch.local import prepare_run, start_driver  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.events import read_events  # noqa: E402
from ppodeck.engine.run.rundir import read_status  # noqa: E402

PRESETS = ("tiny-cpu", "tiny-qwen2-cpu", "tiny-llama3-cpu")


def run(tmp: Path, preset: str, rollouts: int) -> dict:
    """One run of `preset`: its final state, reward per rollout and wall time."""
    config = resolve_preset(load_preset(preset)).with_values(num_rollout=rollouts)
    rundir = prepare_run(config, preset, run_dir=tmp / preset)
    env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp")}
    start = time.perf_counter()
    proc = start_driver(rundir, env=env)
    proc.wait(timeout=3600)
    seconds = time.perf_counter() - start
    events, _ = read_events(rundir.events_jsonl)
    rewards = [e["metrics"]["rollout/raw_reward"] for e in events
               if e["kind"] == "metrics" and e.get("step_key") == "rollout/step"
               and e["metrics"].get("rollout/raw_reward") is not None]
    return {"state": read_status(rundir)["state"], "rewards": rewards, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=60)
    parser.add_argument("--presets", default=",".join(PRESETS))
    args = parser.parse_args()
    print(f"{'preset':<18} {'state':<10} {'first 3':>8} {'last 3':>8} {'wall s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            result = run(Path(tmp), preset, args.rollouts)
            rewards = result["rewards"]
            first = statistics.mean(rewards[:3]) if rewards else float("nan")
            last = statistics.mean(rewards[-3:]) if rewards else float("nan")
            print(f"{preset:<18} {result['state']:<10} {first:>8.3f} {last:>8.3f} "
                  f"{result['seconds']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
