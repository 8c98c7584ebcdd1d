"""CLI commands that judge and compare runs: health, compare, plot.

Light at import: engine.run.health is stdlib only; matplotlib is imported by `plot` alone.
Exit codes: 0 ok, 2 usage (unknown run), 4 an error-level health rule fired (`health`, for CI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ...engine.run.rundir import RunDir
from ...engine.vocabulary import Metric
from .common import EXIT_UNHEALTHY, EXIT_USAGE, RunArg, find_run_or_fail
from .common import fail as _fail


def register(app: typer.Typer) -> None:
    app.command("health")(health)
    app.command("compare")(compare)
    app.command("plot")(plot)


# ------------------------------------------------------------------------------------ health


def health(
    run_name: RunArg,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    no_write: Annotated[bool, typer.Option(
        "--no-write", help="Do not record the findings in the run's health.jsonl.")] = False,
) -> None:
    """Judge a run's PPO health from its events: clip fraction, KL jumps, entropy collapse,
    grad norm at the clip, explained variance, value loss, truncation, flat reward, the
    rollout/train log-prob gap, hangs (no event for 30 min while the driver is alive), reward
    requests pending with none answered for 60 s, and a run that failed (named, exit code 4).

    Thresholds: miles' documented ones, overridden by the preset's [health] table. Findings
    are recorded in the run's health.jsonl (each once, whoever judged it). Exit code 4 when an
    error-level rule fired, so it can gate CI.

    Example:

    \b
        ppodeck health 250101-120000-tiny-cpu
        ppodeck health runs/250101-120000-tiny-cpu-1a2b --json | jq .findings
    """
    from ...engine.run.health import judge_run

    rundir = find_run_or_fail(run_name)
    report = judge_run(rundir.path, write=not no_write)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report, rundir.path)
    if report.level == "error":
        raise typer.Exit(EXIT_UNHEALTHY)


def _print_report(report, run_dir: Path) -> None:  # noqa: ANN001 - engine.run.health.HealthReport
    from .samples import finding_hint
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"run {report.run_id} ({report.state}): {report.level.upper()} - "
               f"{report.rollouts_judged} rollouts judged, thresholds: {report.thresholds_from}")
    for finding in report.findings:
        live = " (still firing)" if finding in report.active else ""
        typer.echo(f"  {finding.line()}{live}")
        if hint := finding_hint(run_dir, report.run_id, finding.code, finding.rollout_id):
            typer.echo(f"    {hint}")
    if not report.findings:
        typer.echo("  no rule fired")



# ----------------------------------------------------------------------------------- compare

RunsArg = Annotated[list[str], typer.Argument(metavar="RUN...",
                                              help="Run ids, unique id prefixes, or paths.")]


def compare(
    run_names: RunsArg,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Compare runs: the resolved configs flag by flag (only the flags that differ), the mean
    time of each phase, and the final and best values of the PPO diagnostics (per-rollout
    means, aligned by rollout).

    Example:

    \b
        ppodeck compare 250101-120000-tiny-cpu 250102-090000-tiny-cpu
        ppodeck compare RUN_A RUN_B RUN_C --json | jq .diagnostics
    """
    from ...engine.run.stats import load_run

    if len(run_names) < 2:
        _fail("compare needs at least two runs. Fix: ppodeck compare RUN RUN [RUN...] "
              "(see `ppodeck runs ls`).", EXIT_USAGE)
    runs = [load_run(find_run_or_fail(name).path) for name in run_names]
    for run in runs:
        for note in run.notes:
            typer.echo(f"note: {run.run_id}: {note}", err=True)
    data = comparison(runs)
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    _print_comparison(data)


def comparison(runs: list) -> dict:  # list[engine.run.stats.RunStats]
    from ...engine.run.stats import DIAGNOSTICS, config_diff

    phases = sorted({name for run in runs for name in run.phase_seconds})
    diagnostics = {}
    for metric in DIAGNOSTICS:
        if not any(metric in run.series for run in runs):
            continue
        diagnostics[metric] = [
            {"final": run.final(metric), "best": _best(run.best(metric)),
             "rollouts": len(run.series.get(metric, ()))} for run in runs]
    return {
        "runs": [{"id": r.run_id, "path": str(r.path), "state": r.state,
                  "wall_seconds": r.wall_seconds, "flags_known": len(r.values)} for r in runs],
        "config_diff": {flag: values for flag, values in config_diff(runs)},
        "phase_mean_seconds": {
            name: [_mean(run.phase_seconds.get(name)) for run in runs] for name in phases},
        "diagnostics": diagnostics,
    }


