"""What this machine's memory already holds: each visible GPU's total and free memory with the
processes that hold it, and the host's RAM (LIGHT: pynvml is imported lazily, stdlib otherwise).

check() and the launch pre-flight compare the run's memory estimate with these figures, so a
second run beside a live one is refused before it starts instead of failing out of memory in
its first phase. `read_holdings()` reads now; `holdings()` keeps a reading for a few seconds so
that a keystroke's check() does not ask NVML each time.

The NVML module is a seam: `read_holdings(nvml=...)` takes any object with pynvml's functions
(the tests pass a fake one). A holder is named by the PPO Deck run it belongs to when one of its
ancestors (or its session leader) is a PPO Deck driver or supervisor, whose command line carries
`--run-dir DIR`; otherwise by its pid and command. Under a PID namespace NVML may report host
pids that /proc here does not show: those are named by pid alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = float(1 << 30)
HOLDINGS_MAX_AGE_S = 2.0  # a keystroke's check() reuses a reading this young
PROC = Path("/proc")
_ANCESTOR_STEPS = 32  # a Ray worker sits 3-5 levels below the driver; this bounds a bad loop
_COMMAND_CHARS = 60


@dataclass(frozen=True)
class Holder:
    """A process holding GPU memory: a PPO Deck run's (run_id set) or another one."""

    pid: int
    used_gib: float | None  # NVML's per-process figure; None where the driver does not say
    run_id: str | None = None
    command: str = ""

    def label(self) -> str:
        if self.run_id:
            return f"run {self.run_id} (pid {self.pid})"
        return f"pid {self.pid}" + (f" ({self.command})" if self.command else "")


@dataclass(frozen=True)
class GpuMemory:
    """One visible GPU, in CUDA's order (`index` is its place among the visible ones)."""

    index: int
    uuid: str
    total_gib: float
    free_gib: float
    holders: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class Holdings:
    """One reading. `gpus` is None where NVML is missing or did not answer (`gpu_note` says
    why when there are GPUs); `host_*` None where /proc/meminfo is missing."""

    gpus: tuple[GpuMemory, ...] | None
    host_total_gib: float | None
    host_available_gib: float | None
    gpu_note: str = ""
    read_at: float = 0.0  # time.monotonic()


# ---- reading ------------------------------------------------------------------------------


def load_nvml() -> Any | None:  # noqa: ANN401 - the pynvml module
    """pynvml initialized once per process (engine/host/machine.py), None without NVML."""
    from .machine import _nvml

    return _nvml()


