#!/usr/bin/env python3
"""Recompute the GPU figures of docs/performance.md from the evidence kept under bench/results/.

    python3 bench/evidence.py                  # every bench/results/*/evidence.toml
    python3 bench/evidence.py bench/results/e2e-qwen3-0.6b-369204e

Each evidence directory holds what a device call brought back (an events.jsonl or a bench log,
gzip-compressed) and `evidence.toml`: the command that made it, the commit it ran, the date and
machine, and each figure the docs quote from it with how it is computed (`measure`) and the
value quoted. The script recomputes each one from the files and says whether it matches, so a
figure can be checked after the fact on any machine (no GPU, no PPO Deck install: stdlib only).
Exit status 1 when a figure does not match or cannot be computed.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FIRST_STEADY_ROLLOUT = 2  # rollout 0 is critic-only, rollout 1 compiles the actor's phases


def read_text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else \
        path.read_text()


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in read_text(path).splitlines() if line.strip()]


def _steady(event: dict) -> bool:
    return (event.get("rollout_id") or 0) >= FIRST_STEADY_ROLLOUT


def phase_seconds(evs: list[dict], name: str) -> list[float]:
    """A phase's seconds in each steady rollout."""
    return [float(e["seconds"]) for e in evs if e["kind"] == "phase" and e["state"] == "end"
            and e["name"] == name and e.get("rollout_id") is not None and _steady(e)]


def metric_values(evs: list[dict], key: str) -> list[float]:
    """A rollout metric's value in each steady rollout."""
    return [float(e["metrics"][key]) for e in evs if e["kind"] == "metrics"
            and e["metrics"].get(key) is not None and _steady(e)]


def rollout_walls(evs: list[dict]) -> list[float]:
    """Seconds between successive rollouts' metrics (the wall time of a rollout), steady ones."""
    stamps = {e["rollout_id"]: e["ts"] for e in evs if e["kind"] == "metrics"
              and e["step_key"] == "rollout/step"}
    return [stamps[r] - stamps[r - 1] for r in sorted(stamps)
            if r - 1 in stamps and r >= FIRST_STEADY_ROLLOUT]


SYNC_LINE = re.compile(r"weight sync ([0-9.]+) s via (\w+)")


def sync_seconds(evs: list[dict], path: str) -> list[float]:
    """The weight sync's seconds as its log line says, for the given path (cuda_ipc, ...)."""
    found = [SYNC_LINE.search(e["msg"]) for e in evs if e["kind"] == "log"]
    return [float(m[1]) for m in found if m and m[2] == path]


def offload_gbps(evs: list[dict], model_direction: str) -> list[float]:
    """GB/s of each real (not no-op) move of one model one way, e.g. 'critic offload'."""
    model, direction = model_direction.split()
    return [float(e["gbps"]) for e in evs if e["kind"] == "offload" and not e["noop"]
            and e["model"] == model and e["direction"] == direction]


def rollouts_with(evs: list[dict], key: str) -> list[float]:
    """How many distinct rollouts logged a metric (every rollout, not only steady ones)."""
    return [float(len({e.get("rollout_id") for e in evs if e["kind"] == "metrics"
                       and e["metrics"].get(key) is not None}))]


def first_metric(evs: list[dict], launch: dict) -> list[float]:
    """Seconds from the launch (the wall clock the device script stamped just before
    `ppodeck run`) to the run's first metrics event."""
    stamps = [e["ts"] for e in evs if e["kind"] == "metrics"]
    return [min(stamps) - float(launch["launch_ts"])] if stamps else []


def event_span(evs: list[dict]) -> list[float]:
    """Seconds from a run's first event to its last (the driver's own wall time)."""
    return [evs[-1]["ts"] - evs[0]["ts"]] if evs else []


