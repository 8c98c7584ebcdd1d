"""Ray Jobs: submit a run to a cluster and keep its local run directory up to date.

LIGHT at import (the Ray Job SDK is imported inside the functions that use it).

Three parts, each a plain function:
- `submit()` (the launcher's side): `JobSubmissionClient.submit_job` with the driver as the
  entrypoint, the run id as submission_id, metadata naming the preset and its config hash, and
  a runtime_env carrying the `engine` package (py_modules) and the environment variables. Then
  a local follower process keeps the run directory current; status.json records the job.
- `python -m ppodeck.engine.driver.job_entry --run-id ID` (the job's entrypoint, on the cluster,
  beside the driver it runs): see engine/driver/job_entry.py.
- `python -m ppodeck.engine.launch.jobs follow --run-dir D` (the follower, local): reads the
  job's log
  stream (`tail_job_logs`, reconnecting while `get_job_status` is not terminal; after each reconnect
  the whole log so far is read first) and appends each event exactly once, by its sequence
  number, to the local events.jsonl; the job's final state ends up in status.json.

Auth: headers for the Jobs API come from PPODECK_RAY_JOB_HEADERS (a JSON object, e.g.
{"Authorization": "Bearer ..."}), never from a file in the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ppodeck import IMPORT_ROOT

from ..run.rundir import RunDir, read_status, update_status, write_status
from ..vocabulary import FINAL_STATES, Kind, State

HEADERS_ENV = "PPODECK_RAY_JOB_HEADERS"
# the cluster's Python for the entrypoint ("python" on the cluster's PATH unless set)
SUBMIT_PYTHON_ENV = "PPODECK_SUBMIT_PYTHON"
CONFIG_ENV = "PPODECK_JOB_CONFIG"
EVENT_PREFIX = "PPODECK_EVENT "
TERMINAL_JOB = {"SUCCEEDED": State.SUCCEEDED, "FAILED": State.FAILED, "STOPPED": State.STOPPED}
ENGINE_DIR = Path(__file__).resolve().parents[1]
RECONNECT_S = 1.0
GIVE_UP_S = 600.0  # the follower stops after this long without an answer from the cluster


class JobError(Exception):
    """str() is the user-facing message, with a fix."""


def auth_headers(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    raw = (os.environ if environ is None else environ).get(HEADERS_ENV)
    if not raw:
        return None
    try:
        headers = json.loads(raw)
    except ValueError as exc:
        raise JobError(f"{HEADERS_ENV} is not JSON ({exc}); set it to an object such as "
                       '{"Authorization": "Bearer TOKEN"}') from exc
    if not isinstance(headers, dict):
        raise JobError(f"{HEADERS_ENV} must be a JSON object of header names to values")
    return {str(k): str(v) for k, v in headers.items()}


def client(address: str) -> Any:  # noqa: ANN401 - ray.job_submission.JobSubmissionClient
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address, headers=auth_headers())
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise JobError(f"cannot reach the Ray Jobs API at {address}: {exc}. Fix: pass the "
                       "dashboard address (http://HEAD:8265) of a running cluster; an auth "
                       f"token goes in {HEADERS_ENV}.") from exc


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entrypoint(run_id: str, environ: Mapping[str, str] | None = None) -> str:
    python = (os.environ if environ is None else environ).get(SUBMIT_PYTHON_ENV) or "python"
    return f"{python} -m ppodeck.engine.driver.job_entry --run-id {run_id}"


# PPODECK_* variables that only mean something on this machine (or carry the auth token)
_LOCAL_ONLY = {"PPODECK_RUNS_DIR", "PPODECK_HOME", "PPODECK_CONFIG_DIR", "PPODECK_PRESET_PATH",
               "PPODECK_STATE_DIR", SUBMIT_PYTHON_ENV, HEADERS_ENV, "PPODECK_DRIVER_MODULE",
               "PPODECK_CODE_DIR"}  # the launch directory: its code travels in py_modules


def forwarded_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's switches set here (PPODECK_FUSED, PPODECK_TEST_RAY_GPUS, ...) and the HF
    offline switches travel with the job; the launcher names them before submitting."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if (k.startswith("PPODECK_") and k not in _LOCAL_ONLY)
            or k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}


def runtime_env(config_text: str, env: Mapping[str, str], staging: Path) -> dict[str, Any]:
    """The code (the engine package, and the user code the config names: reward functions,
    filters) and the variables the driver needs on the cluster. The Jobs SDK uploads only
    directories as py_modules (each imported by its own name), all made or named in `staging`
    (a fresh directory the caller removes after the upload):
    - the engine goes as a `ppodeck` package holding only `ppodeck.engine` (the CLI and TUI
      stay here);
    - a user's package directory goes as it is; a single-file module `m.py` goes as a package
      `m` whose `__init__.py` is that file, so `import m` gives the same code on the cluster
      (its sibling files do not travel: put them in a package to ship them)."""
    modules = [_engine_package(staging)]
    for path in user_code_files(config_text):
        modules.append(_as_package(Path(path), staging) if path.endswith(".py") else path)
    return {"py_modules": modules,
            "env_vars": {"PYTHONUNBUFFERED": "1", **env, CONFIG_ENV: config_text}}


def _engine_package(staging: Path) -> str:
    """`ppodeck/` with its `__init__.py` and a copy of the engine this process runs (a
    checkout's engine/ or a wheel's ppodeck/engine, the built-in presets' link followed)."""
    package = staging / "ppodeck"
    package.mkdir()
    shutil.copy2(IMPORT_ROOT / "ppodeck" / "__init__.py", package / "__init__.py")
    shutil.copytree(ENGINE_DIR, package / "engine",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(package)


def _as_package(module_file: Path, staging: Path) -> str:
    package = staging / module_file.stem
    package.mkdir()
    shutil.copy2(module_file, package / "__init__.py")
    return str(package)


def user_code_files(config_text: str) -> list[str]:
    """The modules behind --custom-rm-path and friends, found from this directory and
    PYTHONPATH as the engine finds them (engine/config/code_paths.py): each top-level package
    directory or .py file, so the cluster's workers import them too."""
    from ..config.code_paths import ENGINE_CODE_FLAGS, files_to_ship
    from ..host.machine import environment
    from ..presets import config_from_toml

    config = config_from_toml(config_text, Path("config.toml"))
    return files_to_ship([config.get(d) for d in ENGINE_CODE_FLAGS if config.get(d)],
                         environment())


def submit(rundir: RunDir, preset_name: str, address: str,
           env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Submit the run (its config.toml) as a Ray job and start the local follower."""
    config_text = rundir.config_toml.read_text()
    jobs = client(address)
    try:
        with tempfile.TemporaryDirectory(prefix="ppodeck-user-code-") as staging:
            jobs.submit_job(entrypoint=entrypoint(rundir.id), submission_id=rundir.id,
                            runtime_env=runtime_env(config_text, env or {}, Path(staging)),
                            metadata={"ppodeck_preset": preset_name,
                                      "ppodeck_config_hash": config_hash(config_text)})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise JobError(f"the cluster at {address} refused the job: {exc}") from exc
    write_status(rundir, state=State.STARTING, detail=f"submitted to {address}",
                 job={"address": address, "submission_id": rundir.id, "status": "PENDING"},
                 started=time.time())
    return start_follower(rundir)


def start_follower(rundir: RunDir) -> subprocess.Popen[bytes]:
    """The local process that mirrors the job into the run directory; it stands for the
    driver in status.json (pid), so `runs ls` sees a run whose follower died as lost."""
    with open(rundir.driver_log, "ab") as log:
        popen = subprocess.Popen(  # an argv list; its own session: closing a terminal is fine
            [sys.executable, "-m", "ppodeck.engine.launch.jobs", "follow", "--run-dir",
             str(rundir.path.resolve())], cwd=IMPORT_ROOT, stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    import socket

    write_status(rundir, pid=popen.pid, pgid=popen.pid, host=socket.gethostname())
    return popen


def revive_follower(rundir: RunDir) -> bool:
    """A submitted run whose follower died (reboot, kill) while the job may still run: start a
    new one; it reads the whole job log first, so no event is lost or doubled."""
    status = read_status(rundir)
    if not status.get("job") or status.get("state") != State.LOST:
        return False
    start_follower(rundir)
    return True


def stop(rundir: RunDir, status: Mapping[str, Any]) -> str:
    """`ppodeck stop` for a submitted run: the Jobs API stops it (Ray signals the driver)."""
    job = status["job"]
    try:
        stopped = client(job["address"]).stop_job(job["submission_id"])
    except (ConnectionError, RuntimeError, ValueError) as exc:
        return f"could not stop job {job['submission_id']} at {job['address']}: {exc}"
    update_status(rundir, lambda s: s if s.get("state") in FINAL_STATES else
                  {**s, "state": State.STOPPING, "detail": "stop requested through the Jobs API"})
    if not stopped:
        return f"job {job['submission_id']} had already ended; nothing to stop"
    return f"asked the cluster at {job['address']} to stop job {job['submission_id']}"


# ---------------------------------------------------------------------------- the follower


class EventMirror:
    """Appends relayed events to the local events.jsonl exactly once, in order."""

    def __init__(self, rundir: RunDir) -> None:
        self.rundir = rundir
        self.next_seq = _count_lines(rundir.events_jsonl)
        self.partial = ""
        self.gaps = 0

    def feed(self, text: str) -> int:
        """Take a piece of the job's log (lines may be cut anywhere); returns events added."""
        *lines, self.partial = (self.partial + text).split("\n")
        return self.apply(lines)

    def apply(self, lines: Iterable[str]) -> int:
        added: list[str] = []
        for line in lines:
            seq, event = parse_event_line(line)
            if seq is None or seq < self.next_seq + len(added):
                continue  # a log line, or an event already mirrored (a re-read after reconnect)
            if seq > self.next_seq + len(added):
                self.gaps += 1  # never skip one: the next full read of the log fills it
                break
            added.append(event)
        if added:
            with open(self.rundir.events_jsonl, "a") as out:
                out.writelines(e + "\n" for e in added)
            self.next_seq += len(added)
            self._status_from(added)
        return len(added)

    def reset_partial(self) -> None:
        self.partial = ""

    def _status_from(self, events: list[str]) -> None:
        fields: dict[str, Any] = {}
        for raw in events:
            event = json.loads(raw)
            if event.get("kind") == Kind.STATUS and event.get("state"):
                fields.update(state=event["state"], detail=event.get("detail", ""))
            if isinstance(event.get("rollout_id"), int):
                fields["rollout_id"] = event["rollout_id"]
        if fields:
            write_status(self.rundir, **fields)


def complete_lines(text: str) -> list[str]:
    """The lines of a log read so far, without a last line still being written."""
    lines = text.split("\n")
    return lines[:-1]


def parse_event_line(line: str) -> tuple[int | None, str]:
    if not line.startswith(EVENT_PREFIX):
        return None, ""
    seq, _, event = line[len(EVENT_PREFIX):].partition(" ")
    try:  # a garbled line is skipped; the sequence gap then makes the next full read fill it
        whole = seq.isdigit() and isinstance(json.loads(event), dict)
    except ValueError:
        whole = False
    return (int(seq), event) if whole else (None, "")


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.strip())
    except FileNotFoundError:
        return 0


def follow(rundir: RunDir, poll_s: float = RECONNECT_S) -> str:
    """Mirror the job until it is terminal; returns the final local state."""
    import asyncio

    job = read_status(rundir)["job"]
    submission_id = job["submission_id"]
    mirror = EventMirror(rundir)
    jobs, unreachable_since = None, None
    while True:
        try:
            jobs = jobs or client(job["address"])
            status = _job_status(jobs, submission_id, rundir)
            # catch up on everything logged so far (covers a cut stream), then tail the rest
            mirror.reset_partial()
            mirror.apply(complete_lines(jobs.get_job_logs(submission_id)))
            unreachable_since = None
            if status in TERMINAL_JOB:
                return finish(rundir, jobs, submission_id, status)
            asyncio.run(_tail(jobs, submission_id, mirror))
        except Exception as exc:  # noqa: BLE001 - a dropped stream or cluster: retry below
            print(f"job {submission_id}: {type(exc).__name__}: {exc}; reconnecting", flush=True)
            unreachable_since = unreachable_since or time.monotonic()
            if time.monotonic() - unreachable_since > GIVE_UP_S:
                write_status(rundir, state=State.LOST, ended=time.time(),
                             detail=f"no answer from the cluster at {job['address']} for "
                                    f"{GIVE_UP_S:.0f} s; the job may still run there: "
                                    f"`ppodeck attach {rundir.id}` follows it again")
                return State.LOST
        time.sleep(poll_s)


async def _tail(jobs: Any, submission_id: str, mirror: EventMirror) -> None:  # noqa: ANN401
    mirror.reset_partial()
    gaps = mirror.gaps
    async for chunk in jobs.tail_job_logs(submission_id):
        mirror.feed(chunk)
        if mirror.gaps > gaps:
            return  # the stream skipped something: reconnect, reading the whole log first


def _job_status(jobs: Any, submission_id: str, rundir: RunDir) -> str:  # noqa: ANN401
    status = str(jobs.get_job_status(submission_id)).rsplit(".", 1)[-1]
    update_status(rundir, lambda s: {**s, "job": {**s.get("job", {}), "status": status}})
    return status


def finish(rundir: RunDir, jobs: Any, submission_id: str, job_status: str) -> str:  # noqa: ANN401
    """The job's end decides the local final state; the driver's own words (its last status
    event) are kept when it recorded one."""
    info = jobs.get_job_info(submission_id)
    local = read_status(rundir)
    recorded = (State.SUCCEEDED, State.FAILED, State.STOPPED)  # by the driver ("lost": ours)
    state = local.get("state") if local.get("state") in recorded else None
    if state is None or (job_status == "STOPPED" and state != State.STOPPED):
        state = TERMINAL_JOB[job_status]
        detail = info.message or f"job {job_status.lower()}"
        write_status(rundir, state=state, detail=detail, ended=time.time())
    else:
        write_status(rundir, ended=local.get("ended") or time.time())
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.launch.jobs")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("follow").add_argument("--run-dir", required=True, type=Path)
    ns = parser.parse_args(argv)
    state = follow(RunDir(ns.run_dir))
    print(f"job mirrored to {ns.run_dir}: {state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
