"""A finished run's forecast (made at launch, kept in status.json) against its measured wall time
(status.json's launched -> ended: when the `ppodeck run` command started; created -> ended for a
run launched otherwise), phase by phase.

    python bench/forecast_error.py RUN [RUN...]     # a run id, prefix or path

To measure the forecast's error on this machine: make one calibration run, then the run to
judge (its forecast comes from the calibration run, since runs of this machine kind count):

    ppodeck run tiny-cpu --set num-rollout=10 && ppodeck run tiny-cpu --set num-rollout=30
    python bench/forecast_error.py <the second run>
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ppodeck.engine.run.events import read_events  # noqa: E402
from ppodeck.engine.run.pace import judge_pace, phase_times  # noqa: E402
from ppodeck.engine.run.rundir import find_run, read_status  # noqa: E402


def report(name: str) -> None:
    rundir = find_run(name)
    status = read_status(rundir)
    forecast = status.get("forecast") or {}
    if not forecast.get("seconds") or not status.get("ended"):
        print(f"{rundir.id}: no forecast at launch or not finished ({forecast.get('basis')})")
        return
    start, since = (status["launched"], "command started") if status.get("launched") else (
        status["created"], "created")
    measured = float(status["ended"]) - float(start)
    error = forecast["seconds"] / measured - 1
    events, _ = read_events(rundir.events_jsonl)
    times = phase_times(events)
    print(f"{rundir.id}: forecast {forecast['seconds']:.1f} s, measured {measured:.1f} s "
          f"({since} -> ended): error {error * 100:+.1f}%  [{forecast['basis']}]")
    print(f"  init: forecast {forecast.get('init_s')} s, measured {times.init_s:.1f} s; "
          f"{judge_pace(times, forecast).text}")
    for phase, expected in (forecast.get("phase_s") or {}).items():
        seen = times.median_per_phase().get(phase)
        if seen is not None:
            print(f"  {phase:<16} forecast {expected:.3f} s/rollout, measured {seen:.3f}")
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    for run in sys.argv[1:]:
        report(run)
