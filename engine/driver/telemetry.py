"""What the driver tells the run directory: phases, metrics, offloads, memory, status.

Every write goes through the non-blocking EventWriter, so telemetry never stalls a step.
Metrics also go to wandb / TensorBoard (engine/driver/tracking.py) when --use-wandb or
--use-tensorboard is on.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from ..host.machine import nvml_devices
from ..run.events import EventWriter
from ..vocabulary import PHASE_END, PHASE_START, Kind


def process_tree_rss(root_pid: int) -> int:
    """RSS of the driver and everything it started (Ray, workers): the host memory truth."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


HOLD_SECONDS = 300.0  # longer than any test waits to kill a held driver


class Telemetry:
    def __init__(self, writer: EventWriter, root_pid: int,
                 torch_reserved: Callable[[], dict[str | int, int]] | None = None) -> None:
        self.writer = writer
        self.root_pid = root_pid
        # device index -> bytes reserved by torch in our workers; set once workers exist
        self.torch_reserved = torch_reserved
        # walking the process tree for RSS costs ~2 ms: do it off the driver's critical path
        self._sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rss-sampler")
        self.tracking: Any = None  # engine.driver.tracking.Tracking, set by start_tracking
        # wandb/TensorBoard take ~1 ms a call (p99 5-8 ms, bench/tracking_bench.py): off the
        # loop, in call order (one worker)
        self._tracker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracking")
        self._rounded_pins_shown: set[str] = set()  # models whose pinning fell back, warned once
        # a test's kill point (PPODECK_TEST_HOLD_PHASE=NAME:ROLLOUT): the driver waits there, so
        # the kill lands in that phase whatever the machine's load
        self._hold_at = os.environ.get("PPODECK_TEST_HOLD_PHASE")

    def start_tracking(self, args: Mapping[str, Any]) -> None:
        """wandb / TensorBoard for this run's metrics; their libraries load only when on."""
        if not (args["use_wandb"] or args["use_tensorboard"]):
            return
        from .tracking import start_tracking

        self.tracking = start_tracking(args, lambda level, msg: self.log(level, msg, "tracking"))

    @contextlib.contextmanager
    def phase(self, name: str, rollout_id: int | None,
              parent: str | None = None) -> Iterator[dict[str, Any]]:
        """A span; a step of another phase names it as `parent` (init's steps). Fields the
        body puts in the yielded dict go on the end event (e.g. a trainer's init parts)."""
        nested = {} if parent is None else {"parent": parent}
        self.writer.emit(Kind.PHASE, name=name, state=PHASE_START, rollout_id=rollout_id,
                         **nested)
        if self._hold_at == f"{name}:{rollout_id}":
            time.sleep(HOLD_SECONDS)
        start = time.perf_counter()
        extra: dict[str, Any] = {}
        yield extra
        seconds = time.perf_counter() - start
        self.writer.emit(Kind.PHASE, name=name, state=PHASE_END, rollout_id=rollout_id,
                         seconds=round(seconds, 6), **nested, **extra)
        if parent is None:  # a step's memory is its parent's to sample
            self.memory(f"after {name}")

    def memory(self, label: str) -> None:
        devices = nvml_devices()
        if devices is not None and self.torch_reserved is not None:
            reserved = self.torch_reserved()
            for device in devices:
                torch_bytes = reserved.get(device["uuid"], reserved.get(device["index"], 0))
                device["torch_reserved_bytes"] = torch_bytes
                device["non_torch_bytes"] = max(0, device["used_bytes"] - torch_bytes)
        self._sampler.submit(self._emit_memory, label, devices or [])

    def _emit_memory(self, label: str, devices: list[dict[str, Any]]) -> None:
        self.writer.emit(Kind.GPU, label=label, devices=devices,
                         rss_bytes=process_tree_rss(self.root_pid))

    def drain(self) -> None:
        """Wait for the memory samples already submitted (one worker: in order), so an event
        written next, such as the run's final status, lands after them."""
        self._sampler.submit(lambda: None).result()

    def close(self) -> None:
        """Finish pending memory samples and the trackers; call before closing the writer."""
        self._sampler.shutdown(wait=True)
        self._tracker.shutdown(wait=True)
        if self.tracking is not None:
            self.tracking.finish()
            self.tracking = None

    def offload(self, model: str, direction: str, report: dict[str, Any]) -> None:
        seconds = float(report.get("seconds", 0.0))
        moved = int(report.get("bytes", 0))
        noop = bool(report.get("noop", False))
        gbps = report.get("gbps")  # the mover's own copy rate, where it measured one
        if gbps is None and not noop and seconds > 0 and report.get("copied", True):
            gbps = moved / seconds / 1e9
        where = "cpu" if direction == "offload" else "gpu"
        extra = {key: round(float(report[key]), 6)
                 for key in ("pin_seconds", "copy_seconds", "alloc_seconds", "waited_seconds",
                             "nvml_after_bytes", "prepinned_bytes", "pinned_bytes",
                             "device_allocated_after", "device_reserved_after")
                 if report.get(key) is not None}
        if report.get("pinned_rounded") and model not in self._rounded_pins_shown:
            self._rounded_pins_shown.add(model)
            self.log("warning", f"{model}: page-locking the offload buffers in place failed "
                                "(cudaHostRegister): torch's pinned allocator holds them, each "
                                "rounded up to a power of two (up to 2x the host memory)")
        self.writer.emit(Kind.OFFLOAD, model=model, direction=direction,
                         where=report.get("where", where), bytes=moved,
                         seconds=round(seconds, 6),
                         gbps=None if gbps is None else round(float(gbps), 3), noop=noop,
                         **extra)

    def metrics(self, step_key: str, step: int, rollout_id: int, metrics: dict[str, float],
                role: str | None = None) -> None:
        if metrics:
            self.writer.emit(Kind.METRICS, step_key=step_key, step=step, rollout_id=rollout_id,
                             role=role, metrics=metrics)
            if self.tracking is not None:
                self._tracker.submit(self.tracking.log, step_key, step, metrics)

    def log(self, level: str, msg: str, source: str = "driver") -> None:
        self.writer.emit(Kind.LOG, level=level, source=source, msg=msg)

    def announce(self, msg: str, source: str) -> None:
        """An override of what the user asked for, said once: a warning event (tail, the
        monitor) and a line in driver.log (the driver's stderr)."""
        self.log("warning", msg, source)
        print(f"warning [{source}]: {msg}", file=sys.stderr, flush=True)

    def status(self, state: str, detail: str = "", **fields: Any) -> None:
        self.writer.emit(Kind.STATUS, state=state, detail=detail, **fields)
