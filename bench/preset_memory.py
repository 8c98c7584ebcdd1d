#!/usr/bin/env python3
"""A preset's real run against check()'s estimates: GPU memory per phase, pinned host memory
of the offloaded train state, offload rates and the step breakdown (issue 20's report for
qwen3-1.7b-ppo-1gpu).

    python3 bench/preset_memory.py qwen3-1.7b-ppo-1gpu --num-rollout 4 --out $OUT   # H200
    .venv/bin/python bench/preset_memory.py tiny-cpu --num-rollout 3                # CPU: no NVML

While `ppodeck run` runs, a thread samples NVML's used bytes (all GPUs summed) every 50 ms,
and every 4th sample each process's used bytes (nvmlDeviceGetComputeRunningProcesses); each
phase's peak is the highest sample between its start and end events, over all rollouts. The
processes are named by the run's "worker pids" log line (rollout/0, critic/0, actor/0); a pid
NVML reports from outside the container's pid namespace stays a number.
The estimate is check()'s derived memory table (engine/config/derived.py: GiB per GPU: actor,
critic, rollout, and the total with the driver's reserve) and host_offload_gib
(engine.host_memory's figure). Host bytes measured: the largest `pinned_bytes` of each model's
offload events (its pinned buffers, the actor's KL reference and swap copies included), or, from
an engine that does not report it, the bytes its offload copied; and the process tree's RSS (the
gpu events' rss_bytes), whose excess over the pinned bytes is the processes' own memory.
The offload events' device_allocated_after / device_reserved_after say what each sleeping
process kept on the GPU in torch's allocator.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from step_bench import run_preset, summarize, table  # noqa: E402

GIB = float(1 << 30)
ESTIMATED_PHASES = ("generate", "critic_train", "actor_train")


class NvmlSampler:
    """(time.time(), used bytes summed over GPUs) every `period` seconds, and (time.time(),
    {pid: used bytes}) every PROCESS_EVERY samples; empty without NVML."""

    PROCESS_EVERY = 4

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.samples = period, []
        self.process_samples: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no NVML here: nothing to sample
            return
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        count = 0
        while not self._stop.is_set():
            used = sum(int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)
            self.samples.append((time.time(), used))
            if count % self.PROCESS_EVERY == 0:
                self.process_samples.append((time.time(), per_process(pynvml, handles)))
            count += 1
            self._stop.wait(self.period)

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def per_process(pynvml, handles: list) -> dict[int, int]:  # noqa: ANN001 - the module
    """{pid: used bytes} of the compute processes on the GPUs (None where NVML cannot say)."""
    out: dict[int, int] = {}
    for handle in handles:
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:  # noqa: BLE001 - not supported here: no per-process figures
            continue
        for proc in procs:
            if proc.usedGpuMemory is not None:
                out[int(proc.pid)] = out.get(int(proc.pid), 0) + int(proc.usedGpuMemory)
    return out


def phase_intervals(events: list[dict]) -> list[tuple[str, float, float]]:
    """(phase name, start ts, end ts) of every phase span of the run."""
    starts: dict[tuple[str, object], float] = {}
    spans = []
    for e in events:
        if e["kind"] != "phase":
            continue
        key = (e["name"], e.get("rollout_id"))
        if e["state"] == "start":
            starts[key] = float(e["ts"])
        elif key in starts:
            spans.append((e["name"], starts.pop(key), float(e["ts"])))
    return spans


def phase_peaks(events: list[dict], samples: list[tuple[float, int]]) -> dict[str, float]:
    """Highest NVML sample (GiB) inside each phase name's intervals."""
    peaks: dict[str, float] = {}
    for name, start, end in phase_intervals(events):
        inside = [used for ts, used in samples if start <= ts <= end]
        if inside:
            peaks[name] = max(peaks.get(name, 0.0), max(inside) / GIB)
    return peaks


