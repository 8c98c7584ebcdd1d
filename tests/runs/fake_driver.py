"""A stand-in for engine.driver in launch tests: `PPODECK_DRIVER_MODULE=tests.runs.fake_driver`.

FAKE_DRIVER_MODE picks the behaviour: succeed (a few events, then succeeded), wait (runs until
SIGINT, with a grandchild in its process group, then stopped), stubborn (ignores SIGINT; only
SIGKILL ends it), fail (failed, exit 1), crash (exit 1 without a final status).
It records its argv in <run-dir>/argv.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ppodeck.engine.run.events import EventWriter
from ppodeck.engine.run.rundir import RunDir, write_status


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True, type=Path)
    rundir = RunDir(parser.parse_args().run_dir)
    (rundir.path / "argv.json").write_text(json.dumps(sys.argv[1:]))
    mode = os.environ.get("FAKE_DRIVER_MODE", "succeed")
    # Handlers go in before "running" is written: tests send SIGINT as soon as they see it.
    signal.signal(signal.SIGINT, signal.SIG_IGN if mode == "stubborn" else _note_interrupt)
    write_status(rundir, state="running", pid=os.getpid(), pgid=os.getpgid(0), rollout_id=0)
    with EventWriter(rundir.events_jsonl) as writer:
        writer.emit("status", state="running", detail="")
        return MODES[mode](rundir, writer)


def succeed(rundir: RunDir, writer: EventWriter) -> int:
    for rollout_id in range(2):
        writer.emit("phase", name="generate", state="start", rollout_id=rollout_id)
        writer.emit("metrics", step_key="rollout/step", step=rollout_id, rollout_id=rollout_id,
                    metrics={"rollout/raw_reward": 0.5 + rollout_id})
        writer.emit("phase", name="generate", state="end", rollout_id=rollout_id, seconds=0.01)
        writer.emit("metrics", step_key="train/step", step=rollout_id, rollout_id=rollout_id,
                    metrics={"train/critic-value_loss": 0.25 / (rollout_id + 1)})
    writer.emit("status", state="succeeded", detail="all rollouts done")
    write_status(rundir, state="succeeded", detail="all rollouts done", rollout_id=1,
                 ended=time.time())
    return 0


_interrupted: list[int] = []


def _note_interrupt(signum: int, frame: object) -> None:
    _interrupted.append(signum)


def wait(rundir: RunDir, writer: EventWriter) -> int:
    # a grandchild in the same process group: a stop must reach it too
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (rundir.path / "grandchild.pid").write_text(str(child.pid))
    writer.emit("phase", name="generate", state="start", rollout_id=0)
    deadline = time.monotonic() + 30  # never outlive a broken test
    while not _interrupted and time.monotonic() < deadline:
        time.sleep(0.02)
    child.kill()  # already gone after a group SIGINT; this covers the deadline
    child.wait()
    writer.emit("status", state="stopped", detail="stopped by request after the current rollout")
    write_status(rundir, state="stopped", detail="stopped by request after the current rollout",
                 ended=time.time())
    return 0


def stubborn(rundir: RunDir, writer: EventWriter) -> int:
    writer.emit("phase", name="actor_train", state="start", rollout_id=0)
    time.sleep(30)  # never outlive a broken test
    return 0


def fail(rundir: RunDir, writer: EventWriter) -> int:
    print("Traceback (most recent call last): fake failure", flush=True)
    writer.emit("status", state="failed", detail="ValueError: fake failure")
    write_status(rundir, state="failed", detail="ValueError: fake failure", ended=time.time())
    return 1


def crash(rundir: RunDir, writer: EventWriter) -> int:
    return 1


MODES = {"succeed": succeed, "wait": wait, "stubborn": stubborn, "fail": fail, "crash": crash}

if __name__ == "__main__":
    sys.exit(main())
