"""Samples of a run, rollout by rollout: a table of the rollout's samples and a pane showing the
selected response token by token, coloured by a chosen strip (engine/run/samples.py holds the data).

Opened from the monitor (`a`). It only reads `<run>/samples/`; while following (the default)
it moves to each new rollout as its file appears, so it works on finished runs and on
`attach` alike. Files are read on a thread worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ....engine.run.samples import SORTS, SampleRecord, SampleRow, describe_ids
from ..widgets.footer import DeckFooter
from ..widgets.sample_pane import STRIPS, SamplePane
from ..widgets.samples_table import SamplesTable

POLL_S = 1.0

HELP = """\
## Samples
The run's samples (`<run>/samples/`, also `ppodeck samples RUN`): each rollout's responses with
their rewards and per-token numbers.

- Table: index, reward as trained, the mean raw advantage over trained tokens, length,
  status (completed, truncated at the max length, aborted) and the start of the response.
  `o` changes the order (index, reward, advantage, length).
- Pane: the selected response, each token coloured by the strip `c` picks: raw advantage,
  critic value, return (red below 0, green above), the trainer/rollout log-prob gap, entropy.
  `tab` focuses it; `left` / `right` move the token cursor and its numbers show below.
- `[` / `]` previous / next rollout, `l` follows the latest (new rollouts appear as they
  are written).
- From the monitor, `f` opens the samples behind the latest health finding: its rollout, in
  the order and strip that put them first (a KL or log-prob gap finding: the largest gap
  first; truncation: the longest first).
"""


@dataclass
class RolloutRead(Message):
    rollout_id: int
    rows: list[SampleRow]
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


class SamplesScreen(Screen[None]):
    BINDINGS = [
        Binding("left_square_bracket", "rollout(-1)", "Prev rollout"),
        Binding("right_square_bracket", "rollout(1)", "Next rollout"),
        Binding("l", "follow", "Latest"),
        Binding("o", "sort", "Order"),
        Binding("c", "strip", "Strip"),
        Binding("escape", "app.back", "Back"),
    ]
    HELP = HELP

    def __init__(self, run_dir: Path, rollout_id: int | None = None, sort: str = "index",
                 strip: str = "advantage", note: str = "") -> None:
        """`rollout_id` None follows the latest; `note` says why this view was opened (a
        health finding's samples)."""
        super().__init__()
        self.run_dir = Path(run_dir)
        self.rollouts: list[int] = []
        self.rollout_id = rollout_id  # shown (or being read)
        self.following = rollout_id is None
        self.note = note
        self.rows: list[SampleRow] = []  # the shown rollout's samples (scalars)
        self.parsed: dict[int, SampleRecord] = {}  # whole samples, parsed when shown
        self.sort = sort
        self.strip = strip
        self.loaded: int | None = None  # the rollout whose records are shown

    def compose(self) -> ComposeResult:
        yield Static("", id="samples-title", markup=False)
        yield SamplesTable(id="samples-table")
        yield SamplePane(id="sample-pane")
        yield DeckFooter()

    def on_mount(self) -> None:
        self._poll()
        self.set_interval(POLL_S, self._poll)

    # ---- reading ---------------------------------------------------------------------------

    def _poll(self) -> None:
        """New rollout files: the title's list grows, and a following view moves on."""
        from ....engine.run.samples import list_rollouts

        rollouts = list_rollouts(self.run_dir)
        if rollouts == self.rollouts and self.loaded is not None:
            return
        self.rollouts = rollouts
        if self.following and rollouts:
            self.rollout_id = rollouts[-1]
        if self.rollout_id is not None and self.rollout_id != self.loaded:
            self.read_worker(self.rollout_id)
        self._show_title()

    @work(thread=True, exclusive=True, group="samples", exit_on_error=False)
    def read_worker(self, rollout_id: int) -> None:
        from ....engine.run.samples import SamplesNotFound, read_rows

        warnings: list[str] = []
        try:
            rows = read_rows(self.run_dir, rollout_id, warnings)
        except SamplesNotFound as exc:
            self.post_message(RolloutRead(rollout_id, [], error=str(exc)))
            return
        if self.sort == "gap":  # each row parsed whole: here, not on the UI's thread
            for row in rows:
                _ = row.max_gap
        self.post_message(RolloutRead(rollout_id, rows, warnings))

    @on(RolloutRead)
    def _rollout_read(self, message: RolloutRead) -> None:
        if message.rollout_id != self.rollout_id:
            return  # the user moved on while it was read
        if message.error:
            self.notify(message.error, severity="warning", timeout=6)
        for warning in message.warnings:
            self.notify(warning, severity="warning", timeout=6)
        self.rows, self.loaded, self.parsed = message.rows, message.rollout_id, {}
        table = self.query_one(SamplesTable)
        selected = table.selected()
        table.show(self.rows, self.sort, selected.index if selected else None)
        self._show_sample()
        self._show_title()

    # ---- actions ---------------------------------------------------------------------------

    def action_rollout(self, by: int) -> None:
        if not self.rollouts:
            return
        current = self.rollouts.index(self.rollout_id) if self.rollout_id in self.rollouts \
            else len(self.rollouts) - 1
        target = self.rollouts[max(0, min(len(self.rollouts) - 1, current + by))]
        self.following = False
        self.show_rollout(target)

    def show_rollout(self, rollout_id: int) -> None:
        self.rollout_id = rollout_id
        self.read_worker(rollout_id)
        self._show_title()

    def action_follow(self) -> None:
        self.following = True
        self.loaded = None  # re-read the latest at once
        self._poll()

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        table = self.query_one(SamplesTable)
        selected = table.selected()
        table.show(self.rows, self.sort, selected.index if selected else None)
        self._show_title()

    def action_strip(self) -> None:
        names = list(STRIPS)
        self.strip = names[(names.index(self.strip) + 1) % len(names)]
        self._show_sample()
        self._show_title()

    @on(DataTable.RowHighlighted, "#samples-table")
    def _row(self) -> None:
        self._show_sample()

    @on(DataTable.RowSelected, "#samples-table")
    def _chosen(self) -> None:
        self.query_one(SamplePane).focus()

    def _show_sample(self) -> None:
        row = self.query_one(SamplesTable).selected()
        record = None
        if row is not None:
            try:
                if row.index not in self.parsed:
                    self.parsed[row.index] = row.record()
                record = self.parsed[row.index]
            except (ValueError, TypeError) as exc:  # checked at read; a sentence, not a crash
                self.notify(f"sample {row.index}: cannot read its tokens ({exc})",
                            severity="error")
        self.query_one(SamplePane).show(record, self.strip)

    def _show_title(self) -> None:
        if not self.rollouts:
            text = (f"samples · {self.run_dir.name} · none yet (samples/ is written after "
                    "each rollout; --samples-per-rollout 0 keeps none)")
        else:
            live = " · following the latest" if self.following else ""
            text = (f"samples: rollout {self.rollout_id} of {describe_ids(self.rollouts)} · "
                    f"{len(self.rows)} samples · order {self.sort} · strip {self.strip}"
                    f"{live} · {self.note or self.run_dir.name}")
        self.query_one("#samples-title", Static).update(text)
