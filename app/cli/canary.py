"""`ppodeck canary`: run a short trusted recipe and hold it against the corridor kept from trusted
runs; `--refresh` makes the corridor (engine/launch/canary.py, engine/run/corridor.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .common import EXIT_FAILED, EXIT_INVALID, err, fail

EXIT_REGRESSED = EXIT_FAILED


def register(app: typer.Typer) -> None:
    app.command("canary")(canary)


def canary(
    preset: Annotated[str | None, typer.Option(
        "--preset", "-p", metavar="PRESET",
        help="The trusted recipe's preset (default: tiny-cpu on CPU, the 1-GPU preset on a "
             "GPU).")] = None,
    refresh: Annotated[bool, typer.Option(
        "--refresh", help="Run the recipe --runs times on this install, trusted, and write "
                          "the corridor from them (commit the file).")] = False,
    runs: Annotated[int, typer.Option(
        "--runs", min=1, metavar="N", help="Trusted runs for --refresh.")] = 2,
    corridor: Annotated[Path | None, typer.Option(
        "--corridor", metavar="FILE",
        help="The corridor file (default: the one versioned with PPO Deck for the preset).")
    ] = None,
) -> None:
    """Check this install against a trusted run: a short recipe, judged on reward, value loss,
    KL, clip fraction and step time against the corridor kept from trusted runs.

    Exit codes: 0 inside the corridor, 3 a regression (the metric and rollout are named), 1 no
    corridor or the run failed.

    Example:

    \b
        ppodeck canary
        ppodeck canary --preset tiny-cpu --refresh --runs 2
    """
    from ...engine.config.rules_engine import this_machine
    from ...engine.host.kind import machine_kind
    from ...engine.launch import canary as recipe
    from ...engine.run.corridor import STEP_TIME, corridor_path, read_corridor
    from ...engine.run.rundir import runs_root

    name = preset or recipe.default_recipe(this_machine().gpus)
    path = corridor or corridor_path(name)
    runs_dir = runs_root()
    if refresh:
        _refresh(name, path, runs, runs_dir, machine_kind())
        return
    try:
        kept = read_corridor(path)
    except FileNotFoundError:
        fail(f"no corridor for {name} at {path}. Fix: `ppodeck canary --preset {name} "
             "--refresh` on a trusted install", EXIT_INVALID)
    except ValueError as exc:
        fail(f"{exc}", EXIT_INVALID)
    if kept.get("machine") != machine_kind():
        err(f"note: the corridor was kept on {kept.get('machine')}, this is {machine_kind()}: "
            "step time and float order may differ")
    run = _run(recipe, name, runs_dir)
    breaches = recipe.check(kept, run)
    if not breaches:
        typer.echo(f"canary {name}: inside the corridor of {kept.get('trusted_runs')} trusted "
                   f"runs ({path.name}); run {run.rundir.path}")
        return
    typer.echo(f"canary {name}: REGRESSION ({len(breaches)} outside the corridor); run "
               f"{run.rundir.path}")
    for breach in breaches[:8]:
        typer.echo(f"  {breach.text()}")
    if any(b.metric == STEP_TIME for b in breaches):  # a busy machine is slow too: say how busy
        load = os.getloadavg()[0]
        typer.echo(f"  (load average {load:.1f} on {os.cpu_count()} CPUs while it ran)")
    raise typer.Exit(EXIT_REGRESSED)


def _run(recipe, name: str, runs_dir: Path):  # noqa: ANN001, ANN202 - the launch module
    err(f"canary: running {name} with {_overrides(recipe.recipe_overrides(name))} in {runs_dir}")
    try:
        return recipe.run_recipe(name, runs_dir)
    except recipe.CanaryError as exc:
        fail(str(exc), EXIT_INVALID)


def _overrides(values: dict) -> str:
    return ", ".join(f"{k.replace('_', '-')}={v}" for k, v in values.items() if v is not None)


def _refresh(name: str, path: Path, count: int, runs_dir: Path, machine: str) -> None:
    import json

    from ...engine.launch import canary as recipe

    trusted = [_run(recipe, name, runs_dir) for _ in range(count)]
    corridor = recipe.refresh(name, trusted, machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(corridor, indent=1, sort_keys=True) + "\n")
    typer.echo(f"corridor of {count} trusted runs written to {path}: commit it")
