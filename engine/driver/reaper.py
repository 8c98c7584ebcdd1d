"""The driver's reaper: no Ray or worker process outlives the driver, even after a SIGKILL.

`python -m ppodeck.engine.driver.reaper --run-dir D --driver-pid P`, started by the driver
(engine/driver/ppo.py `start_reaper`) with the read end of a pipe on stdin; the driver holds
the write end until it exits. However the driver ends (return, crash, SIGKILL, OOM killer),
the kernel closes that end and the reaper wakes up. It then:

1. stops every process left in the driver's session (SIGTERM, then SIGKILL after a grace
   period). Why the session and not the process group: the launcher starts the driver with
   start_new_session=True, so the session id is the driver's pid; Ray's raylet starts each
   worker in a process group of its own (a killpg of the driver's group misses them) but in the
   same session, and Ray's dashboard/runtime-env agents survive a SIGKILLed driver otherwise.
2. records a final state when the driver could not ("failed", naming the last phase), and
   appends the same as a `status` event, so `ppodeck runs ls`, tail and the TUI say why.

The reaper is LIGHT (stdlib + engine.run.rundir/events) and moves to its own process group, so a
stop (SIGINT or SIGKILL to the driver's group) never reaches it. It never touches a final state
that someone else already recorded (succeeded, stopped, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from ..run.rundir import RunDir, update_status
from ..vocabulary import ACTIVE_STATES, Kind, State

GRACE_S = 3.0  # SIGTERM -> SIGKILL: lets SGLang/NCCL release GPU memory on their own
_TAIL_BYTES = 1 << 16  # enough of events.jsonl to find the last phase


def session_members(sid: int, exclude: int = -1) -> list[int]:
    """Live processes in session `sid` (zombies excluded), from /proc; `exclude` left out."""
    return _live_with(_SESSION_FIELD, sid, exclude)


def group_members(pgid: int, exclude: int = -1) -> list[int]:
    """Live processes in process group `pgid` (zombies excluded), from /proc."""
    return _live_with(_PGRP_FIELD, pgid, exclude)


_PGRP_FIELD, _SESSION_FIELD = 2, 3  # in /proc/PID/stat after the ")" of the command name


def _live_with(field: int, value: int, exclude: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(stat.parent.name)
        if pid != exclude and int(fields[field]) == value and fields[0] not in ("Z", "X"):
            members.append(pid)
    return members


def sweep(sid: int, grace_s: float = GRACE_S) -> int:
    """Terminate, then kill, everything left in the session. Returns how many were found."""
    me = os.getpid()
    found = set(session_members(sid, me))
    _signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and session_members(sid, me):
        time.sleep(0.05)
    for _ in range(20):  # a dying raylet may still start a worker: repeat until empty
        left = session_members(sid, me)
        if not left:
            break
        found.update(left)
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return len(found)


def _signal_all(pids: set[int] | list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def last_phase(events_path: Path) -> str | None:
    """The phase the run was in (last `phase` start event), read from the end of the file."""
    try:
        with open(events_path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - _TAIL_BYTES))
            lines = file.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a torn or partial line
        if isinstance(event, dict) and event.get("kind") == Kind.PHASE:
            rollout = event.get("rollout_id")
            where = f"rollout {rollout}" if rollout is not None else "startup"
            return f"{event.get('name')} ({where})"
    return None


def record_failure(rundir: RunDir, driver_pid: int, swept: int) -> bool:
    """Mark an active run failed with the reason; True if this call wrote it."""
    phase = last_phase(rundir.events_jsonl)
    detail = (f"driver process {driver_pid} ended without recording a final state (killed by "
              f"a signal such as SIGKILL or the OOM killer, or crashed)"
              f"{f' during {phase}' if phase else ''}; {swept} leftover Ray/worker "
              f"process(es) were stopped. See {rundir.driver_log}")
    wrote = []

    def fail(status: dict) -> dict:
        if status.get("state") not in ACTIVE_STATES:
            return status  # a final state is already recorded: keep it
        wrote.append(True)
        return {**status, "state": State.FAILED, "detail": detail, "ended": time.time()}

    update_status(rundir, fail)
    if wrote:
        append_status_event(rundir.events_jsonl, State.FAILED, detail)
    return bool(wrote)


def append_status_event(path: Path, state: str, detail: str) -> None:
    """Append one status event; a torn last line (killed writer) is closed off first."""
    from ..run.events import SCHEMA_VERSION, encode_event

    event = {"v": SCHEMA_VERSION, "ts": time.time(), "kind": Kind.STATUS, "state": state,
             "detail": detail, "source": "reaper"}
    with open(path, "ab+") as file:
        file.seek(0, os.SEEK_END)
        torn = False
        if file.tell() > 0:
            file.seek(-1, os.SEEK_END)
            torn = file.read(1) != b"\n"
        file.write((b"\n" if torn else b"") + encode_event(event))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.driver.reaper")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--driver-pid", required=True, type=int)
    ns = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe's end may end the watch
    sid = os.getsid(0)
    sys.stdin.buffer.read()  # blocks until the driver's end of the pipe closes
    # Only a driver that leads its own session (as engine.launch.local starts it) owns the whole
    # session; a driver started by hand from a shell shares the shell's: leave that alone.
    swept = sweep(sid) if sid == ns.driver_pid else 0
    try:
        record_failure(RunDir(ns.run_dir), ns.driver_pid, swept)
    except OSError as exc:  # disk full, run dir removed: the reader will say "lost"
        print(f"reaper: could not record the driver's end: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