def json_value(data: dict, arg: str) -> list[float]:
    """The number at a dotted key path ('forecast.seconds'); 'a..b' is the value at b minus
    the value at a (two stamps of one file: 'launch_ts..done_ts')."""
    def at(path: str) -> float:
        value: object = data
        for key in path.split("."):
            value = value[key]  # type: ignore[index]
        return float(value)  # type: ignore[arg-type]

    start, _, end = arg.partition("..")
    return [at(end) - at(start)] if end else [at(start)]


def log_numbers(text: str, pattern: str) -> list[float]:
    """Every number a regex's first group catches in a bench log (thousands commas dropped)."""
    return [float(m.replace(",", "")) for m in re.findall(pattern, text, re.M)]


EVENT_MEASURES: dict[str, Callable[[list[dict], str], list[float]]] = {
    "phase": phase_seconds, "metric": metric_values, "sync": sync_seconds,
    "offload": offload_gbps, "rollout_wall": lambda evs, _: rollout_walls(evs),
    "rollouts_with": rollouts_with, "event_span": lambda evs, _: event_span(evs)}
SUMMARIES: dict[str, Callable[[list[float]], float]] = {
    "mean": statistics.fmean, "median": statistics.median, "min": min, "max": max, "sum": sum,
    "count": lambda values: float(len(values))}


def compute(directory: Path, figure: dict) -> float:
    """One figure from its file (or files: their values pooled): a measure's values reduced by
    `summary` (mean by default). `ratio` divides two such figures (`numerator`,
    `denominator`), `error_pct` is (numerator / denominator - 1) x 100 (a forecast against
    its measurement); `first_metric` reads its launch stamp from the JSON file `arg` names."""
    if figure["measure"] in ("ratio", "error_pct"):
        ratio = compute(directory, figure["numerator"]) / compute(directory, figure["denominator"])
        return ratio if figure["measure"] == "ratio" else (ratio - 1.0) * 100.0
    names = [figure["file"]] if isinstance(figure["file"], str) else figure["file"]
    measure, arg = figure["measure"], figure.get("arg", "")
    values: list[float] = []
    for name in names:
        source = directory / name
        if measure == "log":
            values += log_numbers(read_text(source), arg)
        elif measure == "json":
            values += json_value(json.loads(read_text(source)), arg)
        elif measure == "first_metric":
            values += first_metric(events(source), json.loads(read_text(directory / arg)))
        else:
            values += EVENT_MEASURES[measure](events(source), arg)
    if not values:
        raise ValueError(f"no values for {measure} {arg!r} in {', '.join(names)}")
    return SUMMARIES[figure.get("summary", "mean")](values)


def matches(value: float, quoted: float) -> bool:
    """Equal at the precision the docs quote (the quoted value's decimals)."""
    decimals = len(repr(quoted).partition(".")[2].rstrip("0")) if "." in repr(quoted) else 0
    return round(value, decimals) == round(quoted, decimals)


def check(directory: Path) -> list[str]:
    """Lines for one evidence directory; a line starting 'MISMATCH' or 'ERROR' fails it."""
    meta = tomllib.loads((directory / "evidence.toml").read_text())
    lines = [f"{directory.name}: {meta['command']} (commit {meta['commit']}, {meta['date']}, "
             f"{meta['machine']})"]
    for figure in meta["figure"]:
        try:
            value = compute(directory, figure)
        except (OSError, ValueError, KeyError) as exc:
            lines.append(f"ERROR     {figure['name']}: {exc}")
            continue
        verdict = "ok" if matches(value, figure["value"]) else "MISMATCH"
        lines.append(f"{verdict:<9} {figure['name']}: {value:.6g} (quoted {figure['value']})")
    return lines


def evidence_dirs(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    return sorted(p.parent for p in RESULTS.glob("*/evidence.toml"))


def main(argv: list[str]) -> int:
    failed = False
    for directory in evidence_dirs(argv):
        for line in check(directory):
            print(line)
            failed |= line.startswith(("MISMATCH", "ERROR"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
