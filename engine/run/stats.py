"""Per-rollout series, phase times and a config diff of finished or running runs (LIGHT).

`ppodeck compare` and `ppodeck plot` read runs through here: every metric is reduced to one
value per rollout (the mean of its steps), so runs with different batch arithmetic line up by
rollout id.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vocabulary import PHASE_END, Kind, Metric, State, StepKey
from .events import read_events

# the PPO diagnostics compare shows, and which way is better ("max", "min"; None: no best)
DIAGNOSTICS: dict[str, str | None] = {
    Metric.REWARD: "max",
    Metric.EXPLAINED_VARIANCE: "max",
    Metric.VALUE_LOSS: "min",
    Metric.VALUE_CLIPFRAC: None,
    Metric.PG_CLIPFRAC: None,
    Metric.PPO_KL: None,
    Metric.KL_LOSS: None,
    Metric.ENTROPY: None,
    Metric.GRAD_NORM: None,
    Metric.RESPONSE_LEN: None,
    Metric.TRUNCATED: "min",
    Metric.LOGPROB_GAP: "min",
}


@dataclass
class RunStats:
    run_id: str
    path: Path
    state: str = State.UNKNOWN
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    phase_seconds: dict[str, list[float]] = field(default_factory=dict)
    wall_seconds: float | None = None
    values: dict[str, Any] = field(default_factory=dict)  # resolved config, dest -> value
    notes: list[str] = field(default_factory=list)

    def final(self, metric: str) -> float | None:
        points = self.series.get(metric)
        return points[-1][1] if points else None

    def best(self, metric: str) -> tuple[int, float] | None:
        points, way = self.series.get(metric), DIAGNOSTICS.get(metric)
        if not points or way is None:
            return None
        pick = max if way == "max" else min
        return pick(points, key=lambda p: p[1])


def rollout_series(events: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(rollout_id, mean of its values in that rollout)], by rollout id."""
    sums: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        rid, metrics = event.get("rollout_id"), event.get("metrics")
        if event.get("kind") != Kind.METRICS or not isinstance(rid, int) or \
                not isinstance(metrics, dict) or event.get("step_key") == StepKey.EVAL:
            continue
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key][rid].append(float(value))
    return {key: [(rid, statistics.fmean(v)) for rid, v in sorted(by_rid.items())]
            for key, by_rid in sums.items()}


def phase_seconds(events: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for event in events:
        seconds = event.get("seconds")
        if event.get("kind") == Kind.PHASE and event.get("state") == PHASE_END and \
                isinstance(seconds, (int, float)):
            out[str(event.get("name"))].append(float(seconds))
    return dict(out)


def load_run(path: Path) -> RunStats:
    from .rundir import RunDir, read_status

    rundir = RunDir(Path(path))
    status = read_status(rundir)
    stats = RunStats(rundir.id, rundir.path, str(status.get("state") or State.UNKNOWN))
    try:
        events, warnings = read_events(rundir.events_jsonl)
    except FileNotFoundError:
        events, warnings = [], [f"{rundir.events_jsonl} does not exist yet"]
    stats.notes += warnings
    stats.series = rollout_series(events)
    stats.phase_seconds = phase_seconds(events)
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    stats.wall_seconds = stamps[-1] - stamps[0] if len(stamps) > 1 else None
    stats.values, note = resolved_values(rundir.config_toml)
    if not rundir.config_toml.exists():
        stats.values, note = _watched_values(rundir)
    stats.notes += note
    return stats


def _watched_values(rundir: Any) -> tuple[dict[str, Any], list[str]]:  # engine.run.rundir.RunDir
    """A watched miles dump has no config.toml: the args miles keeps in its meta.json."""
    from .source import dump_of, known_values

    dump = dump_of(rundir)
    if dump is None:
        return {}, [f"{rundir.config_toml} does not exist"]
    values = known_values(dump)
    return values, [f"miles dump {dump}: only the {len(values)} flags its meta.json records "
                    "are compared"]


def resolved_values(config_toml: Path) -> tuple[dict[str, Any], list[str]]:
    from ..config import resolve
    from ..host.machine import environment
    from ..presets import PresetError, config_from_toml

    try:
        config = config_from_toml(config_toml.read_text(), config_toml)
    except (OSError, PresetError) as exc:
        return {}, [f"{config_toml} unreadable: {exc}"]
    return dict(resolve(config, environment())), []


def config_diff(runs: list[RunStats]) -> list[tuple[str, list[Any]]]:
    """(--flag, [value per run]) for every schema flag whose resolved value differs."""
    from ..config.schema import FLAGS

    rows = []
    for flag in FLAGS:
        if flag.secret or flag.dest == "run_dir":
            continue
        values = [run.values.get(flag.dest) for run in runs]
        # a run that does not record the flag (a watched miles dump) is left out of the test
        known = [run.values[flag.dest] for run in runs if flag.dest in run.values]
        if any(v != known[0] for v in known[1:]):
            rows.append((flag.name, values))
    return rows
