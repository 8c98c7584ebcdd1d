"""Run directories: layout, unique ids, and status.json.

The run directory is the whole interface between the front ends and the driver, so status
updates are atomic (tmp file + os.replace) and merged under a lock: the launcher and the driver
both write status.json and neither may lose the other's fields.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..host.files import atomic_write
from ..vocabulary import ACTIVE_STATES, State

RUNS_DIR_ENV = "PPODECK_RUNS_DIR"
_ID_ATTEMPTS = 100


class RunNotFound(Exception):
    """str() is the user-facing message, with a fix."""


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def config_toml(self) -> Path:
        return self.path / "config.toml"

    @property
    def command_txt(self) -> Path:
        return self.path / "command.txt"

    @property
    def events_jsonl(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def driver_log(self) -> Path:
        return self.path / "driver.log"

    @property
    def status_json(self) -> Path:
        return self.path / "status.json"

    @property
    def samples(self) -> Path:
        """Each rollout's samples with per-token numbers (engine/run/samples.py)."""
        return self.path / "samples"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def checkpoints_critic(self) -> Path:
        return self.path / "checkpoints_critic"


@dataclass(frozen=True)
class RunInfo:
    id: str
    path: Path
    state: str
    preset: str
    started: float | None
    rollout_id: int | None
    num_rollout: int | None
    detail: str


def runs_root() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def create_run_dir(preset_name: str, root: str | os.PathLike[str] | None = None) -> RunDir:
    """Make `<root>/YYmmdd-HHMMSS-<preset>-<hex4>` with an exclusive mkdir; never clobbers."""
    root = Path(root) if root is not None else runs_root()
    root.mkdir(parents=True, exist_ok=True)
    slug = _slug(preset_name)
    for _ in range(_ID_ATTEMPTS):
        path = root / f"{time.strftime('%y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"
        try:
            path.mkdir()  # mode 0o777 minus the user's umask
        except FileExistsError:
            continue  # same second, same preset, same 4 hex digits: draw again
        return RunDir(path)
    raise FileExistsError(f"could not create a unique run directory under {root}")


def _slug(preset_name: str) -> str:
    stem = Path(preset_name).stem if preset_name.endswith(".toml") else Path(preset_name).name
    return re.sub(r"[^A-Za-z0-9._]+", "-", stem).strip("-.") or "run"


def write_status(rundir: RunDir, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into status.json atomically; returns the new status."""
    return update_status(rundir, lambda status: {**status, **fields})


def update_status(
    rundir: RunDir, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """Read-modify-write status.json under a lock, so concurrent writers merge, not clobber."""
    with _locked(rundir.path):
        status = change(_read_raw(rundir))
        _atomic_write_json(rundir.status_json, status)
    return status


def read_status(rundir: RunDir, record_lost: bool = False) -> dict[str, Any]:
    """The status; an active state whose driver process is gone reads as "lost".

    status.json is only rewritten with the "lost" state when `record_lost` is true.
    """
    status = _read_raw(rundir)
    if status.get("state") in ACTIVE_STATES and not driver_alive(rundir, status):
        status.update(state=State.LOST, detail=_lost_detail(rundir, status))
        if record_lost:
            write_status(rundir, state=State.LOST, detail=status["detail"], ended=time.time())
    return status


def _lost_detail(rundir: RunDir, status: dict[str, Any]) -> str:
    return (
        f"driver process {status.get('pid')} is gone but the run was {status.get('state')}; "
        f"it died without recording a final state. See {rundir.driver_log}"
    )


def _read_raw(rundir: RunDir) -> dict[str, Any]:
    try:
        status = json.loads(rundir.status_json.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"state": State.UNKNOWN, "detail": f"{rundir.status_json} is unreadable: {exc}"}
    return status if isinstance(status, dict) else {"state": State.UNKNOWN, "detail": "bad status"}


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)  # flock works on a directory fd on Linux/macOS
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def driver_alive(rundir: RunDir, status: dict[str, Any]) -> bool:
    """Whether the driver recorded in `status` may still be running (True when unknowable)."""
    pid = status.get("pid")
    if not isinstance(pid, int):
        return status.get("state") == State.STARTING  # the pid is recorded right after the start
    if status.get("host") not in (None, socket.gethostname()):
        return True  # driver on another machine (shared run dir): cannot check from here
    return pid_alive(pid) and _is_driver_of(pid, rundir)


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return _proc_state(pid) not in ("Z", "X")


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # no /proc (macOS) or gone meanwhile
    return stat.rpartition(")")[2].split()[0]


def _is_driver_of(pid: int, rundir: RunDir) -> bool:
    """Guards against pid reuse: the process must have this run dir on its command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the pid
    return rundir.path.name.encode() in cmdline


def list_runs(root: str | os.PathLike[str] | None = None) -> list[RunInfo]:
    """Runs under `root` (default: runs_root()), newest first."""
    root = Path(root) if root is not None else runs_root()
    if not root.is_dir():
        return []
    rundirs = [RunDir(p) for p in root.iterdir() if (p / "status.json").is_file()]
    infos = [_info(rundir) for rundir in rundirs]
    return sorted(infos, key=lambda info: (info.started or _created(info.path), info.id),
                  reverse=True)


def _created(path: Path) -> float:
    return (path / "status.json").stat().st_mtime if path.exists() else 0.0


def _info(rundir: RunDir) -> RunInfo:
    status = read_status(rundir)
    return RunInfo(
        id=rundir.id,
        path=rundir.path,
        state=status.get("state", State.UNKNOWN),
        preset=status.get("preset") or "",
        started=status.get("started") or status.get("created"),
        rollout_id=status.get("rollout_id"),
        num_rollout=status.get("num_rollout"),
        detail=status.get("detail") or "",
    )


def find_run(name_or_path: str, root: str | os.PathLike[str] | None = None) -> RunDir:
    """A run by path, exact id, or unique id prefix. Raises RunNotFound with a fix."""
    root = Path(root) if root is not None else runs_root()
    path = Path(name_or_path).expanduser()
    if (path / "status.json").is_file():
        return RunDir(path)
    ids = sorted(p.name for p in root.iterdir() if (p / "status.json").is_file()) \
        if root.is_dir() else []
    if name_or_path in ids:
        return RunDir(root / name_or_path)
    matches = [run_id for run_id in ids if run_id.startswith(name_or_path)]
    if len(matches) == 1:
        return RunDir(root / matches[0])
    raise RunNotFound(_not_found_message(name_or_path, root, matches))


def _not_found_message(name: str, root: Path, matches: list[str]) -> str:
    if matches:
        shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
        return (f"run '{name}' is ambiguous under {root}: it matches {len(matches)} runs "
                f"({shown}). Type more of the id.")
    if os.sep in name or Path(name).exists():
        return (f"{name} is not a run directory (it has no status.json). "
                "Pass a directory created by `ppodeck run`.")
    return (f"no run '{name}' under {root}. List runs with `ppodeck runs ls`; "
            f"runs elsewhere need ${RUNS_DIR_ENV} or a path to the run directory.")
