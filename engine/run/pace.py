"""Pace: a run's phase times against its forecast, and the calibrations kept runs give.

- `calibration_of(rundir)`: a finished run's timings as a forecast calibration
  (engine/config/forecast.py): launch overhead, init, the first rollout's extra, each phase's
  median seconds per steady rollout, seconds per save.
- `local_calibrations(kind)`: those of this runs directory's succeeded runs of machine kind
  `kind` (status.json records the kind at launch), newest first.
- `judge_pace(phase_times, forecast)`: the speed verdict during a run: "on pace", or
  "40% slower: generate 2.1x its forecast", naming the phase that costs the most over its
  forecast. Works on any run source whose events carry phase spans (a driven or watched miles
  run's phases come from its own timers, engine/miles/watch.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import rules_engine
from ..config.forecast import ROLLOUT_PHASES, Calibration, Work, work_of
from ..config.machine import Machine
from ..vocabulary import INIT_PHASE, PHASE_LABEL, Kind, Phase, State, StepKey
from .events import read_events
from .rundir import RunDir, list_runs, read_status

ON_PACE = 0.20  # within +-20% of the forecast per steady rollout is on pace
FAR_OFF = 1.0  # twice the forecast or more: health's pace rule warns
MAX_LOCAL_RUNS = 12  # the newest runs of this machine kind are enough and keep validate fast


@dataclass
class PhaseTimes:
    """A run's phase spans folded: rollout -> phase -> seconds, init, first/last timestamps."""

    by_rollout: dict[int, dict[str, float]] = field(default_factory=dict)
    init_s: float | None = None
    first_ts: float | None = None  # the first phase start (init's)
    last_end_ts: float | None = None
    _ranks: dict[tuple[int, str], dict[Any, float]] = field(default_factory=dict, repr=False)

    def add(self, event: Mapping[str, Any]) -> None:
        if event.get("kind") != Kind.PHASE or event.get("parent"):
            return
        ts = float(event.get("ts") or 0.0)
        if event.get("state") == "start":
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
            return
        if event.get("state") != "end":
            return
        self.last_end_ts = ts if self.last_end_ts is None else max(self.last_end_ts, ts)
        seconds = float(event.get("seconds") or 0.0)
        if event.get("name") == INIT_PHASE:
            self.init_s = seconds
        elif event.get("rollout_id") is not None:
            # miles' timers come per rank (a watched or driven miles run): the phase lasts as
            # long as its slowest rank; our driver's spans carry no rank
            rid, name = int(event["rollout_id"]), event["name"]
            ranks = self._ranks.setdefault((rid, name), {})
            rank = event.get("rank")
            ranks[rank] = ranks.get(rank, 0.0) + seconds
            self.by_rollout.setdefault(rid, {})[name] = max(ranks.values())

    def steady(self) -> dict[int, dict[str, float]]:
        """Rollouts after the first one of the run (which carries one-off warm-ups)."""
        first = min(self.by_rollout, default=0)
        return {rid: p for rid, p in self.by_rollout.items() if rid > first}

    def occurrences(self, phase: str) -> list[float]:
        return [self.by_rollout[rid][phase] for rid in sorted(self.by_rollout)
                if phase in self.by_rollout[rid]]

    def median_per_phase(self) -> dict[str, float]:
        """Each phase's median seconds per rollout it ran in, its first time left out: that one
        carries the one-off compiles and warm-ups (the actor's comes after the critic-only
        warmup, so not in the first rollout)."""
        out = {}
        for phase in ROLLOUT_PHASES:
            seen = self.occurrences(phase)
            if len(seen) > 1:  # a phase seen once has no steady time yet
                out[phase] = statistics.median(seen[1:])
        return out

    def first_extra(self) -> float:
        """What the first time of each phase took beyond its steady median, summed."""
        medians = self.median_per_phase()
        return sum(max(0.0, self.occurrences(p)[0] - m) for p, m in medians.items())


def phase_times(events: Iterable[Mapping[str, Any]]) -> PhaseTimes:
    times = PhaseTimes()
    for event in events:
        times.add(event)
    return times


# ---------------------------------------------------------------------------- calibrations
def calibration_of(rundir: RunDir) -> Calibration | None:
    """A succeeded run's timings, or None (not finished, too short, or no machine kind)."""
    status = read_status(rundir)
    machine, created, ended = status.get("machine"), status.get("created"), status.get("ended")
    if status.get("state") != State.SUCCEEDED or not machine or not created or not ended:
        return None
    if status.get("resumed_from") is not None:
        return None  # a resumed run's events start mid-way: its init is not one launch's
    if status.get("job"):
        return None  # a Ray job ran on the cluster's machines, not on the kind it recorded
    work = _work(rundir)
    times = phase_times(_phase_events(rundir.events_jsonl))
    if work is None or times.init_s is None or len(times.steady()) < 2:
        return None
    assert times.first_ts is not None and times.last_end_ts is not None
    phase_s = times.median_per_phase()
    saves = [p[Phase.SAVE] for p in times.by_rollout.values() if Phase.SAVE in p]
    # a CLI launch records when its command started: the seconds before the run directory
    # (imports, check()) are the user's wait too
    start = float(status.get("launched") or created)
    return Calibration(
        machine=str(machine), source=f"run {rundir.id}", work=work,
        launch_s=max(0.0, times.first_ts - start) + max(0.0, float(ended) - times.last_end_ts),
        init_s=times.init_s, first_extra_s=times.first_extra(),
        phase_s=phase_s, save_s=statistics.median(saves) if saves else None,
        wall_s=float(ended) - start, load=status.get("load_at_launch"))


