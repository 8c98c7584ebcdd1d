"""What this machine can do at most: the bounds each PPO phase is held against (run/bounds.py).

- CPU: memcpy GB/s (a 64 MiB bytearray copy, stdlib) and, where torch imports, fp32 matmul
  TFLOP/s (the train phases' bound on a CPU machine).
- GPU: pinned host->device and device->host copy GB/s (offload, onload, weight sync), HBM copy
  GB/s (decode), dense bf16 matmul TFLOP/s (train), each the median of timed repeats between
  CUDA events after warm-ups. bench/gpu_bounds_probe.py runs the same functions with larger
  sizes for kept evidence.

Copies count the bytes copied (`*_copy_GBps`); `*_read_write_GBps` counts the bytes read and the
bytes written (2x), as vendors' bandwidth figures do, which is the rate a weight-reading decode
step is held against.

The figures are cached in $PPODECK_HOME/machine-facts.json keyed by machine kind
(engine/host/kind.py), so each kind is probed once. The driver (and the miles supervisor) calls
`start_probe` before Ray starts: it waits at most PROBE_WAIT_S for a fresh probe, which then
finishes in the background (`python -m ppodeck.engine.host.probe`, its own process: the driver
must not hold a CUDA context). LIGHT at import: torch is imported only by the measuring
functions, which run in that process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .files import atomic_write

FACTS_FILE = "machine-facts.json"
PROBE_VERSION = 1  # an entry of another version (another probe's method) is probed again
PROBE_WAIT_S = 2.0  # the longest a launch waits for a first probe of its machine kind
QUICK = {"gib": 0.25, "matmul": 4096, "repeats": 5}  # the launch probe: well under a second
CPU_COPY_BYTES = 64 * 2**20
CPU_MATMUL_N = 1024


@dataclass(frozen=True)
class MachineFacts:
    """One machine kind's measured bounds; None where not measured (no GPU, no torch)."""

    kind: str
    measured_at: float
    cpu_memcpy_GBps: float | None = None
    cpu_fp32_matmul_TFLOPs: float | None = None
    device: str | None = None
    h2d_pinned_GBps: float | None = None
    d2h_pinned_GBps: float | None = None
    hbm_copy_GBps: float | None = None
    hbm_read_write_GBps: float | None = None
    bf16_matmul_TFLOPs: float | None = None

    @property
    def on_gpu(self) -> bool:
        return self.kind.startswith("gpu:") and self.bf16_matmul_TFLOPs is not None

    def line(self) -> str:
        """"machine facts (gpu: NVIDIA H100 x1): pinned H2D 54.9 GB/s, ..." for logs."""
        parts = [(label, getattr(self, name), unit) for name, label, unit in _SHOWN]
        shown = ", ".join(f"{label} {value:.4g} {unit}" for label, value, unit in parts
                          if value is not None)
        when = (", probed " + time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
                if self.measured_at > 0 else "")
        return f"machine facts ({self.kind}{when}): {shown or 'none measured'}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MachineFacts:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


_SHOWN = (("h2d_pinned_GBps", "pinned H2D", "GB/s"), ("d2h_pinned_GBps", "pinned D2H", "GB/s"),
          ("hbm_read_write_GBps", "HBM", "GB/s"), ("bf16_matmul_TFLOPs", "bf16 matmul", "TFLOP/s"),
          ("cpu_memcpy_GBps", "host memcpy", "GB/s"),
          ("cpu_fp32_matmul_TFLOPs", "CPU fp32 matmul", "TFLOP/s"))


# ------------------------------------------------------------------------------------ cache
def facts_path() -> Path:
    """$PPODECK_HOME/machine-facts.json (the default home as engine/env_vars.py declares it)."""
    from ..env_vars import BY_NAME

    home = os.environ.get("PPODECK_HOME") or BY_NAME["PPODECK_HOME"].default
    return Path(home).expanduser() / FACTS_FILE


