"""A reward function the engine does not know, against the built-in task, on tiny-cpu.

Two real tiny-cpu runs (Ray + Megatron + PPO on CPU), same seed and settings:
  built-in  --rm-type copy-digit (answer with the prompt's digit, 4 times)
  custom    --custom-rm-path next_digit.score (bench/user_code/next_digit.py: answer with the
            NEXT digit, 4 times), found from the launch directory as a user's module would be
Prints rollout/raw_reward per rollout side by side, the mean of the first and last 3 rollouts,
and how many times the custom function was called against the samples generated.

Usage: .venv/bin/python bench/custom_reward_cpu.py [--rollouts 60]
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

USER_CODE = ROOT / "bench" / "user_code"
CUSTOM = {"custom_rm_path": "next_digit.score"}


def run_tiny(tmp: Path, name: str, rollouts: int, **overrides: object) -> dict:
    """One tiny-cpu run; its state, reward series, wall time and the custom function's calls."""
    config = resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=rollouts,
                                                                 **overrides)
    rundir = prepare_run(config, "tiny-cpu", run_dir=tmp / name)
    calls = tmp / f"{name}-calls"
    calls.mkdir()
    env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PPODECK_CODE_DIR": str(USER_CODE),
           "NEXT_DIGIT_CALLS_DIR": str(calls)}
    start = time.perf_counter()
    proc = start_driver(rundir, env=env)
    proc.wait()
    events, _ = read_events(rundir.events_jsonl)
    rewards = [e["metrics"]["rollout/raw_reward"] for e in events
               if e["kind"] == "metrics" and e.get("step_key") == "rollout/step"
               and "rollout/raw_reward" in e["metrics"]]
    indices = [int(line) for f in calls.glob("*.txt") for line in f.read_text().split()]
    return {"state": read_status(rundir).get("state"), "detail": read_status(rundir)
            .get("detail"), "rewards": rewards, "seconds": time.perf_counter() - start,
            "calls": indices}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=60)
    parser.add_argument("--custom-only", action="store_true", help="skip the built-in run")
    ns = parser.parse_args()
    os.environ.setdefault("RAY_TMPDIR", "/tmp")
    with tempfile.TemporaryDirectory() as tmp:
        built_in = ({"state": "succeeded", "rewards": [], "calls": []} if ns.custom_only
                    else run_tiny(Path(tmp), "built-in", ns.rollouts))
        custom = run_tiny(Path(tmp), "custom", ns.rollouts, **CUSTOM)
    samples = 32 * 4  # tiny-cpu: 32 prompts x 4 samples per rollout
    print(f"{'rollout':>7}  {'built-in copy-digit':>19}  {'custom next_digit':>17}")
    for i in range(max(len(built_in["rewards"]), len(custom["rewards"]))):
        cells = [f"{run['rewards'][i]:.3f}" if i < len(run["rewards"]) else "-"
                 for run in (built_in, custom)]
        print(f"{i:>7}  {cells[0]:>19}  {cells[1]:>17}")
    for name, run in (("built-in", built_in), ("custom", custom)):
        r = run["rewards"]
        if not r and name == "built-in" and ns.custom_only:
            continue
        print(f"{name}: {run['state']} in {run['seconds']:.0f} s; reward first 3 "
              f"{statistics.fmean(r[:3]):.3f} -> last 3 {statistics.fmean(r[-3:]):.3f}"
              if len(r) >= 3 else f"{name}: {run['state']} ({run['detail']})")
    calls = custom["calls"]
    expected = samples * len(custom["rewards"])
    print(f"custom function calls: {len(calls)} for {expected} samples generated; every index "
          f"once: {sorted(calls) == list(range(expected))}")
    return 0 if built_in["state"] == custom["state"] == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main())