def _best(best: tuple[int, float] | None) -> dict | None:
    return None if best is None else {"rollout": best[0], "value": best[1]}


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _print_comparison(data: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console.width = 200
    ids = [r["id"] for r in data["runs"]]

    def table(title: str, first: str) -> Table:
        t = Table(title=title, title_justify="left", box=None)
        t.add_column(first, no_wrap=True)
        for run_id in ids:
            t.add_column(run_id, overflow="fold")
        return t

    runs = table("runs", "")
    runs.add_row("state", *(r["state"] for r in data["runs"]))
    runs.add_row("wall time", *(_secs(r["wall_seconds"]) for r in data["runs"]))
    console.print(runs)
    flags = table("config: flags that differ", "flag")
    for flag, values in data["config_diff"].items():
        flags.add_row(flag, *(_val(v) for v in values))
    blind = [r["id"] for r in data["runs"] if not r.get("flags_known")]
    if not data["config_diff"]:
        # a watched miles dump may record no flags at all: then "the same" would be a guess
        flags.add_row("(same resolved config)" if not blind else
                      f"(no flag compared: {', '.join(blind)} records none)", *("" for _ in ids))
    console.print(flags)
    phases = table("phase: mean seconds", "phase")
    for name, values in data["phase_mean_seconds"].items():
        phases.add_row(name, *(_secs(v) for v in values))
    console.print(phases)
    diag = table("PPO diagnostics: final (best @ rollout)", "metric")
    for metric, cells in data["diagnostics"].items():
        diag.add_row(metric, *(_cell(c) for c in cells))
    console.print(diag)


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _val(value: object) -> str:
    return "-" if value is None else str(value)


def _cell(cell: dict) -> str:
    final = "-" if cell["final"] is None else f"{cell['final']:.4g}"
    best = cell["best"]
    return final if best is None else f"{final} ({best['value']:.4g} @ {best['rollout']})"


# -------------------------------------------------------------------------------------- plot

# the monitor's charts: (title, [metric, ...]); several runs are overlaid, aligned by rollout
CHARTS = (
    ("reward", [Metric.REWARD]),
    ("value loss", [Metric.VALUE_LOSS]),
    ("KL and clip fraction", [Metric.PPO_KL, Metric.KL_LOSS, Metric.PG_CLIPFRAC]),
    ("explained variance", [Metric.EXPLAINED_VARIANCE]),
)
PLOT_INSTALL = "pip install 'ppodeck[plot]'   (or: .venv/bin/pip install matplotlib)"


def plot(
    run_names: RunsArg,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE.png|svg",
                                      help="Picture to write; the suffix picks the format.")],
) -> None:
    """Draw the monitor's charts (reward, value loss, KL and clip fraction, explained
    variance) for one or more runs, overlaid and aligned by rollout, into a PNG or SVG.

    Needs matplotlib (the `plot` extra).

    Example:

    \b
        ppodeck plot 250101-120000-tiny-cpu --out tiny.png
        ppodeck plot RUN_A RUN_B --out compare.svg
    """
    from ...engine.run.stats import load_run

    if out.suffix.lower() not in (".png", ".svg"):
        _fail(f"--out {out}: the picture must be .png or .svg", EXIT_USAGE)
    runs = [load_run(find_run_or_fail(name).path) for name in run_names]
    try:
        draw(runs, out)
    except ImportError:
        _fail(f"plot needs matplotlib, which is not installed. Fix: {PLOT_INSTALL}", EXIT_USAGE)
    except OSError as exc:
        _fail(f"could not write {out}: {exc.strerror or exc}", EXIT_USAGE)
    typer.echo(str(out))


