"""A Ray Job's entrypoint, on the cluster: `python -m ppodeck.engine.driver.job_entry --run-id ID`.

It writes the config the job was given into a run directory there and runs the driver in this
process, while a thread prints every event line to stdout as `PPODECK_EVENT <seq> <json>`; the
follower on the launching machine (engine/launch/jobs.py) mirrors them into the local run
directory. LIGHT at import: the engine's requirements are checked before the driver is imported,
so a cluster Python without them fails the run by name, not with a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..launch.jobs import CONFIG_ENV, EVENT_PREFIX, SUBMIT_PYTHON_ENV
from ..run.rundir import RunDir, write_status
from ..vocabulary import Kind, State


def run_job(run_id: str) -> int:
    """On the cluster: a run directory from the submitted config, the driver in this process,
    and every event echoed to stdout (the log stream) with its sequence number."""
    root = Path(os.environ.get("PPODECK_RUNS_DIR") or Path(tempfile.gettempdir()) /
                "ppodeck-jobs")
    rundir = RunDir(root / run_id)
    if rundir.path.exists():  # an earlier job of this id on a machine that kept its temp dir
        rundir = RunDir(root / f"{run_id}.{int(time.time())}")
    rundir.path.mkdir(parents=True)
    rundir.config_toml.write_text(os.environ[CONFIG_ENV])
    print(f"ppodeck: job run directory {rundir.path}", flush=True)
    done = threading.Event()
    relay = threading.Thread(target=relay_events, args=(rundir.events_jsonl, done, _emit),
                             daemon=True)
    relay.start()
    try:
        missing = missing_engine_requirements()
        if missing:  # a named failure in the follower's status, not a traceback in the job log
            return _fail_job(rundir, missing_requirements_message(missing))
        from ..driver import ppo as driver

        return driver.run(rundir)
    finally:
        done.set()
        relay.join(timeout=30)


# (module the engine imports, the requirement that brings it), as pyproject.toml pins them (a test
# keeps the two equal)
ENGINE_REQUIREMENTS = (
    ("torch", "torch==2.13.0"), ("megatron.core", "megatron-core==0.16.1"),
    ("ray", "ray[default]==2.60.0"), ("transformers", "transformers>=5,<6"),
    ("accelerate", "accelerate"), ("safetensors", "safetensors"), ("gguf", "gguf"),
    ("datasets", "datasets>=4"), ("huggingface_hub", "huggingface_hub"), ("sympy", "sympy"),
    ("numpy", "numpy"), ("psutil", "psutil>=5.9"), ("platformdirs", "platformdirs>=4"),
    ("tomlkit", "tomlkit>=0.13"),
)


def missing_engine_requirements() -> list[str]:
    """The requirements whose modules this Python cannot import (found without importing them)."""
    import importlib.util

    missing = []
    for module, requirement in ENGINE_REQUIREMENTS:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            missing.append(requirement)
    return missing


def missing_requirements_message(missing: list[str]) -> str:
    quoted = " ".join(f"'{req}'" for req in missing)
    return (f"the cluster's Python ({sys.executable}) lacks what the PPO engine imports: "
            f"{', '.join(missing)}. Install it on every node (pip install {quoted}), or set "
            f"{SUBMIT_PYTHON_ENV} to a Python there that has them")


def _fail_job(rundir: RunDir, detail: str) -> int:
    from ..run.events import EventWriter

    print(f"ppodeck: {detail}", flush=True)
    with EventWriter(rundir.events_jsonl) as writer:
        writer.emit(Kind.STATUS, state=State.FAILED, detail=detail)
    write_status(rundir, state=State.FAILED, detail=detail, ended=time.time())
    return 3  # the CLI's "run failed"


def _emit(seq: int, line: str) -> None:
    sys.stdout.write(f"{EVENT_PREFIX}{seq} {line}\n")
    sys.stdout.flush()


def relay_events(path: Path, done: threading.Event, emit: Callable[[int, str], None],
                 poll_s: float = 0.05) -> int:
    """Emit each complete line of `path` once, numbered from 0, until `done` and drained."""
    seq, offset, pending = 0, 0, b""
    while True:
        finished = done.is_set()
        try:
            with open(path, "rb") as file:
                file.seek(offset)
                chunk = file.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                emit(seq, line.decode(errors="replace"))
                seq += 1
        if finished:
            return seq
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.driver.job_entry")
    parser.add_argument("--run-id", required=True)
    return run_job(parser.parse_args(argv).run_id)


if __name__ == "__main__":
    sys.exit(main())
