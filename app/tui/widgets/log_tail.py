"""The run's log lines (`log` events), newest at the bottom; times relative to run start."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from ....engine.run.state import LogLine
from .. import fmt

LEVEL_STYLE = {"debug": "dim", "info": "", "warning": "bold yellow", "error": "bold red"}


class LogTail(RichLog):
    """Attributes down: append(lines, t0); keeps a count so the screen appends only new lines."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(max_lines=500, wrap=False, markup=False, highlight=False,
                         auto_scroll=True, **kwargs)  # type: ignore[arg-type]
        self.shown_total = 0
        self.lines_text: list[str] = []  # plain copies, for tests and the help screen

    def append(self, lines: list[LogLine], t0: float | None, total: int) -> None:
        for line in lines:
            text = self.format_line(line, t0)
            self.lines_text.append(text.plain)
            self.write(text)
        del self.lines_text[:-500]
        self.shown_total = total

    @staticmethod
    def format_line(line: LogLine, t0: float | None) -> Text:
        stamp = fmt.duration(line.ts - t0) if t0 is not None else "-"
        text = Text(f"+{stamp:>7} ", "dim")
        text.append(f"{line.level[:4]:<4} ", LEVEL_STYLE.get(line.level, ""))
        text.append(f"{line.source}: ", "italic")
        text.append(line.msg, LEVEL_STYLE.get(line.level, "") if line.level != "info" else "")
        return text
