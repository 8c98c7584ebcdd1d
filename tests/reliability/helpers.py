"""Shared pieces of the reliability tests: real `ppodeck` processes, process-tree watching,
and cleanup by PID / process group / session (never by process name)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from ppodeck.engine.driver.reaper import group_members, session_members
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status

REPO = Path(__file__).resolve().parents[2]
PPODECK = [sys.executable, "-m", "ppodeck"]  # the console entry point, without relying on PATH
# What a real CPU run needs: no Hub access, no Ray usage stats or token prompts.
REAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
FINAL = ("succeeded", "failed", "stopped", "lost")


def cli_env(runs_dir: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, **REAL_ENV, "PPODECK_RUNS_DIR": str(runs_dir)}
    env.pop("PPODECK_DRIVER_MODULE", None)  # the real driver unless a test says otherwise
    return {**env, **extra}


def ppodeck(args: list[str], env: dict[str, str], timeout: float = 60,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PPODECK, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def start_detached(runs_dir: Path, args: list[str], env: dict[str, str]) -> RunDir:
    """`ppodeck run ... --detach`; the run's directory."""
    done = ppodeck(["run", *args, "--detach"], env)
    assert done.returncode == 0, done.stderr
    return RunDir(runs_dir / done.stdout.strip())


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               poll: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(poll)


def status_of(rundir: RunDir) -> dict[str, Any]:
    return read_status(rundir)


def wait_rollout(rundir: RunDir, at_least: int, timeout: float) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = read_status(rundir)
        assert status.get("state") not in FINAL, f"run ended early: {status}"
        rollout = status.get("rollout_id")
        return status if isinstance(rollout, int) and rollout >= at_least else None

    return wait_until(reached, timeout, f"rollout {at_least} of {rundir.id}")


def recorded_status(rundir: RunDir) -> dict[str, Any]:
    """status.json as written (read_status would show a dead driver as "lost" at once)."""
    try:
        return json.loads(rundir.status_json.read_text())
    except (OSError, ValueError):
        return {}


def wait_final(rundir: RunDir, timeout: float) -> dict[str, Any]:
    """The final state once recorded in status.json; read_status()'s view after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = recorded_status(rundir)
        if status.get("state") in FINAL:
            return status
        time.sleep(0.1)
    return read_status(rundir)


def events(rundir: RunDir) -> list[dict[str, Any]]:
    try:
        return read_events(rundir.events_jsonl)[0]
    except FileNotFoundError:  # the driver has not opened it yet
        return []


def logged_worker_pids(rundir: RunDir) -> dict[str, int]:
    """{"rollout/0": pid, "critic/0": pid, "actor/0": pid} from the driver's init log event."""
    for event in events(rundir):
        if event["kind"] == "log" and isinstance(event.get("pids"), dict):
            return {name: int(pid) for name, pid in event["pids"].items()}
    return {}


class TreeWatch:
    """Records every descendant of a process (and its listening sockets) while it runs.

    Polls from a thread: Ray starts and ends workers throughout the run, and a process that
    outlives the driver must have been seen to be checked afterwards.
    """

    def __init__(self, root_pid: int, poll_s: float = 0.2) -> None:
        self.root_pid = root_pid
        self.seen: dict[int, str] = {}
        self.listening: dict[tuple[int, str, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(poll_s,), daemon=True)
        self._thread.start()

    def _run(self, poll_s: float) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(poll_s)

    def sample(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in tree:
            try:
                self.seen[proc.pid] = proc.name()  # Ray renames workers once they start
            except psutil.Error:
                continue
        pids = set(self.seen)
        try:
            conns = psutil.net_connections(kind="inet")
        except psutil.Error:
            return
        for conn in conns:
            if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
                key = (conn.pid, conn.laddr.ip, conn.laddr.port)
                self.listening[key] = self.seen.get(conn.pid, "?")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def alive(self) -> list[int]:
        return [pid for pid in self.seen if alive(pid)]


def alive(pid: int) -> bool:
    """Exists and is not a zombie (an orphan zombie is not running anything)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def non_loopback(listening: dict[tuple[int, str, int], str]) -> list[str]:
    bad = []
    for (pid, ip, port), name in listening.items():
        address = ipaddress.ip_address(ip.split("%")[0])
        mapped = getattr(address, "ipv4_mapped", None)
        if not (address.is_loopback or (mapped is not None and mapped.is_loopback)):
            bad.append(f"{name} (pid {pid}) listens on {ip}:{port}")
    return bad


def nothing_left(driver_pid: int, watch: TreeWatch | None = None,
                 timeout: float = 20.0) -> list[int]:
    """Wait until no process of the run is alive: by session, process group and recorded PID.
    Returns what is still alive after `timeout` (empty = clean)."""
    def left() -> list[int]:
        pids = set(session_members(driver_pid)) | set(group_members(driver_pid))
        if watch is not None:
            pids |= set(watch.alive())
        return sorted(pids)

    deadline = time.monotonic() + timeout
    while (remaining := left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return remaining


def kill_everything(pids: list[int] | set[int]) -> None:
    """Test teardown: SIGKILL the given PIDs, their process groups and sessions."""
    targets: set[int] = set()
    for pid in pids:
        targets |= {pid, *session_members(pid), *group_members(pid)}
    for pid in targets:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def write_preset(path: Path, flags: str, extends: str = "tiny-cpu", head: str = "") -> Path:
    path.write_text(f'schema_version = 1\nname = "{path.stem}"\ndescription = "test"\n'
                    f'extends = "{extends}"\n{head}[flags]\n{flags}')
    return path


def record_figure(name: str, value: Any) -> None:
    """Add a number to the figures file that bench/reliability_figures.py prints."""
    path = os.environ.get("PPODECK_RELIABILITY_FIGURES")
    if not path:
        return
    figures_path = Path(path)
    figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
    figures[name] = value
    figures_path.write_text(json.dumps(figures, indent=2, sort_keys=True))
