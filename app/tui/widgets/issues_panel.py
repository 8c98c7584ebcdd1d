"""Every error, warning and info of the current config, with its fix; selecting one focuses
the flag it is about (FlagField via IssuesPanel.Selected). Knock-on issues (engine/config/
knock_on.py) sit folded under their summary row (▸); selecting it unfolds them (▾)."""

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
    knock_ons: tuple[PanelIssue, ...] = ()  # the issues grouped under this one, folded


class IssuesPanel(OptionList):
    @dataclass
    class Selected(Message):
        issue: PanelIssue

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.issues: tuple[PanelIssue, ...] = ()
        self.rows: list[PanelIssue] = []  # what each option shows: issues, unfolded knock-ons
        self.unfolded: set[str] = set()  # the messages of the summaries shown open

    def show(self, issues: Sequence[PanelIssue]) -> None:
        ordered = tuple(sorted(issues, key=lambda i: LEVEL_ORDER.get(i.level, 3)))
        if ordered == self.issues:
            return
        self.issues = ordered
        self.unfolded &= {i.message for i in ordered if i.knock_ons}
        self._fill()

    def _fill(self) -> None:
        highlighted = self.highlighted
        self.clear_options()
        self.rows = []
        if not self.issues:
            self.add_option(Option(Text("✔ no issues", "bold green"), disabled=True))
            return
        options = []
        for issue in self.issues:
            unfold = issue.message in self.unfolded
            self.rows.append(issue)
            options.append(Option(self._prompt(issue, unfold), id=str(len(self.rows) - 1)))
            for knock_on in issue.knock_ons if unfold else ():
                self.rows.append(knock_on)
                options.append(Option(self._prompt(knock_on, indent="    "),
                                      id=str(len(self.rows) - 1)))
        self.add_options(options)
        if highlighted is not None and self.has_focus:
            self.highlighted = min(highlighted, len(self.rows) - 1)

    def toggle(self, issue: PanelIssue) -> None:
        """Fold or unfold a summary's knock-on issues."""
        self.unfolded ^= {issue.message}
        self._fill()

    @staticmethod
    def _prompt(issue: PanelIssue, unfolded: bool = False, indent: str = "") -> Text:
        icon, style = LEVEL_STYLE.get(issue.level, ("•", "bold"))
        fold = ("▾ " if unfolded else "▸ ") if issue.knock_ons else ""
        text = Text(f"{indent}{fold}{icon} ", style)  # the level's style is the row's base
        if issue.flags and not issue.knock_ons:
            text.append(" ".join(issue.flags), "bold")
            text.append(": ")
        text.append(issue.message)
        if issue.fix:
            text.append(f"\n{indent}  fix: ", "dim")
            text.append(issue.fix, "italic")
        if issue.knock_ons and not unfolded:
            text.append(f"\n{indent}  enter: show them", "dim")
        return text

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is None:
            return
        issue = self.rows[int(event.option.id)]
        if issue.knock_ons:
            self.toggle(issue)
        else:
            self.post_message(self.Selected(issue))

    @property
    def counts(self) -> dict[str, int]:
        counts = {"error": 0, "warning": 0, "info": 0}
        for issue in self.issues:
            counts[issue.level] = counts.get(issue.level, 0) + 1
        return counts
