"""The machine kind a run's timing belongs to: "gpu: <name> x<count>" or "cpu: <model> x<cores>".

A forecast is calibrated only from runs of the same kind (engine/config/forecast.py): phase
times measured on one GPU model, or one CPU with a given core count, say little about another.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from .machine import _nvml, visible_gpus


@functools.cache
def machine_kind() -> str:
    gpus = visible_gpus()
    if gpus > 0:
        return f"gpu: {_gpu_name() or 'unknown GPU'} x{gpus}"
    return f"cpu: {_cpu_model() or 'unknown CPU'} x{cpu_count()}"


def load_average() -> float | None:
    """How busy a shared CPU machine is at launch: the 1-minute load average, or the processes
    runnable right now when they are fewer. The average still carries, for a minute or more, a
    run that has just ended (the user's previous one, say), which would slow the forecast of
    the next for work that is no longer there."""
    try:
        average = os.getloadavg()[0]
    except OSError:
        return None
    now = runnable_now()
    return average if now is None else min(average, now)


def runnable_now(samples: int = 5, gap_s: float = 0.01,
                 read: Callable[[], str] = lambda: Path("/proc/loadavg").read_text()
                 ) -> float | None:
    """The median count of runnable processes over a few samples of /proc/loadavg, less the
    one reading it; None where the file is not there."""
    counts = []
    for index in range(samples):
        try:
            fields = read().split()
            running = int(fields[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        counts.append(max(0, running - 1))
        if index < samples - 1:
            time.sleep(gap_s)
    return float(statistics.median(counts))


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))


def _gpu_name() -> str | None:
    pynvml = _nvml()
    if pynvml is None:
        return None
    try:
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    except pynvml.NVMLError:
        return None
    return name if isinstance(name, str) else name.decode()


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def gpu_count(kind: str) -> int:
    """The GPUs of a machine kind (0 for a CPU kind)."""
    if not kind.startswith("gpu:"):
        return 0
    tail = kind.rsplit(" x", 1)[-1]
    return int(tail) if tail.isdigit() else 1
