"""A stand-in driver that writes a realistic event stream slowly (PPODECK_DRIVER_MODULE seam).

SLOW_DRIVER_ROLLOUTS rollouts, SLOW_DRIVER_DELAY seconds apart, then "succeeded". Used where
the fault is about a front end (the TUI), not the engine: the run must simply keep going.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ppodeck.engine.run.events import EventWriter
from ppodeck.engine.run.rundir import RunDir, write_status


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    rundir = RunDir(parser.parse_args().run_dir)
    rollouts = int(os.environ.get("SLOW_DRIVER_ROLLOUTS", "10"))
    delay = float(os.environ.get("SLOW_DRIVER_DELAY", "0.5"))
    write_status(rundir, state="running", pid=os.getpid(), pgid=os.getpgid(0),
                 num_rollout=rollouts)
    with EventWriter(rundir.events_jsonl) as writer:
        writer.emit("status", state="running", detail="")
        for rollout_id in range(rollouts):
            emit_rollout(writer, rollout_id)
            write_status(rundir, rollout_id=rollout_id)
            time.sleep(delay)
        writer.emit("status", state="succeeded", detail="all rollouts done")
    write_status(rundir, state="succeeded", detail="all rollouts done", ended=time.time())
    return 0


def emit_rollout(writer: EventWriter, rollout_id: int) -> None:
    for name in ("generate", "critic_train", "actor_train", "update_weights"):
        writer.emit("phase", name=name, state="start", rollout_id=rollout_id)
        writer.emit("phase", name=name, state="end", rollout_id=rollout_id, seconds=0.01)
    for step in range(4):
        writer.emit("metrics", step_key="train/step", step=rollout_id * 4 + step,
                    rollout_id=rollout_id, role="critic",
                    metrics={"train/critic-value_loss": 1.0 / (1 + rollout_id + step)})
    writer.emit("offload", model="critic", direction="offload", where="cpu", bytes=1 << 20,
                seconds=0.01, gbps=0.1, noop=False)
    writer.emit("metrics", step_key="rollout/step", step=rollout_id, rollout_id=rollout_id,
                metrics={"rollout/raw_reward": rollout_id / 10, "rollout/response_len/mean": 3})


if __name__ == "__main__":
    sys.exit(main())
