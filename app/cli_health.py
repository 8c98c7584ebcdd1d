"""CLI commands that judge and compare runs: health, compare, plot.

Light at import: engine.health is stdlib only; matplotlib is imported by `plot` alone.
Exit codes: 0 ok, 2 usage (unknown run), 4 an error-level health rule fired (`health`, for CI).
"""

from __future__ import annotations

import json
from pathlib import Path
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



# ---------------------------------------------------------------- tail and runs ls (cli_runs)


class TailJudge:
    """Judges the events `tail` prints, as it prints them; each finding becomes a `health`
    event shown after the event that made it fire, and is recorded in health.jsonl."""

    def __init__(self, rundir: RunDir) -> None:
        from engine.health import HealthJudge, run_facts, run_thresholds
        from engine.rundir import read_status

        self.rundir = rundir
        thresholds, _ = run_thresholds(rundir.path, read_status(rundir).get("preset"))
        self.judge = HealthJudge(thresholds, run_facts(rundir.path)[0])

    def after(self, event: dict) -> list[dict]:
        return self._events(self.judge.feed([event]))

    def end(self) -> list[dict]:
        """The run is over: judge its last rollout."""
        return self._events(self.judge.finish())

    def idle(self, driver_alive: bool) -> list[dict]:
        import time

        return self._events(self.judge.check_hang(time.time(), driver_alive))

    def _events(self, findings: list) -> list[dict]:
        from engine.health import record_or_note

        for note in record_or_note(self.rundir.path, findings) if findings else []:
            typer.echo(f"warning: {note}", err=True)
        return [f.to_event() for f in findings]


def format_health(event: dict) -> str:
    where = "" if event.get("rollout_id") is None else f" rollout {event['rollout_id']}:"
    return (f"{event.get('level')} {event.get('code')}{where} {event.get('message')}. "
            f"Fix: {event.get('fix')}")


def health_column(run_path: Path) -> str:
    """`runs ls`: ok, "2 warn", "1 error 3 warn", or - without events."""
    from engine.health import run_level

    try:
        return run_level(run_path)
    except OSError:
        return "?"
