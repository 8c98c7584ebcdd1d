"""The runs noun: `runs ls`, `runs add`, `stop`, `attach`, and where run and tail are registered.

The commands live one job a module: cli/launch.py (`run`), cli/progress.py (the attached view),
cli/tail.py (`tail`), this module (listing, registering a miles dump, stop, attach).

Data goes to stdout, diagnostics to stderr. Exit codes: 0 ok, 1 invalid config, 2 usage
(unknown run, bad --set), 3 run failed, 130 interrupted. engine.config, engine.presets and
engine.launch.local are imported inside the commands so `ppodeck --help` stays fast.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ...engine.run.rundir import (
    RUNS_DIR_ENV,
    RunDir,
    RunInfo,
    list_runs,
    read_status,
    runs_root,
)
from .common import (
    EXIT_FAILED,
    EXIT_USAGE,
    RunArg,
    find_run_or_fail,
    revive_follower_of,
)
from .common import err as _err
from .common import fail as _fail
from .launch import run
from .progress import rollout_count_text
from .save_check import runs_saves
from .tail import tail

if TYPE_CHECKING:
    from ...engine.run.bounds import Speed
    from ...engine.run.pace import Pace


_RUNS_HELP = f"Runs live under ${RUNS_DIR_ENV} (default ./runs)."


def register(app: typer.Typer) -> None:
    """Add run, runs ls, tail, stop and attach to the ppodeck app."""
    app.command("run")(run)
    runs_app = typer.Typer(help=f"Inspect runs. {_RUNS_HELP}", no_args_is_help=True,
                           rich_markup_mode=None, pretty_exceptions_enable=False)
    runs_app.command("ls")(runs_ls)
    runs_app.command("add")(runs_add)
    runs_app.command("saves")(runs_saves)
    app.add_typer(runs_app, name="runs")
    app.command("tail")(tail)
    app.command("stop")(stop)
    app.command("attach")(attach)


# ----------------------------------------------------------------------------------- runs ls

RunsRootOption = Annotated[Path | None, typer.Option(
    "--root", envvar=RUNS_DIR_ENV, show_envvar=True,
    help="Directory that holds the runs (default ./runs).")]


def runs_ls(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
    root: RunsRootOption = None,
) -> None:
    """List runs, newest first: id, state, preset, rollout i/N, start time, detail.

    A run whose driver died without saying so is shown as lost.

    Example:

    \b
        ppodeck runs ls
        PPODECK_RUNS_DIR=/data/runs ppodeck runs ls --json
    """
    infos = list_runs(root)
    if as_json:
        typer.echo(json.dumps([{**asdict(i), "path": str(i.path), "job": _job_of(i),
                                "health": _health_of(i), **_verdicts_json(i)} for i in infos],
                              indent=2))
        return
    if not infos:
        _err(f"no runs under {root or runs_root()}; start one with `ppodeck run PRESET`")
        return
    console = Console()
    if not console.is_terminal:
        console.width = 1000  # piped: full rows, one per line, for grep and awk
    console.print(_runs_table(infos))


def runs_add(
    dump: Annotated[Path, typer.Argument(metavar="DIR",
                                         help="A miles --dump-details directory.")],
    root: RunsRootOption = None,
) -> None:
    """Watch a miles run: its --dump-details directory becomes a run that `runs ls`, attach,
    tail, health, compare and plot take. Nothing is written into DIR; PPO Deck's files about
    it (its events, health findings) live in a run directory of its own under the runs root.
    While DIR grows, a follower keeps that run current. Prints the run id.

    Example:

    \b
        ppodeck runs add /data/miles/dump-qwen3-4b-ppo
        ppodeck tail /data/miles/dump-qwen3-4b-ppo --kind metrics
    """
    from ...engine.miles.watch import MilesDumpError, open_dump

    try:
        rundir, new = open_dump(dump.expanduser(), root)
    except (MilesDumpError, OSError) as exc:
        _fail(f"cannot add {dump}: {exc}", EXIT_USAGE)
    if not new:
        _err(f"{dump} was already watched as run {rundir.id}; brought up to date")
    typer.echo(rundir.id)


def _runs_table(infos: list[RunInfo]) -> Table:
    """Every column but detail keeps its full width; detail folds into what is left."""
    headers = ("id", "state", "preset", "rollout", "started", "health", "pace", "saves",
               "speed")
    rows = [(i.id, i.state, i.preset, rollout_count_text(i.rollout_id, i.num_rollout),
             _when(i.started), _health_of(i), *_verdicts_text(i),
             _job_note(_job_of(i)) + i.detail) for i in infos]
    table = Table(box=None)
    for col, header in enumerate(headers):
        table.add_column(header, no_wrap=True,
                         min_width=max(len(header), *(len(row[col]) for row in rows)))
    table.add_column("detail", overflow="fold", min_width=20)
    for row in rows:
        table.add_row(*row)
    return table


def _job_of(info: RunInfo) -> dict[str, Any] | None:
    """The Ray job of a submitted run, with the job status its follower last saw."""
    return read_status(RunDir(info.path)).get("job")


def _health_of(info: RunInfo) -> str:
    """The worst health finding (`ppodeck health`); judged when the events changed."""
    from .health import health_column

    return health_column(info.path)


def _verdicts(info: RunInfo) -> tuple[Pace, str, Speed]:
    """Pace against the launch forecast (engine/run/pace.py), the saves' badge and the phase
    furthest below its bound on this machine (engine/run/bounds.py), from one read of the
    run's events."""
    from ...engine.run.bounds import run_speed
    from ...engine.run.pace import run_events, run_verdicts

    rundir = RunDir(info.path)
    events = run_events(rundir)
    pace, saves = run_verdicts(rundir, events)
    return pace, saves, run_speed(info.path, events=events)


