"""The samples of one rollout as a table: index, reward, mean raw advantage, length, status and
the start of the response. The screen hands down the records and the sort; a highlighted row
posts DataTable's own RowHighlighted, which the screen turns into the sample pane's sample."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from ....engine.run.samples import SampleRow, one_line, sort_samples

COLUMNS = (("index", 6), ("reward", 8), ("adv", 8), ("len", 5), ("status", 10),
           ("response", 72))
STATUS_STYLE = {"completed": "green", "truncated": "yellow", "aborted": "red", "failed": "red"}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


class SamplesTable(DataTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.shown: list[SampleRow] = []

    def on_mount(self) -> None:
        for label, width in COLUMNS:
            self.add_column(label, width=width, key=label)

    def show(self, records: Sequence[SampleRow], sort: str,
             keep_index: int | None = None) -> None:
        """Fill the rows in `sort` order; the cursor stays on sample `keep_index` if shown."""
        self.shown = sort_samples(records, sort)
        self.clear()
        self.add_rows([(str(r.index), _num(r.reward), _num(r.mean_advantage),
                        str(r.response_length), Text(r.status, STATUS_STYLE.get(r.status, "")),
                        one_line(r.response[:80], 72)) for r in self.shown])
        row = next((i for i, r in enumerate(self.shown) if r.index == keep_index), 0)
        if self.shown:
            self.move_cursor(row=row)

    def selected(self) -> SampleRow | None:
        if not self.shown or self.cursor_row is None:
            return None
        return self.shown[min(self.cursor_row, len(self.shown) - 1)]