def read_holdings(nvml: Any | None = None,  # noqa: ANN401
                  cuda_visible_devices: str | None = None, proc: Path = PROC,
                  run_of_pid: Callable[[int], str | None] | None = None) -> Holdings:
    """A fresh reading. `nvml`: the module to ask (pynvml when None); `cuda_visible_devices`:
    os.environ's when None; `run_of_pid`: names a pid's run (default: its ancestors' --run-dir)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES") if cuda_visible_devices is None \
        else cuda_visible_devices
    module = load_nvml() if nvml is None else nvml
    name_run = run_of_pid or (lambda pid: run_id_of(pid, proc))
    gpus, note = (None, "") if module is None else _read_gpus(module, cvd, proc, name_run)
    total, available = read_meminfo(proc / "meminfo")
    return Holdings(gpus, total, available, note, time.monotonic())


def _read_gpus(nvml: Any, cvd: str | None, proc: Path,  # noqa: ANN401
               name_run: Callable[[int], str | None]
               ) -> tuple[tuple[GpuMemory, ...] | None, str]:
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        order = visible_order(uuids, cvd)
        if order is None:
            return None, f"CUDA_VISIBLE_DEVICES={cvd} names MIG devices, whose memory is not read"
        gpus = []
        for place, physical in enumerate(order):
            info = nvml.nvmlDeviceGetMemoryInfo(handles[physical])
            holders = tuple(_holder(p, proc, name_run) for p in _processes(nvml, handles[physical]))
            gpus.append(GpuMemory(place, uuids[physical], int(info.total) / GIB,
                                  int(info.free) / GIB, holders))
        return tuple(gpus), ""
    except Exception as exc:  # noqa: BLE001 - NVMLError and its many subclasses
        return None, f"NVML did not answer ({type(exc).__name__}: {exc})"


def _processes(nvml: Any, handle: Any) -> list[Any]:  # noqa: ANN401
    """Compute and graphics processes on one GPU, each pid once."""
    seen: dict[int, Any] = {}
    for reader in ("nvmlDeviceGetComputeRunningProcesses",
                   "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            found = getattr(nvml, reader)(handle)
        except Exception:  # noqa: BLE001 - not supported on this device or driver
            continue
        for process in found:
            seen.setdefault(int(process.pid), process)
    return list(seen.values())


def _holder(process: Any, proc: Path,  # noqa: ANN401
            name_run: Callable[[int], str | None]) -> Holder:
    used = getattr(process, "usedGpuMemory", None)
    pid = int(process.pid)
    return Holder(pid, int(used) / GIB if isinstance(used, int) else None, name_run(pid),
                  command_of(pid, proc))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_order(uuids: list[str], cvd: str | None) -> list[int] | None:
    """Physical GPU indices in the order CUDA shows them under CUDA_VISIBLE_DEVICES (the list
    stops at its first invalid or repeated entry, as CUDA's does); None for MIG entries."""
    if cvd is None:
        return list(range(len(uuids)))
    order: list[int] = []
    for entry in (e.strip() for e in cvd.split(",")):
        if entry.startswith("MIG-"):
            return None
        index = _entry_index(entry, uuids)
        if index is None or index in order:
            break
        order.append(index)
    return order


def _entry_index(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        return int(entry) if int(entry) < len(uuids) else None
    if entry.startswith("GPU-"):  # CUDA accepts a unique prefix of the UUID
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None


def read_meminfo(path: Path) -> tuple[float | None, float | None]:
    """MemTotal and MemAvailable in GiB (MemAvailable: what can be had without swapping,
    page cache included), None each where missing."""
    try:
        text = path.read_text()
    except OSError:
        return None, None
    values: dict[str, float] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("MemTotal", "MemAvailable") and parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024 / GIB
            if len(values) == 2:
                break  # both are near the top
    return values.get("MemTotal"), values.get("MemAvailable")


# ---- naming a holder ----------------------------------------------------------------------


def run_id_of(pid: int, proc: Path = PROC) -> str | None:
    """The PPO Deck run whose driver (or miles supervisor) started `pid`: the first process
    with `--run-dir DIR` on its command line among its session leader and its ancestors."""
    session = session_of(pid, proc)
    candidates = [session] if session else []
    current: int | None = pid
    for _ in range(_ANCESTOR_STEPS):
        if not current or current <= 1:
            break
        candidates.append(current)
        current = _stat_field(current, proc, 1)
    for candidate in candidates:
        run = _run_dir_arg(candidate, proc)
        if run:
            return run
    return None


def session_of(pid: int, proc: Path = PROC) -> int | None:
    """The session id of `pid` (a PPO Deck driver leads its own session), None if gone."""
    return _stat_field(pid, proc, 3)


def _stat_field(pid: int, proc: Path, field: int) -> int | None:
    """A field of /proc/PID/stat after the command name: 1 ppid, 2 pgrp, 3 session."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rpartition(")")[2].split()
        return int(fields[field])
    except (OSError, IndexError, ValueError):
        return None


def _argv(pid: int, proc: Path) -> list[str]:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _run_dir_arg(pid: int, proc: Path) -> str | None:
    argv = _argv(pid, proc)
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--run-dir" and value:
            return Path(value).name
    return None


def command_of(pid: int, proc: Path = PROC) -> str:
    """A short form of the process's command line ("" where /proc does not show it)."""
    text = " ".join(_argv(pid, proc))
    return text if len(text) <= _COMMAND_CHARS else text[:_COMMAND_CHARS - 3] + "..."


# ---- the short cache ----------------------------------------------------------------------

_cache: dict[str, Holdings] = {}
_lock = threading.Lock()


def holdings(max_age: float = HOLDINGS_MAX_AGE_S, reader: Callable[[], Holdings] | None = None
             ) -> Holdings:
    """The last reading when younger than `max_age` seconds, else a new one (`reader`:
    read_holdings when None)."""
    with _lock:
        last = _cache.get("last")
        if last is not None and time.monotonic() - last.read_at <= max_age:
            return last
    fresh = (reader or read_holdings)()
    with _lock:
        _cache["last"] = fresh
    return fresh


def forget_reading() -> None:
    """Drop the cached reading (tests; a pre-flight that must read afresh)."""
    with _lock:
        _cache.clear()
