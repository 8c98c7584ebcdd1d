"""What keeping samples costs (issue #34), and how fast a big rollout opens in the view.

1. tiny-cpu, side by side: the same run with samples kept (the default) and with
   --samples-per-rollout 0, alternating. Per rollout: the wall time between consecutive
   rollout metrics (median over rollouts 2..N) and each phase's, and, from the runs with
   samples, the writer thread's own wall and CPU time (it runs beside the loop in the driver
   process) as a share of the rollout time.
2. The loop's thread beside the busy writer thread: how late it wakes (the GIL), with the
   writer's per-sample yield (engine.run.samples.yield_gil) and without.
3. Scale: a synthetic 512-sample rollout (responses of up to --max-len tokens, float32 rows as
   the workers send them): the writer's time and the file's size; the time to open it
   (engine.run.samples.read_rows: what the view and `ppodeck samples` read) and to show it in the
   TUI's Samples view (Pilot: from the screen's push to the table filled; goal <= 200 ms).

Usage: .venv/bin/python bench/samples_overhead.py [--rollouts 8] [--pairs 2] [--max-len 1024]
                                                   [--skip-runs]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.run.samples import (  # noqa: E402
    FLOAT_TOKEN_FIELDS,
    format_bytes,
    read_rows,
    read_samples,
    write_rollout,
)
from ppodeck.engine.vocabulary import PHASE_END, Kind, StepKey  # noqa: E402
from tests.fixtures.make_samples import make_record  # noqa: E402

GOAL_SHARE = 0.02
GOAL_OPEN_S = 0.2


def rollout_seconds(events: list[dict]) -> list[float]:
    """Wall time of each rollout: between consecutive rollout metrics events (from rollout 2 on:
    rollout 0 is the critic-only warmup, 1 the first actor step's compile)."""
    stamps = [e["ts"] for e in events
              if e["kind"] == Kind.METRICS and e.get("step_key") == StepKey.ROLLOUT]
    return [b - a for a, b in zip(stamps[1:], stamps[2:], strict=False)]


def phase_seconds(events: list[dict]) -> dict[str, list[float]]:
    """Each top-level phase's seconds, rollouts 2 on (where the time moved, if it did)."""
    out: dict[str, list[float]] = {}
    for e in events:
        if (e["kind"] == Kind.PHASE and e.get("state") == PHASE_END and not e.get("parent")
                and (e.get("rollout_id") or 0) >= 2):
            out.setdefault(e["name"], []).append(e["seconds"])
    return out


def writer_figures(events: list[dict]) -> dict:
    for e in events:
        if e["kind"] == Kind.LOG and "writer_seconds" in e:
            return e
    raise SystemExit("the run with samples logged no samples figures (see its driver.log)")


CONFIGS = (("samples off", 0), ("samples kept", None))


def tiny_cpu(rollouts: int, pairs: int) -> None:
    """`pairs` runs of each, alternating (off, kept, off, kept, ...): the machine's load
    drifts, so neither side gets all the quiet minutes."""
    from tests.engine.helpers import driver_log_tail, run_preset

    per_rollout: dict[str, list[float]] = {label: [] for label, _ in CONFIGS}
    phases: dict[str, dict[str, list[float]]] = {label: {} for label, _ in CONFIGS}
    figures = []
    for _ in range(pairs):
        for label, limit in CONFIGS:
            with tempfile.TemporaryDirectory() as tmp:
                rundir, status, events = run_preset(Path(tmp), "tiny-cpu", timeout=900,
                                                    num_rollout=rollouts,
                                                    samples_per_rollout=limit)
                if status["state"] != "succeeded":
                    raise SystemExit(f"{label}: {status}\n{driver_log_tail(rundir)}")
            per_rollout[label] += rollout_seconds(events)
            for name, seconds in phase_seconds(events).items():
                phases[label].setdefault(name, []).extend(seconds)
            if limit is None:
                figures.append(writer_figures(events))
    off, on = (statistics.median(per_rollout[label]) for label, _ in CONFIGS)
    print(f"tiny-cpu, {pairs} x {rollouts} rollouts of 128 samples each way (medians over "
          "rollouts 2 on):")
    for label, _ in CONFIGS:
        seconds = per_rollout[label]
        shown = ", ".join(f"{name} {statistics.median(v) * 1000:.0f}"
                          for name, v in sorted(phases[label].items()))
        print(f"  {label:<13} {statistics.median(seconds):.3f} s per rollout (min "
              f"{min(seconds):.3f}); phases ms: {shown}")
    fastest = [min(per_rollout[label]) for label, _ in CONFIGS]
    print(f"  ratio kept/off: {on / off:.3f} of the medians, {fastest[1] / fastest[0]:.3f} of the "
          f"fastest rollouts (goal <= {1 + GOAL_SHARE:.2f}; on a shared CPU the fastest are "
          "the least disturbed; the phases show where a difference sits)")
    wall = statistics.median(f["writer_seconds"] for f in figures)
    cpu = statistics.median(f["writer_cpu_seconds"] for f in figures)
    first = statistics.median(f["writer_first_seconds"] for f in figures)
    print(f"  writer thread per rollout: {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU = "
          f"{cpu / on:.2%} of the rollout time (goal <= {GOAL_SHARE:.0%}); the first rollout "
          f"also loads the tokenizer: {first:.2f} s; samples/ "
          f"{format_bytes(figures[-1]['samples_bytes'])} for {rollouts} rollouts")


def big_rollout(directory: Path, max_len: int) -> None:
    import numpy as np

    rng = random.Random(0)
    records = [make_record(0, i, rng, max_len=max_len) for i in range(512)]
    as_sent = [replace(r, **{name: np.asarray(getattr(r, name), dtype=np.float32)
                             for name in FLOAT_TOKEN_FIELDS}) for r in records]
    tokens = sum(r.response_length for r in records)
    start = time.perf_counter()
    path = write_rollout(directory, 0, as_sent)
    write_s = time.perf_counter() - start
    opens = []
    for _ in range(5):
        start = time.perf_counter()
        rows = read_rows(directory, 0)
        opens.append(time.perf_counter() - start)
    start = time.perf_counter()
    read_samples(directory, 0)
    whole_s = time.perf_counter() - start
    assert len(rows) == 512
    print(f"512-sample rollout, {tokens} response tokens (mean {tokens / 512:.0f}, max "
          f"{max_len}), {format_bytes(path.stat().st_size)}:")
    print(f"  write (JSON of float32 rows): {write_s * 1000:.0f} ms")
    median_open = statistics.median(opens) * 1000
    print(f"  open, read_rows (scalars + mean advantage): median {median_open:.0f}"
          f" ms; every list parsed (read_samples, --json): {whole_s * 1000:.0f} ms")
    view = asyncio.run(open_in_view(directory))
    print(f"  TUI Samples view, push to table filled and first sample shown: median "
          f"{statistics.median(view) * 1000:.0f} ms of {len(view)} (goal <= "
          f"{GOAL_OPEN_S * 1000:.0f} ms)")


async def open_in_view(run_dir: Path, repeats: int = 5) -> list[float]:
    from textual.app import App

    from ppodeck.app.tui.screens.samples import SamplesScreen
    from ppodeck.app.tui.widgets.sample_pane import SamplePane

    times = []
    app = App(css_path=str(Path(__file__).resolve().parents[1] / "app/tui/app.tcss"))
    async with app.run_test(size=(160, 48)) as pilot:  # a running app, as when `a` is pressed
        for _ in range(repeats):
            start = time.perf_counter()
            screen = SamplesScreen(run_dir)
            await app.push_screen(screen)
            while screen.query_one(SamplePane).record is None:
                await pilot.pause(0.005)
            times.append(time.perf_counter() - start)
            await app.pop_screen()
    return times


def gil_latency(directory: Path, repeats: int = 3) -> None:
    """The training loop's thread beside a busy writer thread: how late it wakes from 2 ms
    waits (Ray calls release the GIL the same way) while the writer writes tiny-cpu-sized
    rollouts (128 samples of 6 tokens), with the writer's per-sample GIL yield and without."""
    import threading

    import ppodeck.engine.run.samples as samples

    rng = random.Random(0)
    records = [make_record(0, i, rng, max_len=6) for i in range(128)]
    real_yield = samples.yield_gil

    def trial() -> tuple[float, float]:
        done, late = threading.Event(), []

        def write() -> None:
            for _ in range(5):
                write_rollout(directory, 0, records)
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        while not done.is_set():
            start = time.perf_counter()
            time.sleep(0.002)
            late.append(time.perf_counter() - start - 0.002)
        thread.join()
        return statistics.mean(late), max(late)

    results: dict[str, list[tuple[float, float]]] = {"with the yield": [], "without": []}
    try:
        for _ in range(repeats):
            for label, fn in (("with the yield", real_yield), ("without", lambda: None)):
                samples.yield_gil = fn
                results[label].append(trial())
    finally:
        samples.yield_gil = real_yield
    print("the loop's thread beside the writer (late wake-ups from 2 ms waits):")
    for label, runs in results.items():
        print(f"  {label:<15} mean {statistics.median(m for m, _ in runs) * 1000:.2f} ms, "
              f"worst {max(w for _, w in runs) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=2, help="runs of each, alternating")
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--skip-runs", action="store_true", help="only the 512-sample part")
    ns = parser.parse_args()
    if not ns.skip_runs:
        tiny_cpu(ns.rollouts, ns.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        gil_latency(Path(tmp))
        big_rollout(Path(tmp), ns.max_len)


if __name__ == "__main__":
    main()