def draw(runs: list, out: Path) -> None:  # list[engine.run.stats.RunStats]
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (title, metrics) in zip(axes.flat, CHARTS, strict=True):
        drawn = 0
        for run in runs:
            for metric in metrics:
                points = run.series.get(metric)
                if not points:
                    continue
                label = run.run_id if len(metrics) == 1 else f"{run.run_id} {metric}"
                ax.plot([p[0] for p in points], [p[1] for p in points], label=label,
                        linewidth=1.2)
                drawn += 1
        ax.set_title(title)
        ax.set_xlabel("rollout")
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data (no critic, or not logged)", ha="center",
                    va="center", transform=ax.transAxes, color="gray")
    fig.suptitle(", ".join(run.run_id for run in runs), fontsize=9)
    fig.savefig(out)
    plt.close(fig)


# ------------------------------------------------------ tail and runs ls (cli/tail, cli/runs)


PROGRESS_EVERY_S = 10.0


class TailJudge:
    """Judges the events `tail` prints, as it prints them; each finding becomes a `health`
    event shown after the event that made it fire, and is recorded in health.jsonl."""

    def __init__(self, rundir: RunDir) -> None:
        from ...engine.run.health import HealthJudge, run_facts, run_thresholds
        from ...engine.run.rundir import read_status

        self.rundir = rundir
        thresholds, _ = run_thresholds(rundir.path, read_status(rundir).get("preset"))
        self.judge = HealthJudge(thresholds, run_facts(rundir.path)[0], rundir.path)
        self.progress_shown: tuple[int, int, float] | None = None  # (sent, answered, when)

    def after(self, event: dict) -> list[dict]:
        return self._events(self.judge.feed([event]))

    def end(self) -> list[dict]:
        """The run is over: judge its last rollout."""
        return self._events(self.judge.finish())

    def idle(self, driver_alive: bool) -> list[dict]:
        import time

        now = time.time()
        return self._progress(now) + self._events(self.judge.check_hang(now, driver_alive))

    def _progress(self, now: float) -> list[dict]:
        """The reward phase's progress as a log line while requests are pending: when the
        counts change, and every PROGRESS_EVERY_S while they do not (so a wait shows)."""
        from ...engine.run.reward_progress import read_progress

        progress = read_progress(self.rundir.path)
        if progress is None or not progress.pending:
            return []
        counts = (progress.sent, progress.answered)
        shown = self.progress_shown
        if shown is not None and shown[:2] == counts and now - shown[2] < PROGRESS_EVERY_S:
            return []
        self.progress_shown = (*counts, now)
        return [{"v": 1, "ts": now, "kind": "log", "level": "info", "source": "reward",
                 "rollout_id": progress.rollout_id, "msg": progress.line()}]

    def _events(self, findings: list) -> list[dict]:
        from ...engine.run.health import record_or_note

        for note in record_or_note(self.rundir.path, findings) if findings else []:
            typer.echo(f"warning: {note}", err=True)
        return [f.to_event(self.judge.last_event_ts) for f in findings]  # the firing time


def snapshot_preset_health(rundir: RunDir, preset: str) -> None:
    """Keep the launching preset's [health] table with the run (health.toml), so `ppodeck
    health` judges it later with the thresholds it was launched under."""
    from ...engine.run.health import preset_health_table, snapshot_thresholds

    table = preset_health_table(preset)
    if not table:
        return
    try:
        snapshot_thresholds(rundir.path, table)
    except OSError as exc:
        typer.echo(f"warning: the preset's [health] thresholds were not kept with the run "
                   f"({exc}); `ppodeck health` will read the preset again", err=True)
        return
    typer.echo(f"health thresholds from the preset's [health]: "
               f"{', '.join(f'{k}={v}' for k, v in table.items())}", err=True)


def format_health(event: dict) -> str:
    where = "" if event.get("rollout_id") is None else f" rollout {event['rollout_id']}:"
    return (f"{event.get('level')} {event.get('code')}{where} {event.get('message')}. "
            f"Fix: {event.get('fix')}")


def health_column(run_path: Path) -> str:
    """`runs ls`: ok, "2 warn", "1 error 3 warn", or - without events."""
    from ...engine.run.health import run_level

    try:
        return run_level(run_path)
    except OSError:
        return "?"
