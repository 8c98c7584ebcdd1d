"""The canary: a short trusted recipe, run through the real launcher and driver, judged against
the corridor kept from trusted runs (engine/run/corridor.py).

On CPU the recipe is tiny-cpu for a few rollouts; on a GPU, the 1-GPU preset. The runs are
ordinary run directories (the canary's own runs dir), so a failed canary can be opened with
`ppodeck attach` like any run.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..presets import load_preset, resolve_preset
from ..run.corridor import Breach, build_corridor, judge, run_series
from ..run.events import read_events
from ..run.rundir import RunDir, read_status
from .local import prepare_run, start_driver

CPU_RECIPE = "tiny-cpu"
GPU_RECIPE = "qwen3-0.6b-ppo-1gpu"
# few rollouts, but past the critic-only warmup and far enough that the reward has moved
RECIPE_OVERRIDES: dict[str, Any] = {"num_rollout": 10, "save": None, "save_interval": None}
# The 1-GPU preset samples from random weights over a 151,936-token vocabulary, where copy-digit's
# ten digits are almost never drawn: its reward stays 0 and a broken loss cannot show. The canary
# gives it tiny-cpu's task and batch, an actor rate low enough that a rollout's KL stays small (a
# faster one lets float noise drive runs apart), and rollouts enough for the reward to rise.
GPU_TASK_OVERRIDES: dict[str, Any] = {
    "num_rollout": 20, "vocab_size": 32, "rollout_max_response_len": 6,
    "rollout_batch_size": 32, "entropy_coef": 0.01, "lr": 3e-6}
RUN_TIMEOUT_S = 900


class CanaryError(RuntimeError):
    """The canary's run did not finish: nothing could be judged."""


@dataclass(frozen=True)
class CanaryRun:
    rundir: RunDir
    series: dict[str, dict[int, float]]


def default_recipe(gpus: int) -> str:
    return GPU_RECIPE if gpus > 0 else CPU_RECIPE


def recipe_overrides(preset: str) -> dict[str, Any]:
    """The flags the canary sets over the preset's own."""
    return {**RECIPE_OVERRIDES, **(GPU_TASK_OVERRIDES if preset == GPU_RECIPE else {})}


def recipe(preset: str) -> dict[str, Any]:
    return {"preset": preset, "overrides": recipe_overrides(preset)}


def run_recipe(preset: str, runs_dir: Path, env: Mapping[str, str] | None = None,
               on_start: Callable[[RunDir], None] | None = None) -> CanaryRun:
    """One run of the recipe to its end; its series as the corridor judges them."""
    config = resolve_preset(load_preset(preset)).with_values(**recipe_overrides(preset))
    runs_dir.mkdir(parents=True, exist_ok=True)
    rundir = prepare_run(config, preset, run_dir=_fresh_dir(runs_dir, preset))
    if on_start is not None:
        on_start(rundir)
    proc = start_driver(rundir, env=dict(env or {}))
    _wait(proc)
    state = read_status(rundir).get("state")
    if state != "succeeded":
        raise CanaryError(f"the canary run {rundir.path} ended {state!r}: "
                          f"{read_status(rundir).get('detail', '')} (see its driver.log)")
    events, _ = read_events(rundir.events_jsonl)
    return CanaryRun(rundir, run_series(events))


def _fresh_dir(runs_dir: Path, preset: str) -> Path:
    n = 0
    while (runs_dir / f"canary-{preset}-{n}").exists():
        n += 1
    return runs_dir / f"canary-{preset}-{n}"


def _wait(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=RUN_TIMEOUT_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        os.killpg(proc.pid, signal.SIGINT)  # the driver stops its Ray and workers itself
        proc.wait(timeout=60)
        raise


def check(corridor: Mapping[str, Any], run: CanaryRun) -> list[Breach]:
    return judge(corridor, run.series)


def refresh(preset: str, runs: list[CanaryRun], machine: str) -> dict[str, Any]:
    return build_corridor(recipe(preset), [r.series for r in runs], machine)
