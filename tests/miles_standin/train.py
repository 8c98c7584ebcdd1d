"""Stands in for miles' train.py in the tests of `ppodeck run --engine miles`.

It is NOT miles: it takes the argv PPO Deck passes to miles' train.py, joins the Ray cluster it
runs on (as miles' train.py does, through RAY_ADDRESS), runs one Ray task per rollout, and
writes a --dump-details directory in miles' layout (dashboard/meta.json, metrics.jsonl,
phases/<hour>.jsonl, gpu_util/<hour>.jsonl, rollout_data is left out) so the run is watched as
a real one would be. What it received is printed as `STANDIN_ARGV <json>` and
`STANDIN_ENV <json>` lines. Standard library and ray only.

Knobs (environment): STANDIN_ROLLOUT_S seconds per rollout (default 0.2), STANDIN_EXIT exit
code after the last rollout (default 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    print("STANDIN_ARGV " + json.dumps(sys.argv[1:]), flush=True)
    shown = ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NVLS_ENABLE", "MASTER_ADDR",
             "no_proxy", "PYTHONUNBUFFERED")
    seen = {k: os.environ.get(k) for k in shown}
    seen["WANDB_API_KEY set"] = bool(os.environ.get("WANDB_API_KEY"))  # never its value
    print("STANDIN_ENV " + json.dumps(seen), flush=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump-details", required=True)
    parser.add_argument("--use-miles-dashboard", action="store_true")
    parser.add_argument("--num-rollout", type=int, default=2)
    args, _ = parser.parse_known_args()
    import ray

    ray.init()  # RAY_ADDRESS: the cluster this job runs on
    dashboard = Path(args.dump_details) / "dashboard"
    dashboard.mkdir(parents=True, exist_ok=True)
    (dashboard / "meta.json").write_text(json.dumps(
        {"run_name": "standin", "start_ts": time.time(), "args": {"colocate": True},
         "schema_version": 1}))
    per_rollout = float(os.environ.get("STANDIN_ROLLOUT_S", "0.2"))
    for rollout_id in range(args.num_rollout):
        t0 = time.time()
        reward = ray.get(ray.remote(_reward).remote(rollout_id))
        time.sleep(per_rollout)
        t1 = time.time()
        _append(dashboard / "phases" / _hour(t1), {"name": "rollout", "t0": t0, "t1": t1,
                                                   "node": "127.0.0.1", "gpus": [], "rank": -1,
                                                   "role": "rollout_manager"})
        _append(dashboard / "gpu_util" / _hour(t1), {"ts": t1, "node": "127.0.0.1", "gpu": 0,
                                                     "util": 50, "mem_mb": 1000, "power_w": 1})
        _append(dashboard / "metrics.jsonl", {"ts": t1, "step_key": "rollout/step",
                                              "step": rollout_id,
                                              "metrics": {"rollout/raw_reward": reward}})
        print(f"rollout {rollout_id}: reward {reward}", flush=True)
    ray.shutdown()
    return int(os.environ.get("STANDIN_EXIT", "0"))


def _reward(rollout_id: int) -> float:
    return 0.1 * (rollout_id + 1)


def _hour(ts: float) -> str:
    return time.strftime("%Y%m%d_%H", time.gmtime(ts)) + ".jsonl"


def _append(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main())
