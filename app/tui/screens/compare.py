"""Compare runs: reward, value loss, KL / clip fraction and explained variance of several runs
overlaid and aligned by rollout (per-rollout means, engine/run/stats.py), and the flags whose
resolved values differ. Opened from the runs list (space marks runs, c compares them)."""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from ....engine.run.state import SeriesPoints
from ....engine.vocabulary import Metric
from ..widgets.footer import DeckFooter
from ..widgets.metric_chart import Line, MetricChart

COLORS = ("green", "cyan", "orange", "magenta", "yellow", "blue", "red")
CHARTS = (
    ("compare-reward", "reward by rollout", (Metric.REWARD,)),
    ("compare-value-loss", "critic value loss by rollout", (Metric.VALUE_LOSS,)),
    ("compare-policy", "ppo_kl and clipfrac by rollout", (Metric.PPO_KL, Metric.PG_CLIPFRAC)),
    ("compare-ev", "explained variance by rollout", (Metric.EXPLAINED_VARIANCE,)),
)
SHORT = {Metric.PPO_KL: "kl", Metric.PG_CLIPFRAC: "clip"}


class RunsLoaded(Message):
    def __init__(self, runs: list, error: str | None = None) -> None:
        super().__init__()
        self.runs = runs
        self.error = error


def run_label(run_id: str) -> str:
    """`<preset>-<hex4>` of a `YYmmdd-HHMMSS-<preset>-<hex4>` id: what tells runs apart, whole
    (a fixed cut of the last 12 characters showed `iny-cpu-8759`)."""
    parts = run_id.split("-", 2)
    stamped = len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit()
    return parts[2] if stamped else run_id


def chart_lines(run_ids: list[str], metrics: tuple[str, ...]) -> tuple[Line, ...]:
    """One line per (run, metric); its key is "<run index>:<metric>"."""
    lines = []
    for i, run_id in enumerate(run_ids):
        for j, metric in enumerate(metrics):
            label = run_label(run_id) + (f" {SHORT.get(metric, metric)}" if len(metrics) > 1
                                         else "")
            lines.append(Line(f"{i}:{metric}", label, COLORS[(i + j * 3) % len(COLORS)]))
    return tuple(lines)


def diff_text(runs: list) -> str:
    from ....engine.run.stats import config_diff

    rows = config_diff(runs)
    if not rows:
        return "config: the resolved configs are the same"
    width = max(len(flag) for flag, _ in rows)
    return "config: flags that differ (in run order)\n" + "\n".join(
        f"  {flag:<{width}}  " + "  |  ".join("-" if v is None else str(v) for v in values)
        for flag, values in rows)


class CompareScreen(Screen[None]):
    DEFAULT_CSS = """
    #compare-charts { layout: grid; grid-size: 2 2; height: 1fr; }
    #compare-diff { height: auto; max-height: 10; padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "app.back", "Back")]
    HELP = ("## Compare runs\nEach chart overlays the runs' per-rollout means, aligned by "
            "rollout. Below: the flags whose resolved values differ. `ppodeck compare` and "
            "`ppodeck plot` give the same from the command line.")

    def __init__(self, run_dirs: list[Path]) -> None:
        super().__init__()
        self.run_dirs = run_dirs
        self.runs: list = []

    def compose(self) -> ComposeResult:
        ids = [p.name for p in self.run_dirs]
        yield Static("Compare: " + "  vs  ".join(ids), classes="panel-title")
        with Grid(id="compare-charts"):
            for chart_id, title, metrics in CHARTS:
                yield MetricChart(title, chart_lines(ids, metrics), id=chart_id, classes="chart")
        yield Static("loading runs…", id="compare-diff", markup=False)
        yield DeckFooter()

    def on_mount(self) -> None:
        self.load_worker()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def load_worker(self) -> None:
        from ....engine.run.stats import load_run

        try:
            self.post_message(RunsLoaded([load_run(p) for p in self.run_dirs]))
        except OSError as exc:
            self.post_message(RunsLoaded([], f"cannot read the runs: {exc}"))

    @on(RunsLoaded)
    def _loaded(self, message: RunsLoaded) -> None:
        if message.error:
            self.notify(message.error, severity="error")
            return
        self.runs = message.runs
        for chart in self.query(MetricChart):
            chart.set_points({key: self._points(key) for key in chart.keys})
        self.query_one("#compare-diff", Static).update(diff_text(self.runs))

    def _points(self, key: str) -> SeriesPoints | None:
        index, metric = key.split(":", 1)
        points = self.runs[int(index)].series.get(metric)
        if not points:
            return None
        xs, ys = [float(p[0]) for p in points], [p[1] for p in points]
        return SeriesPoints(xs, ys, ys, ys)
