#!/usr/bin/env python3
"""A preset's real run against check()'s estimates: GPU memory per phase, pinned host memory
of the offloaded train state, offload rates and the step breakdown (issue 20's report for
qwen3-1.7b-ppo-1gpu).

    python3 bench/preset_memory.py qwen3-1.7b-ppo-1gpu --num-rollout 4 --out $OUT   # H200
    .venv/bin/python bench/preset_memory.py tiny-cpu --num-rollout 3                # CPU: no NVML

While `ppodeck run` runs, a thread samples NVML's used bytes (all GPUs summed) every 50 ms;
each phase's peak is the highest sample between its start and end events, over all rollouts.
The estimate is check()'s derived memory table (engine/config/derived.py: GiB per GPU, total of
actor + critic + rollout) and host_offload_gib (engine.host_memory's figure). Host bytes
measured: the largest offload event of each model (what its StorageOffloader copied to pinned
memory).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from step_bench import run_preset, summarize, table  # noqa: E402

GIB = float(1 << 30)
ESTIMATED_PHASES = ("generate", "critic_train", "actor_train")


class NvmlSampler:
    """(time.time(), used bytes summed over GPUs) every `period` seconds; empty without NVML."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.samples = period, []
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
        while not self._stop.is_set():
            used = sum(int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)
            self.samples.append((time.time(), used))
            self._stop.wait(self.period)

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def phase_peaks(events: list[dict], samples: list[tuple[float, int]]) -> dict[str, float]:
    """Highest NVML sample (GiB) inside each phase name's intervals."""
    starts: dict[tuple[str, object], float] = {}
    peaks: dict[str, float] = {}
    for e in events:
        if e["kind"] != "phase":
            continue
        key = (e["name"], e.get("rollout_id"))
        if e["state"] == "start":
            starts[key] = float(e["ts"])
        elif key in starts:
            inside = [used for ts, used in samples if starts[key] <= ts <= float(e["ts"])]
            if inside:
                peaks[e["name"]] = max(peaks.get(e["name"], 0.0), max(inside) / GIB)
    return peaks


def estimates(preset: str) -> tuple[dict, dict | None]:
    """check()'s per-phase memory table and the pinned host estimate of the preset."""
    from engine.config import check
    from engine.config.derived import count_params, host_offload_gib
    from engine.config.resolve import resolve
    from engine.presets import load_preset, resolve_preset

    config = resolve_preset(load_preset(preset))
    resolved = resolve(config)
    return (dict(check(config).derived.memory_gib),
            host_offload_gib(resolved, count_params(resolved)))


def offload_figures(events: list[dict]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for model in ("actor", "critic", "rollout"):
        moves = [e for e in events if e["kind"] == "offload" and e["model"] == model
                 and not e["noop"]]
        rates = {d: [e["gbps"] for e in moves if e["direction"] == d and e["gbps"]]
                 for d in ("offload", "onload")}
        out[model] = {
            "host GiB": max((e["bytes"] for e in moves if e["direction"] == "offload"),
                            default=0) / GIB or None,
            "offload GB/s": statistics.fmean(rates["offload"]) if rates["offload"] else None,
            "onload GB/s": statistics.fmean(rates["onload"]) if rates["onload"] else None,
        }
    return out


def report(preset: str, events: list[dict], samples: list[tuple[float, int]]) -> dict:
    memory, host = estimates(preset)
    peaks = phase_peaks(events, samples)
    print(f"\nGPU memory, GiB: NVML peak inside the phase vs check()'s estimate "
          f"({len(samples)} samples)")
    print(f"{'phase':<16}{'NVML peak':>12}{'estimate':>12}{'peak/est':>10}")
    for phase in ESTIMATED_PHASES:
        peak, est = peaks.get(phase), (memory.get(phase) or {}).get("total")
        ratio = f"{peak / est:>10.2f}" if peak and est else f"{'-':>10}"
        print(f"{phase:<16}{_f(peak):>12}{_f(est):>12}{ratio}")
    moves = offload_figures(events)
    print("\npinned host memory of the offloaded state, GiB, and offload rates")
    print(f"{'model':<10}{'measured':>10}{'estimate':>10}{'offload GB/s':>14}{'onload GB/s':>13}")
    for model, figures in moves.items():
        est = None if host is None else host[model]
        print(f"{model:<10}{_f(figures['host GiB']):>10}{_f(est):>10}"
              f"{_f(figures['offload GB/s']):>14}{_f(figures['onload GB/s']):>13}")
    measured_total = sum(f["host GiB"] or 0.0 for f in moves.values())
    print(f"{'total':<10}{_f(measured_total):>10}{_f(host and host['total']):>10}")
    return {"peaks_gib": peaks, "estimate_gib": memory, "host_estimate_gib": host,
            "offload": moves}


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
    figures = report(ns.preset, events, sampler.samples)
    if ns.out is not None:
        name = ns.preset.replace(".", "_")
        (ns.out / f"{name}_events.jsonl").write_text("".join(json.dumps(e) + "\n"
                                                             for e in events))
        (ns.out / f"{name}_memory.json").write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