def worker_names(events: list[dict]) -> dict[int, str]:
    """pid -> role from the run's "worker pids" log event (role/rank: pid)."""
    for e in events:
        if e["kind"] == "log" and isinstance(e.get("pids"), dict):
            return {int(pid): role.split("/")[0] for role, pid in e["pids"].items()}
    return {}


def process_peaks(events: list[dict], samples: list[tuple[float, dict[int, int]]]
                  ) -> dict[str, dict[str, float]]:
    """{phase: {role or pid: highest GiB of that process inside the phase}}."""
    names = worker_names(events)
    peaks: dict[str, dict[str, float]] = {}
    for phase, start, end in phase_intervals(events):
        for ts, used in samples:
            if not start <= ts <= end:
                continue
            row = peaks.setdefault(phase, {})
            for pid, nbytes in used.items():
                name = names.get(pid, f"pid {pid}")
                row[name] = max(row.get(name, 0.0), nbytes / GIB)
    return peaks


@functools.cache
def preset_config(preset: str) -> tuple[Any, dict]:
    """The preset's config and its resolved values (read once for every figure here)."""
    from ppodeck.engine.config.resolve import resolve
    from ppodeck.engine.presets import load_preset, resolve_preset

    config = resolve_preset(load_preset(preset))
    return config, dict(resolve(config, os.environ))


def estimates(preset: str) -> tuple[dict, dict | None]:
    """check()'s per-phase memory table and the pinned host estimate of the preset."""
    from ppodeck.engine.config import check
    from ppodeck.engine.config.memory import count_params, host_offload_gib

    config, resolved = preset_config(preset)
    return (dict(check(config).derived.memory_gib),
            host_offload_gib(resolved, count_params(resolved)))


