"""Run a preset through the real launcher and driver (Ray + Megatron + PPO) and collect events."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ppodeck.engine.launch.local import prepare_run, start_driver
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status


def run_preset(tmp_path: Path, preset: str, timeout: float,
               env: dict[str, str] | None = None, **overrides: Any
               ) -> tuple[RunDir, dict[str, Any], list[dict[str, Any]]]:
    """`env`: extra variables for the driver (and so its Ray workers)."""
    config = resolve_preset(load_preset(preset)).with_values(**overrides)
    rundir = prepare_run(config, preset, run_dir=tmp_path / "run")
    env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp"), **(env or {})}
    proc = start_driver(rundir, env=env)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    events, _warnings = read_events(rundir.events_jsonl)
    return rundir, read_status(rundir), events


def metric_series(events: list[dict[str, Any]], name: str, step_key: str = "rollout/step"
                  ) -> list[tuple[int, float]]:
    return [(e["step"], e["metrics"][name]) for e in events
            if e["kind"] == "metrics" and e.get("step_key") == step_key
            and e["metrics"].get(name) is not None]


def phase_starts(events: list[dict[str, Any]]) -> list[tuple[int | None, str]]:
    """The phases begun, in order; init's steps (phase events with a parent) left out."""
    return [(e.get("rollout_id"), e["name"]) for e in events
            if e["kind"] == "phase" and e["state"] == "start" and not e.get("parent")]


def init_step_ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "phase" and e.get("parent") == "init"
            and e["state"] == "end"]


def driver_log_tail(rundir: RunDir, lines: int = 60) -> str:
    if not rundir.driver_log.exists():
        return ""
    return "\n".join(rundir.driver_log.read_text(errors="replace").splitlines()[-lines:])