def _verdicts_json(info: RunInfo) -> dict[str, Any]:
    pace, saves, speed = _verdicts(info)
    return {"pace": pace.text if pace.ratio is not None else None, "pace_ratio": pace.ratio,
            "saves": saves, "speed": speed.as_dict()}


def _verdicts_text(info: RunInfo) -> tuple[str, str, str]:
    pace, saves, speed = _verdicts(info)
    return (pace.text.removeprefix("pace: ") if pace.ratio is not None else "-"), saves, \
        speed.short()


def _job_note(job: dict[str, Any] | None) -> str:
    return f"[job {job.get('status', '?')} at {job.get('address')}] " if job else ""


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


# ------------------------------------------------------------------------------ stop, attach


def stop(
    run_name: RunArg,
    force: Annotated[
        bool, typer.Option("--force", help="SIGKILL the driver's process group at once.")
    ] = False,
) -> None:
    """Stop a run: after its current rollout (SIGINT), or at once with --force (SIGKILL).

    Runs are looked up under $PPODECK_RUNS_DIR (default ./runs).

    Example:

    \b
        ppodeck stop 250101-120000-tiny-cpu
        ppodeck stop 250101-120000-tiny-cpu --force
    """
    from ...engine.launch.local import stop_run
    from ...engine.run.source import dump_of, is_driven

    rundir = find_run_or_fail(run_name)
    if dump_of(rundir) is not None and not is_driven(rundir):
        from ...engine.miles.watch import stop_follower

        typer.echo(stop_follower(rundir))  # the follower ends; miles is not ours to stop
        return
    try:
        typer.echo(stop_run(rundir, force=force))
    except OSError as exc:
        _fail(f"could not signal run {rundir.id}: {exc}", EXIT_FAILED)


def attach(run_name: RunArg) -> None:
    """Open the monitor on a run that is running or finished.

    Closing the monitor never stops the run. Runs are looked up under $PPODECK_RUNS_DIR
    (default ./runs).

    Example:

    \b
        ppodeck attach 250101-120000-tiny-cpu
    """
    rundir = find_run_or_fail(run_name)
    revive_follower_of(rundir)
    try:
        from ..tui.app import run_tui
    except ImportError as exc:
        _fail(f"the TUI monitor is not available ({exc}); follow the run with "
              f"`ppodeck tail {rundir.id} --follow` instead", EXIT_USAGE)
    code = run_tui(attach=str(rundir.path))
    if code:  # an internal error: the app has printed why and where its crash log is
        raise typer.Exit(code)