def offload_figures(events: list[dict]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for model in ("actor", "critic", "rollout"):
        moves = [e for e in events if e["kind"] == "offload" and e["model"] == model
                 and not e["noop"]]
        rates = {d: [e["gbps"] for e in moves if e["direction"] == d and e["gbps"]]
                 for d in ("offload", "onload")}
        sleeps = [e for e in moves if e["direction"] == "offload"]
        pinned = [e["pinned_bytes"] for e in sleeps if e.get("pinned_bytes") is not None]
        out[model] = {
            # pinned_bytes: the host truth; older engines only say what they copied
            "host GiB": max(pinned or [e["bytes"] for e in sleeps], default=0) / GIB or None,
            "host source": "pinned" if pinned else "copied",
            "kept on GPU asleep, GiB": max((e.get("device_reserved_after", 0) for e in sleeps),
                                           default=0) / GIB,
            "offload GB/s": statistics.fmean(rates["offload"]) if rates["offload"] else None,
            "onload GB/s": statistics.fmean(rates["onload"]) if rates["onload"] else None,
        }
    return out


def report(preset: str, events: list[dict], samples: list[tuple[float, int]],
           process_samples: list[tuple[float, dict[int, int]]] | None = None) -> dict:
    memory, host = estimates(preset)
    peaks = phase_peaks(events, samples)
    print(f"\nGPU memory, GiB: NVML peak inside the phase vs check()'s estimate "
          f"({len(samples)} samples)")
    print(f"{'phase':<16}{'NVML peak':>12}{'estimate':>12}{'peak/est':>10}")
    for phase in ESTIMATED_PHASES:
        peak, est = peaks.get(phase), (memory.get(phase) or {}).get("total")
        ratio = f"{peak / est:>10.2f}" if peak and est else f"{'-':>10}"
        print(f"{phase:<16}{_f(peak):>12}{_f(est):>12}{ratio}")
    overlap = overlap_figures(preset, events, peaks)
    if overlap is not None:
        print(f"moves overlapped ({overlap['plan']} plan; the estimates above wait on each "
              f"move): whole-run NVML peak {overlap['peak']:.2f} GiB against the plan's "
              f"{overlap['estimate']:.2f} GiB of its roles awake at once "
              f"({overlap['peak'] / overlap['estimate']:.2f})")
    by_process = process_peaks(events, process_samples or [])
    print_process_table(by_process, memory)
    moves = offload_figures(events)
    print("\npinned host memory of the offloaded state, GiB, offload rates, and what each "
          "model kept on the GPU asleep (torch reserve)")
    print(f"{'model':<10}{'measured':>10}{'estimate':>10}{'offload GB/s':>14}"
          f"{'onload GB/s':>13}{'kept on GPU':>13}")
    for model, figures in moves.items():
        est = None if host is None else host[model]
        print(f"{model:<10}{_f(figures['host GiB']):>10}{_f(est):>10}"
              f"{_f(figures['offload GB/s']):>14}{_f(figures['onload GB/s']):>13}"
              f"{_f(figures['kept on GPU asleep, GiB']):>13}"
              + ("" if figures["host source"] == "pinned" else "  (copied bytes)"))
    measured_total = sum(f["host GiB"] or 0.0 for f in moves.values())
    print(f"{'total':<10}{_f(measured_total):>10}{_f(host and host['total']):>10}")
    rss = max((e.get("rss_bytes") or 0 for e in events if e["kind"] == "gpu"), default=0) / GIB
    print(f"{'processes':<10}{_f(rss - measured_total if rss else None):>10}"
          f"{_f(host and host['processes']):>10}   (process-tree RSS peak {rss:.2f} GiB "
          "less the pinned total)")
    return {"peaks_gib": peaks, "estimate_gib": memory, "host_estimate_gib": host,
            "offload": moves, "process_peaks_gib": by_process, "rss_peak_gib": rss,
            "overlap": overlap}


def overlap_figures(preset: str, events: list[dict], peaks: dict[str, float]) -> dict | None:
    """The run's move plan (its `moves:` log event) when it overlapped: the whole-run NVML
    peak against the plan's estimate of the roles awake at once (engine/driver/offload.py)."""
    plan = next((e["move_plan"] for e in events if e["kind"] == "log" and e.get("move_plan")),
                None)
    totals = [d["total_bytes"] for e in events if e["kind"] == "gpu" for d in e["devices"]]
    if plan in (None, "waited") or not totals or not peaks:
        return None
    from ppodeck.engine.driver.offload import awake_at_once_gib

    need = awake_at_once_gib(preset_config(preset)[1], min(totals), {})
    if need is None:
        return None
    trainers, everything = need
    return {"plan": plan, "peak": max(peaks.values()),
            "estimate": everything if plan == "rollout" else trainers}


def print_process_table(by_process: dict[str, dict[str, float]], memory: dict) -> None:
    """Per process (NVML), per phase: its peak against the estimate's role."""
    if not by_process:
        print("\n(no per-process NVML figures here)")
        return
    names = sorted({name for row in by_process.values() for name in row})
    print("\nper process, GiB: NVML peak in the phase (estimate of that role)")
    print(f"{'phase':<16}" + "".join(f"{name:>18}" for name in names))
    for phase in ESTIMATED_PHASES:
        row, est = by_process.get(phase, {}), memory.get(phase) or {}
        cells = [f"{_f(row.get(name))} ({_f(est.get(name))})" for name in names]
        print(f"{phase:<16}" + "".join(f"{cell:>18}" for cell in cells))


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("preset")
    parser.add_argument("--num-rollout", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=540.0)
    parser.add_argument("--out", type=Path, default=None)
    ns = parser.parse_args(argv)
    with NvmlSampler() as sampler:
        events, wall, tail = run_preset(ns.preset, ns.num_rollout, {}, ns.timeout)
    print(f"== {ns.preset}: {ns.num_rollout} rollouts, {wall:.0f} s\n{tail}")
    print(table({ns.preset: summarize(events)}))
    figures = report(ns.preset, events, sampler.samples, sampler.process_samples)
    if ns.out is not None:
        name = ns.preset.replace(".", "_")
        (ns.out / f"{name}_events.jsonl").write_text("".join(json.dumps(e) + "\n"
                                                             for e in events))
        (ns.out / f"{name}_memory.json").write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
