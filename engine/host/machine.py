"""What this machine offers the run: its visible GPUs (LIGHT: no torch, no ray).

`visible_gpus()` counts the GPUs a process started here can use: NVML when `pynvml`
(nvidia-ml-py) imports and the driver answers, else the entries of /proc/driver/nvidia/gpus;
then CUDA_VISIBLE_DEVICES narrows it the way CUDA does (the list stops at its first invalid
entry, "" or -1 hides every GPU). check() compares it with the GPUs a layout needs, and the
private local Ray declares exactly this many. `nvml_devices()` reads each GPU's memory as NVML
sees it (the driver's gpu events, the SGLang backend's free-memory check). `environment()` is
the environment the pure config layer is handed (it reads none itself).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
PROC_MEMINFO = Path("/proc/meminfo")


def environment() -> Mapping[str, str]:
    """The environment a run started from here sees, for the config layer's switches
    (engine/config takes it as an argument). The live mapping, not a copy: a variable set later
    in this process (a test's monkeypatch, the driver's own) is seen as before."""
    return os.environ


@functools.cache
def visible_gpus() -> int:
    """GPUs this process may use (cached: the answer does not change while a process runs)."""
    return count_visible(physical_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def physical_gpus() -> int:
    """NVIDIA GPUs on this machine, whatever CUDA_VISIBLE_DEVICES says."""
    count = _nvml_count()
    return count if count is not None else _proc_count(PROC_GPUS)


def count_visible(physical: int, cuda_visible_devices: str | None) -> int:
    """How many of `physical` GPUs CUDA_VISIBLE_DEVICES leaves visible (CUDA's parsing)."""
    if cuda_visible_devices is None:
        return physical
    seen: set[str] = set()
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if not _valid_entry(entry, physical) or entry in seen:
            break  # CUDA ignores everything from the first invalid (or repeated) entry on
        seen.add(entry)
    return len(seen)


def _valid_entry(entry: str, physical: int) -> bool:
    if entry.startswith(("GPU-", "MIG-")):
        return physical > 0  # a UUID: present if the machine has GPUs at all
    return entry.isdigit() and int(entry) < physical


def _nvml_count() -> int | None:
    """NVML's device count, or None when pynvml is missing or no NVIDIA driver answers."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a half-initialised NVML
            pass


def _proc_count(root: Path) -> int:
    try:
        return sum(1 for entry in root.iterdir() if entry.is_dir())
    except OSError:
        return 0  # no NVIDIA driver: no GPUs


# miles' switch for its v2 fault-tolerant trainer (miles/utils/environ.py at the pin reads it
# from the environment of train.py, which a local miles launch inherits from this process)
MILES_FT_TRAINER_ENV = "MILES_EXPERIMENTAL_FT_TRAINER"


def miles_ft_trainer(environ: Mapping[str, str] | None = None) -> bool:
    """Whether miles' enable_experimental_ft_trainer() would say yes under `environ`."""
    raw = (os.environ if environ is None else environ).get(MILES_FT_TRAINER_ENV, "0")
    return raw.lower() in ("1", "true", "on", "yes")


@functools.cache
def host_memory_bytes() -> int | None:
    """This machine's RAM (MemTotal), read once per process; None where /proc has none."""
    return meminfo_total(PROC_MEMINFO)


def meminfo_total(path: Path) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    return None


_NVML_READY: bool | None = None


def _nvml():  # noqa: ANN202
    """pynvml, initialized once per process; None where there is no NVML (CPU machines)."""
    global _NVML_READY
    if _NVML_READY is False:
        return None  # asked before: a failed import is not cached by Python, so remember it
    try:
        import pynvml
    except ImportError:
        _NVML_READY = False
        return None
    if _NVML_READY is None:
        try:
            pynvml.nvmlInit()
            _NVML_READY = True
        except pynvml.NVMLError:
            _NVML_READY = False
    return pynvml if _NVML_READY else None


def nvml_devices() -> list[dict[str, Any]] | None:
    """Per-GPU memory as NVML sees it: includes what torch cannot see (CUDA contexts, engines).

    `used_bytes` is NVML's v1 "used", which also counts the driver's reserve on the device.
    """
    pynvml = _nvml()
    if pynvml is None:
        return None
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            devices.append({"index": index, "uuid": uuid if isinstance(uuid, str)
                            else uuid.decode(), "used_bytes": int(info.used),
                            "total_bytes": int(info.total)})
        return devices
    except pynvml.NVMLError:
        return None


def has_gpu_context(pid: int) -> bool | None:
    """Whether process `pid` holds a CUDA context on any GPU (NVML's compute processes); None
    without NVML. In a PID namespace NVML may report host PIDs: then this says False."""
    pynvml = _nvml()
    if pynvml is None:
        return None
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if any(p.pid == pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)):
                return True
        return False
    except pynvml.NVMLError:
        return None
