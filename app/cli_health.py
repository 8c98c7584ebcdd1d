"""CLI commands that judge and compare runs: health, compare, plot.

Light at import: engine.health is stdlib only; matplotlib is imported by `plot` alone.
Exit codes: 0 ok, 2 usage (unknown run), 4 an error-level health rule fired (`health`, for CI).
"""

from __future__ import annotations

import json
from typing import Annotated, NoReturn

import typer

from engine.rundir import RunDir, RunNotFound, find_run

EXIT_USAGE, EXIT_UNHEALTHY = 2, 4
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id, unique id prefix, or path.")]


def register(app: typer.Typer) -> None:
    app.command("health")(health)


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"ppodeck: {message}", err=True)
    raise typer.Exit(code)


def find(run_name: str) -> RunDir:
    try:
        return find_run(run_name)
    except RunNotFound as exc:
        _fail(str(exc), EXIT_USAGE)


# ------------------------------------------------------------------------------------ health


def health(
    run_name: RunArg,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    no_write: Annotated[bool, typer.Option(
        "--no-write", help="Do not record the findings in the run's health.jsonl.")] = False,
) -> None:
    """Judge a run's PPO health from its events: clip fraction, KL jumps, entropy collapse,
    grad norm at the clip, explained variance, value loss, truncation, flat reward, the
    rollout/train log-prob gap, and hangs (no event for 30 min while the driver is alive).

    Thresholds: miles' documented ones, overridden by the preset's [health] table. Findings
    are recorded in the run's health.jsonl (each once, whoever judged it). Exit code 4 when an
    error-level rule fired, so it can gate CI.

    Example:

    \b
        ppodeck health 250101-120000-tiny-cpu
        ppodeck health runs/250101-120000-tiny-cpu-1a2b --json | jq .findings
    """
    from engine.health import judge_run

    rundir = find(run_name)
    report = judge_run(rundir.path, write=not no_write)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report)
    if report.level == "error":
        raise typer.Exit(EXIT_UNHEALTHY)


def _print_report(report) -> None:  # noqa: ANN001 - engine.health.HealthReport, imported late
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"run {report.run_id} ({report.state}): {report.level.upper()} - "
               f"{report.rollouts_judged} rollouts judged, thresholds: {report.thresholds_from}")
    for finding in report.findings:
        live = " (still firing)" if finding in report.active else ""
        typer.echo(f"  {finding.line()}{live}")
    if not report.findings:
        typer.echo("  no rule fired")

