"""Every error, warning and info of the current config, with its fix; selecting one focuses
the flag it is about (FlagField via IssuesPanel.Selected)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

LEVEL_STYLE = {"error": ("✖", "bold red"), "warning": ("⚠", "bold yellow"),
               "info": ("ℹ", "bold cyan")}
LEVEL_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class PanelIssue:
    """An engine Issue, or a field that does not parse (code 'parse')."""

    level: str
    code: str
    flags: tuple[str, ...]
    message: str
    fix: str


class IssuesPanel(OptionList):
    @dataclass
    class Selected(Message):
        issue: PanelIssue

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.issues: tuple[PanelIssue, ...] = ()

    def show(self, issues: Sequence[PanelIssue]) -> None:
        ordered = tuple(sorted(issues, key=lambda i: LEVEL_ORDER.get(i.level, 3)))
        if ordered == self.issues:
            return
        highlighted = self.highlighted
        self.issues = ordered
        self.clear_options()
        if not ordered:
            self.add_option(Option(Text("✔ no issues", "bold green"), disabled=True))
            return
        self.add_options([Option(self._prompt(issue), id=str(i))
                          for i, issue in enumerate(ordered)])
        if highlighted is not None and self.has_focus:
            self.highlighted = min(highlighted, len(ordered) - 1)

    @staticmethod
    def _prompt(issue: PanelIssue) -> Text:
        icon, style = LEVEL_STYLE.get(issue.level, ("•", "bold"))
        text = Text(f"{icon} ", style)
        if issue.flags:
            text.append(" ".join(issue.flags), "bold")
            text.append(": ")
        text.append(issue.message)
        if issue.fix:
            text.append("\n  fix: ", "dim")
            text.append(issue.fix, "italic")
        return text

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.post_message(self.Selected(self.issues[int(event.option.id)]))

    @property
    def counts(self) -> dict[str, int]:
        counts = {"error": 0, "warning": 0, "info": 0}
        for issue in self.issues:
            counts[issue.level] = counts.get(issue.level, 0) + 1
        return counts
