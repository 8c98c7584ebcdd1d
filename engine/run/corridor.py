"""The canary's corridor: per-rollout bands of a short trusted recipe, and the judgement of a run.

A corridor is kept from trusted runs of one recipe (a preset plus overrides) on one machine
kind: for each metric and rollout the lowest and highest value those runs saw, widened by a
margin (absolute plus relative) so run-to-run float noise stays inside and a broken install
does not. Step time is judged by its median over the run, against the trusted median times a
factor (a shared machine's load moves it by tens of percent; a regression by far more).

Pure: events in, verdicts out. The runs are made by engine/launch/canary.py.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..vocabulary import INIT_PHASE, Kind, Metric, StepKey

CORRIDOR_VERSION = 1
CORRIDOR_DIR = Path(__file__).resolve().parent / "corridors"

# metric -> (what the user reads, how a rollout's value is made from its events, abs, rel
# margin). Reward is smoothed over three rollouts: one rollout of 128 samples moves it by noise.
METRICS: dict[str, tuple[str, str, float, float]] = {
    Metric.REWARD: ("reward", "rollout-mean3", 0.04, 0.25),
    Metric.VALUE_LOSS: ("value loss", "train-mean", 0.01, 0.6),
    Metric.PPO_KL: ("KL", "train-mean", 0.01, 1.0),
    Metric.PG_CLIPFRAC: ("clip fraction", "train-mean", 0.05, 1.0),
}
STEP_TIME = "step_time"
STEP_TIME_FACTOR = 3.0  # slower than 3x the trusted median (or faster than 1/3) is a regression


@dataclass(frozen=True)
class Breach:
    metric: str
    label: str
    rollout: int | None
    value: float
    low: float
    high: float

    def text(self) -> str:
        where = f"at rollout {self.rollout}" if self.rollout is not None else "over the run"
        return (f"{self.label} ({self.metric}) {where}: {self.value:.4g}, outside the trusted "
                f"corridor [{self.low:.4g}, {self.high:.4g}]")


# ------------------------------------------------------------------------ series from events
def run_series(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """metric -> rollout -> value, as the corridor judges it, plus step time per rollout."""
    rollout: dict[str, dict[int, float]] = {}
    train: dict[str, dict[int, list[float]]] = {}
    step_seconds: dict[int, float] = {}
    for event in events:
        if event.get("kind") == Kind.METRICS:
            _take_metrics(event, rollout, train)
        elif (event.get("kind") == Kind.PHASE and event.get("state") == "end"
              and event.get("rollout_id") is not None and not event.get("parent")
              and event.get("name") != INIT_PHASE):
            rid = int(event["rollout_id"])
            step_seconds[rid] = step_seconds.get(rid, 0.0) + float(event.get("seconds") or 0.0)
    series: dict[str, dict[int, float]] = {}
    for metric, (_label, how, _a, _r) in METRICS.items():
        if how == "rollout-mean3":
            series[metric] = _mean3(rollout.get(metric, {}))
        else:
            series[metric] = {r: statistics.fmean(v) for r, v in train.get(metric, {}).items()}
    series[STEP_TIME] = step_seconds
    return series


def _take_metrics(event: Mapping[str, Any], rollout: dict[str, dict[int, float]],
                  train: dict[str, dict[int, list[float]]]) -> None:
    rid = event.get("rollout_id", event.get("step"))
    for name, value in (event.get("metrics") or {}).items():
        if name not in METRICS or not isinstance(value, (int, float)) or rid is None:
            continue
        if event.get("step_key") == StepKey.ROLLOUT:
            rollout.setdefault(name, {})[int(rid)] = float(value)
        elif event.get("step_key") == StepKey.TRAIN:
            train.setdefault(name, {}).setdefault(int(rid), []).append(float(value))


def _mean3(values: Mapping[int, float]) -> dict[int, float]:
    out = {}
    for rid in values:
        window = [values[r] for r in (rid - 2, rid - 1, rid) if r in values]
        out[rid] = statistics.fmean(window)
    return out


# ------------------------------------------------------------------------------- the corridor
def build_corridor(recipe: Mapping[str, Any], runs: Sequence[Mapping[str, Mapping[int, float]]],
                   machine: str) -> dict[str, Any]:
    """The corridor of `runs` (each run_series of a trusted run of `recipe`)."""
    bands: dict[str, dict[str, list[float]]] = {}
    for metric, (_label, _how, margin_abs, margin_rel) in METRICS.items():
        rollouts = sorted(set.intersection(*(set(r.get(metric, {})) for r in runs)))
        bands[metric] = {}
        for rid in rollouts:
            seen = [r[metric][rid] for r in runs]
            low, high = min(seen), max(seen)
            pad = margin_abs + margin_rel * max(abs(low), abs(high))
            bands[metric][str(rid)] = [round(low - pad, 6), round(high + pad, 6)]
    medians = [_median_step(r) for r in runs]
    return {"version": CORRIDOR_VERSION, "recipe": dict(recipe), "machine": machine,
            "trusted_runs": len(runs), "bands": bands,
            "step_time_median": round(statistics.median(medians), 4),
            "step_time_factor": STEP_TIME_FACTOR}


def _median_step(series: Mapping[str, Mapping[int, float]]) -> float:
    """Rollout 0 is left out: it holds the first compile and the warm-up of every cache."""
    steps = [s for rid, s in series.get(STEP_TIME, {}).items() if rid > 0]
    return statistics.median(steps) if steps else 0.0


def judge(corridor: Mapping[str, Any], series: Mapping[str, Mapping[int, float]]
          ) -> list[Breach]:
    """Every breach of the corridor, in rollout order; a missing value is a breach too."""
    breaches: list[Breach] = []
    for metric, band in corridor["bands"].items():
        label = METRICS.get(metric, (metric,))[0]
        for rid_text, (low, high) in band.items():
            rid = int(rid_text)
            value = series.get(metric, {}).get(rid)
            if value is None:
                breaches.append(Breach(metric, f"{label} (missing)", rid, float("nan"), low,
                                       high))
            elif not low <= value <= high:
                breaches.append(Breach(metric, label, rid, value, low, high))
    breaches.sort(key=lambda b: (b.rollout if b.rollout is not None else 1 << 30, b.metric))
    trusted = float(corridor.get("step_time_median") or 0.0)
    median = _median_step(series)
    factor = float(corridor.get("step_time_factor") or STEP_TIME_FACTOR)
    if trusted > 0 and not trusted / factor <= median <= trusted * factor:
        breaches.append(Breach(STEP_TIME, "median step time (s)", None, median,
                               trusted / factor, trusted * factor))
    return breaches


def corridor_path(preset: str, directory: Path = CORRIDOR_DIR) -> Path:
    return directory / f"{preset}.json"


def read_corridor(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if data.get("version") != CORRIDOR_VERSION:
        raise ValueError(f"{path}: corridor version {data.get('version')!r}, this PPO Deck "
                         f"reads {CORRIDOR_VERSION}. Fix: `ppodeck canary --refresh`")
    return data
