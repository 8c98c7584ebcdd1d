"""Runs list: running and finished runs under the runs root; Enter attaches the monitor."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ....engine.run.state import rollout_text
from .. import fmt
from ..messages import RunChosen, RunsListed
from ..widgets.footer import DeckFooter
from ..widgets.run_header import STATE_STYLES

HELP = """\
## Runs
Every run directory under the runs root ($PPODECK_RUNS_DIR or ./runs), newest first.
`enter` attaches the monitor (full history, then live updates), `x` stops the selected run,
`g` refreshes (the list also refreshes every few seconds). `space` marks runs and `c` compares
the marked ones (their charts overlaid by rollout, and the flags that differ).
"""


COLUMNS = (("run", 34), ("state", 10), ("preset", 16), ("rollout", 11), ("started", 16),
           ("detail", 48))


def _started(run: Any, now: float | None) -> str:
    if not isinstance(run.started, (int, float)):
        return "-"
    if now is None:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started))
    return f"{fmt.duration(now - run.started)} ago"


def _short(path: Path) -> str:
    """The run directory relative to the runs root's parent ("runs/<id>") when possible."""
    from ....engine.run.rundir import runs_root

    try:
        return str(Path(path).resolve().relative_to(runs_root().resolve().parent))
    except ValueError:
        return str(path)


class RunsScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "attach", "Attach", show=True),
        Binding("x", "stop_run", "Stop run"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare"),
        Binding("g", "refresh", "Refresh"),
        Binding("escape", "app.back", "Back"),
    ]
    HELP = HELP

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Any] = []
        self.marked: set[str] = set()  # run paths to compare

    def compose(self) -> ComposeResult:
        yield Static("Runs", classes="panel-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-detail", markup=False)
        yield DeckFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # fixed widths: the table neither jumps as runs come and go nor depends on timing
        for label, width in COLUMNS:
            table.add_column(label, width=width)
        self.action_refresh()
        self.set_interval(3.0, self.action_refresh)

    def action_refresh(self) -> None:
        self.list_worker()

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def list_worker(self) -> None:
        from ....engine.run.rundir import list_runs

        try:
            self.post_message(RunsListed(list_runs()))
        except OSError as exc:
            self.post_message(RunsListed([], f"cannot list runs: {exc}"))

    @on(RunsListed)
    def _listed(self, message: RunsListed) -> None:
        if message.error:
            self.notify(message.error, severity="error")
        if [(r.id, r.state, r.rollout_id) for r in message.runs] == [
                (r.id, r.state, r.rollout_id) for r in self.runs]:
            return
        self.runs = list(message.runs)
        self._fill(self.query_one(DataTable))

    def _fill(self, table: DataTable) -> None:
        from rich.text import Text

        cursor = table.cursor_row
        table.clear()
        for run in self.runs:
            mark = "* " if str(run.path) in self.marked else ""
            table.add_row(mark + run.id, Text(run.state, STATE_STYLES.get(run.state, "")),
                          run.preset or "-", rollout_text(run.rollout_id, run.num_rollout),
                          _started(run, getattr(self.app, "fixed_now", None)),
                          run.detail[:60], key=str(run.path))
        if not self.runs:
            self.query_one("#runs-detail", Static).update(
                "no runs yet: launch one from the editor (ctrl+o opens a preset)")
        elif cursor is not None:
            table.move_cursor(row=min(cursor, len(self.runs) - 1))

    def _selected(self) -> Any | None:
        table = self.query_one(DataTable)
        if not self.runs or table.cursor_row is None:
            return None
        return self.runs[min(table.cursor_row, len(self.runs) - 1)]

    @on(DataTable.RowHighlighted)
    def _highlighted(self) -> None:
        run = self._selected()
        if run is not None:
            self.query_one("#runs-detail", Static).update(f"{_short(run.path)}\n{run.detail}")

    @on(DataTable.RowSelected)
    def action_attach(self) -> None:
        run = self._selected()
        if run is not None:
            self.post_message(RunChosen(Path(run.path)))

    def action_mark(self) -> None:
        run = self._selected()
        if run is not None:
            self.marked ^= {str(run.path)}
            self._fill(self.query_one(DataTable))

    def action_compare(self) -> None:
        from .compare import CompareScreen

        chosen = [Path(r.path) for r in self.runs if str(r.path) in self.marked]
        if len(chosen) < 2:
            self.notify("mark at least two runs with space, then press c", severity="warning")
            return
        self.app.push_screen(CompareScreen(chosen))

    def action_stop_run(self) -> None:
        from .confirm import ConfirmDialog

        run = self._selected()
        if run is None:
            return
        body = (f"Send SIGINT to the driver of {run.id} ({run.state})? It stops after the "
                "current rollout; checkpoints already written are kept.")
        self.app.push_screen(ConfirmDialog("Stop run", body, "Stop run", "error",
                                           dialog_id="confirm-stop"),
                             lambda ok: self._stop_confirmed(run) if ok else None)

    def _stop_confirmed(self, run: Any) -> None:
        from ....engine.launch.local import stop_run
        from ....engine.run.rundir import RunDir

        try:
            self.notify(stop_run(RunDir(Path(run.path))), title="stop run")
        except OSError as exc:
            self.notify(f"could not stop {run.id}: {exc}", severity="error")
        self.action_refresh()