def read_all(path: Path | None = None) -> dict[str, Any]:
    try:
        data = json.loads((path or facts_path()).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_facts(kind: str, path: Path | None = None) -> MachineFacts | None:
    """The cached facts of machine kind `kind`, or None (never probed, by another version of
    the probe, or unreadable)."""
    entry = read_all(path).get(kind)
    if not isinstance(entry, dict) or entry.get("probe_version") != PROBE_VERSION:
        return None
    try:
        return MachineFacts.from_dict({**entry, "kind": kind})
    except TypeError:
        return None


def write_facts(facts: MachineFacts, path: Path | None = None) -> Path:
    """Merge `facts` into the cache under its kind (other kinds are kept)."""
    path = path or facts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = read_all(path)
    data[facts.kind] = {"probe_version": PROBE_VERSION,
                        **{k: v for k, v in asdict(facts).items() if k != "kind"}}
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


# -------------------------------------------------------------------------------- measuring
def cpu_memcpy_gbps(nbytes: int = CPU_COPY_BYTES, repeats: int = 5) -> float:
    """One thread's memcpy rate, GB/s of bytes copied (the best of `repeats`: on a CPU shared
    with other work the best repeat is the nearest to what the machine can do)."""
    src, dst = bytearray(b"\1" * nbytes), bytearray(nbytes)
    view = memoryview(dst)
    times = []
    for _ in range(repeats + 1):  # the first touches the destination's pages
        start = time.perf_counter()
        view[:] = src
        times.append(time.perf_counter() - start)
    return nbytes / min(times[1:]) / 1e9


def cpu_matmul_tflops(torch: Any, n: int = CPU_MATMUL_N, repeats: int = 5) -> float:  # noqa: ANN401
    """fp32 n x n x n matmul TFLOP/s on the CPU with torch's threads (the best repeat)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / min(times) / 1e12


def timed_ms(torch: Any, work: Callable[[], object], repeats: int, warmups: int = 3) -> float:  # noqa: ANN401
    """Median milliseconds of `work` over `repeats` runs, each between two CUDA events."""
    for _ in range(warmups):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_rates(torch: Any, nbytes: int, repeats: int) -> dict[str, float]:  # noqa: ANN401
    """Pinned host<->device and device->device copy rates, GB/s (1e9 bytes)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    other = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host.fill_(1)
    h2d = timed_ms(torch, lambda: device.copy_(host, non_blocking=True), repeats)
    d2h = timed_ms(torch, lambda: host.copy_(device, non_blocking=True), repeats)
    d2d = timed_ms(torch, lambda: other.copy_(device), repeats)
    return {"h2d_pinned_GBps": nbytes / h2d / 1e6, "d2h_pinned_GBps": nbytes / d2h / 1e6,
            "hbm_copy_GBps": nbytes / d2d / 1e6, "hbm_read_write_GBps": 2 * nbytes / d2d / 1e6}


def matmul_tflops(torch: Any, n: int, repeats: int) -> float:  # noqa: ANN401
    """Dense bf16 n x n x n matmul TFLOP/s on random data (2 n^3 FLOPs a product)."""
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    ms = timed_ms(torch, lambda: torch.matmul(a, b, out=out), repeats, warmups=5)
    return 2 * n**3 / ms / 1e9


def gpu_figures(gib: float, n: int, repeats: int) -> dict[str, Any]:
    """GPU 0's copy rates and bf16 matmul rate (needs torch and CUDA)."""
    import torch

    figures: dict[str, Any] = {"device": torch.cuda.get_device_name(0)}
    figures.update(copy_rates(torch, int(gib * 2**30), repeats))
    figures["bf16_matmul_TFLOPs"] = matmul_tflops(torch, n, repeats)
    return figures


def measure(kind: str, gib: float = QUICK["gib"], n: int = QUICK["matmul"],
            repeats: int = QUICK["repeats"]) -> MachineFacts:
    """Probe this machine now (the GPU part only on a GPU kind with torch and CUDA)."""
    figures: dict[str, Any] = {"cpu_memcpy_GBps": cpu_memcpy_gbps()}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        figures["cpu_fp32_matmul_TFLOPs"] = cpu_matmul_tflops(torch)
        if kind.startswith("gpu:") and torch.cuda.is_available():
            figures.update(gpu_figures(gib, int(n), int(repeats)))
    return MachineFacts(kind=kind, measured_at=time.time(), **figures)


# ------------------------------------------------------------------------ at a run's launch
@dataclass
class Probe:
    """The facts of this machine kind at launch: cached, or being probed in the background."""

    kind: str
    facts: MachineFacts | None
    process: subprocess.Popen[bytes] | None = None
    error: str | None = None

    def poll(self) -> MachineFacts | None:
        """The facts once a background probe has finished (None while it runs)."""
        if self.facts is None and self.process is not None and self.process.poll() is not None:
            self.facts = read_facts(self.kind)
            if self.facts is None:
                self.error = f"the probe exited with {self.process.returncode} and wrote nothing"
            self.process = None
        return self.facts

    def line(self) -> str:
        if self.facts is not None:
            return self.facts.line()
        if self.error is not None:
            return f"machine facts: none for {self.kind} ({self.error}); speed has no bounds"
        return (f"machine facts: probing {self.kind} for the first time (at most "
                f"{PROBE_WAIT_S:.0f} s here; the rest runs beside the start-up), cached in "
                f"{facts_path()}")


def start_probe(kind: str, wait_s: float = PROBE_WAIT_S) -> Probe:
    """The cached facts of `kind`, or a probe started now and waited on for `wait_s`."""
    cached = read_facts(kind)
    if cached is not None:
        return Probe(kind, cached)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "ppodeck.engine.host.probe", "--kind", kind],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2])
    except OSError as exc:
        return Probe(kind, None, error=f"the probe did not start: {exc}")
    probe = Probe(kind, None, process)
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return probe
    probe.poll()
    return probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.host.probe",
                                     description="Probe this machine's bounds and cache them.")
    parser.add_argument("--kind", help="the machine kind to file them under (default: this "
                                       "machine's, engine/host/kind.py)")
    ns = parser.parse_args(argv)
    from .kind import machine_kind

    facts = measure(ns.kind or machine_kind())
    path = write_facts(facts)
    print(f"{facts.line()} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