def _phase_events(path: Path) -> Iterable[dict[str, Any]]:
    """Only the `phase` lines: a long run's events are mostly metrics, and validate reads up
    to MAX_LOCAL_RUNS runs' files for a forecast. A torn or bad line is skipped (tail says so)."""
    import json

    try:
        with open(path, "rb") as handle:
            for line in handle:
                if b'"kind":"phase"' in line or b'"kind": "phase"' in line:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue
    except OSError:
        return


def _work(rundir: RunDir) -> Work | None:
    from ..config import resolve
    from ..config.derived import derive_resolved
    from ..host.machine import environment
    from ..presets import PresetError, config_from_toml

    try:
        config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
        env = environment()
        r = resolve(config.with_values(run_dir=str(rundir.path)), env)
    except (OSError, PresetError, ValueError):
        return None
    derived = derive_resolved(r, env)
    return work_of(r, derived.params, derived.samples_per_rollout)


def local_calibrations(kind: str, root: Path | None = None) -> list[Calibration]:
    """This runs directory's succeeded runs of machine kind `kind`, newest first."""
    found: list[Calibration] = []
    try:
        runs = list_runs(root)
    except OSError:
        return []
    for info in runs:
        if len(found) >= MAX_LOCAL_RUNS:
            break
        rundir = RunDir(info.path)
        status = read_status(rundir)
        if status.get("machine") != kind or status.get("state") != State.SUCCEEDED:
            continue
        cal = calibration_of(rundir)
        if cal is not None:
            found.append(cal)
    return found


def machine_here(root: Path | None = None) -> Machine:
    """This machine, with its runs' calibrations ahead of the kept ones (the forecast's)."""
    from ..host.kind import cpu_count, load_average

    machine = rules_engine.current_machine()  # by module: tests pin the machine there
    local = tuple(local_calibrations(machine.kind, root))
    return replace(machine, calibrations=local + machine.calibrations, load=load_average(),
                   cpus=cpu_count())


# ------------------------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class Pace:
    ratio: float | None  # observed / forecast seconds per steady rollout
    worst_phase: str | None
    worst_ratio: float | None
    text: str

    @property
    def far_off(self) -> bool:
        return self.ratio is not None and abs(self.ratio - 1.0) >= FAR_OFF


def judge_pace(times: PhaseTimes, forecast: Mapping[str, Any] | None) -> Pace:
    """Observed steady per-phase medians against the forecast's per-rollout phase seconds."""
    expected = dict((forecast or {}).get("phase_s") or {})
    observed = times.median_per_phase()
    shared = [p for p in expected if p in observed and expected[p] > 0]
    if not shared:
        reason = "no forecast for this run" if not expected else "no steady rollout yet"
        return Pace(None, None, None, f"pace: {reason}")
    ratio = sum(observed[p] for p in shared) / sum(expected[p] for p in shared)
    worst = max(shared, key=lambda p: observed[p] - expected[p])
    worst_ratio = observed[worst] / expected[worst]
    if abs(ratio - 1.0) <= ON_PACE:
        return Pace(ratio, worst, worst_ratio, "on pace")
    label = PHASE_LABEL.get(worst, worst)
    if ratio > 1:
        text = f"{(ratio - 1) * 100:.0f}% slower: {label} {worst_ratio:.1f}x its forecast"
    else:
        best = min(shared, key=lambda p: observed[p] - expected[p])
        text = (f"{(1 - ratio) * 100:.0f}% faster: {PHASE_LABEL.get(best, best)} "
                f"{observed[best] / expected[best]:.1f}x its forecast")
    return Pace(ratio, worst, worst_ratio, text)


def run_pace(rundir: RunDir) -> Pace:
    """The verdict of a run directory, from its recorded forecast and its events."""
    events, _ = read_events(rundir.events_jsonl)
    return judge_pace(phase_times(events), read_status(rundir).get("forecast"))


def save_badge(events: Iterable[Mapping[str, Any]]) -> str:
    """The saves' badge: "ok x3" (each save read back whole), "DAMAGED r29", or "-" (none)."""
    checks = [e["save_check"] for e in events if isinstance(e.get("save_check"), dict)]
    if not checks:
        return "-"
    bad = [c for c in checks if not c.get("ok")]
    if bad:
        return f"DAMAGED r{bad[-1].get('rollout_id')}"
    return f"ok x{len(checks)}"


def run_events(rundir: RunDir) -> list[dict[str, Any]]:
    """A run's events, or none where they cannot be read (a run still being created)."""
    try:
        return read_events(rundir.events_jsonl)[0]
    except OSError:
        return []


def run_verdicts(rundir: RunDir, events: list[dict[str, Any]] | None = None
                 ) -> tuple[Pace, str]:
    """A run's pace and save badge, from one read of its events (`events`: read already)."""
    if events is None:
        events = run_events(rundir)
    return (judge_pace(phase_times(events), read_status(rundir).get("forecast")),
            save_badge(events))


class PaceWatch:
    """For a follower: the verdict after each finished rollout, only when it changed."""

    def __init__(self, forecast: Mapping[str, Any] | None) -> None:
        self.forecast = forecast
        self.times = PhaseTimes()
        self.shown: str | None = None

    def after(self, event: Mapping[str, Any]) -> str | None:
        self.times.add(event)
        if not self.forecast or event.get("kind") != Kind.METRICS or \
                event.get("step_key") != StepKey.ROLLOUT:
            return None
        pace = judge_pace(self.times, self.forecast)
        if pace.ratio is None or pace.text == self.shown:
            return None
        self.shown = pace.text
        return f"pace: {pace.text}"
