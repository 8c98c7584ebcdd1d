"""Import a miles launch script or command line by pasting it: the import report, then the editor.

The text is read as bash reads it (engine.miles.script_import; nothing runs). Import shows the
report in place (what was resolved and from where, what stayed unresolved with its line, the
command-only and refused flags); Open in editor then edits the imported config, and a preset
saved from it keeps the script's name and line for each flag as a comment. The optional name
labels pasted text in the report and those comments; a path there, with the box left empty,
reads the file itself (so a `source` of a file beside it resolves). A miles Python launcher
(`run_*.py`) is read as Python, never run; its own options follow its path there, as they would
on its command line (`run_qwen3_4b.py --model-name Qwen3-0.6B`). The pasted text stays in the
box until the dialog closes, so nothing typed is lost by a second try.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static, TextArea

from ..widgets.footer import DeckFooter
from ..widgets.text_input import DeckInput, DeckTextArea

if TYPE_CHECKING:
    from ....engine.config.issues import Issue
    from ....engine.miles.script_import import ImportReport

PLACEHOLDER = ("paste a miles launch script, a Python launcher (run_*.py) or `python3 train.py "
               "...` here, then ctrl+y")
NAME_PLACEHOLDER = ("optional: the script's name (for the report and the comments), or its path "
                    "(a run_*.py path may be followed by its options)")
LEVEL_STYLES = {"error": "bold red", "warning": "yellow", "info": "dim"}
_COUNT = re.compile(r"\((\d+)\)")
LISTED_ABOVE = {"command.unresolved_variable"}  # "unresolved" lists each, with its line


def report_text(report: ImportReport, width: int,
                judged: list[tuple[Issue, tuple[Issue, ...]]] | None = None) -> Text:
    """The import report with its sections marked (what needs a look stands out), each line
    wrapped under its own indent, so long flag lists stay readable in `width` columns.
    `judged`: the import's issues and check()'s, knock-ons grouped (ImportReport.judged_tree),
    counted as `validate --from-command` counts them; else the import's own issues."""
    styled = [(line, _line_style(line)) for line in report.lines()]
    shown = judged if judged is not None else [(i, ()) for i in report.issues]
    if shown:
        levels = [i.level for i, _ in shown]
        counts = ", ".join(_count(levels.count(level), level)
                           for level in ("error", "warning", "info"))
        styled.append((f"  issues ({counts}):", "bold"))
        styled += [(f"    {_issue_line(i, bool(knock_ons))}", LEVEL_STYLES.get(i.level, ""))
                   for i, knock_ons in sorted(shown, key=lambda s: _ORDER[s[0].level])
                   if i.code not in LISTED_ABOVE]
    text = Text()
    for number, (line, style) in enumerate(styled):
        if number:
            text.append("\n")
        text.append(_hanging(line, width), style)
    return text


def _hanging(line: str, width: int) -> str:
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return "\n".join(textwrap.wrap(line, max(width, 20), subsequent_indent=indent,
                                    break_long_words=False, break_on_hyphens=False)) or line


def _line_style(line: str) -> str:
    if not line.startswith("  "):
        return "bold"  # the title
    if line.startswith("    "):
        return ""  # an entry under a section
    count = _COUNT.search(line)
    if count is None or count.group(1) == "0":
        return "bold" if line.startswith("  resolved") else "dim"
    section = line.strip()
    if section.startswith("unresolved"):
        return "bold yellow"
    if section.startswith("refused"):
        return "bold red"
    return "bold"


_ORDER = {"error": 0, "warning": 1, "info": 2}


def _count(number: int, level: str) -> str:
    return f"{number} {level}{'' if number == 1 else 's'}"


def _issue_line(issue: Issue, folded: bool = False) -> str:
    """`folded`: a knock-on summary, whose issues the editor's Issues panel unfolds."""
    return (f"{'▸ ' if folded else ''}{issue.level} {issue.code}: {issue.message}"
            + (" (Open in editor: the Issues panel lists them)" if folded else ""))


def _judged(report: ImportReport) -> list[tuple[Issue, tuple[Issue, ...]]]:
    """What `validate --from-command` shows for it: check() on this machine, grouped."""
    from ....engine.config import check
    from ....engine.run.pace import machine_here

    return report.judged_tree(list(check(report.config, machine_here()).issues))


class PasteCommandScreen(ModalScreen["ImportReport | None"]):
    """Dismisses the ImportReport (Open in editor) or None (Cancel)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("ctrl+y", "import_text", "Import", priority=True)]  # over TextArea redo
    TYPEAHEAD = True  # keys typed while it opens wait for its focus (typeahead.py)
    # the box, from the first focus on: with Textual's default (the first focusable widget)
    # the keys typed while the dialog opened went into the name field above it
    AUTO_FOCUS = "#paste-text"

    def __init__(self, text: str = "") -> None:
        super().__init__(id="paste-dialog")
        self.initial_text = text
        self.imported: ImportReport | None = None
        self.judged: list[tuple[Issue, tuple[Issue, ...]]] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Import a miles command or launch script", classes="dialog-title")
            yield DeckInput(placeholder=NAME_PLACEHOLDER, id="paste-name", compact=True)
            yield DeckTextArea(self.initial_text, id="paste-text", soft_wrap=False,
                           placeholder=PLACEHOLDER)
            with VerticalScroll(classes="dialog-body", id="paste-report-scroll"):
                yield Static("ctrl+y imports; nothing in the script is run.", id="paste-report")
            with Horizontal(classes="dialog-buttons", id="paste-buttons"):  # compact: the
                # report gets those rows
                yield Button("Cancel (esc)", id="cancel", compact=True)
                yield Button("Import (ctrl+y)", id="import", variant="primary", compact=True)
                yield Button("Open in editor (enter)", id="open", variant="success",
                             compact=True, disabled=True)
        yield DeckFooter()  # the dialog's own keys, not the picker's underneath

    def on_mount(self) -> None:
        self.query_one("#paste-text", TextArea).focus()

    @on(Input.Submitted, "#paste-name")
    @on(Button.Pressed, "#import")
    def action_import_text(self) -> None:
        source = self._source()
        if source is None:
            return
        text, path, name = source
        from ....engine.miles.py_launcher import LauncherError
        from ....engine.miles.script_import import import_script

        try:
            report = import_script(text, env=dict(os.environ), path=path, name=name,
                                   overrides=self._launcher_args())
        except LauncherError as exc:  # an override that does not fit the launcher's fields
            self._show(f"could not import: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 - a parser bug must not take the TUI down
            self._show(f"could not import: {type(exc).__name__}: {exc}")
            return
        self.imported = report
        self.judged = _judged(report)
        self._show_report()
        self.add_class("-imported")  # the box shrinks: the report gets the room
        self.query_one("#paste-report-scroll").scroll_home(animate=False)
        open_button = self.query_one("#open", Button)
        open_button.disabled = False
        open_button.focus()

    def _name_field(self) -> tuple[str | None, list[str]]:
        """The name field: a name or path, and after a launcher's path, its own options."""
        value = self.query_one("#paste-name", Input).value.strip()
        first, _, rest = value.partition(" ")
        if rest.strip() and first.endswith(".py") and Path(first).expanduser().is_file():
            import shlex

            try:
                return first, shlex.split(rest)
            except ValueError:
                return first, rest.split()
        return value or None, []

    def _launcher_args(self) -> list[str] | None:
        return self._name_field()[1] or None

    def _source(self) -> tuple[str, Path | None, str | None] | None:
        """(script text, its file when read from one, its name) or None after saying why."""
        box = self.query_one("#paste-text", TextArea)
        name = self._name_field()[0]
        path = Path(name).expanduser() if name else None
        if path is not None and path.is_file() and not box.text.strip():
            try:
                box.load_text(path.read_text(encoding="utf-8", errors="surrogateescape"))
            except OSError as exc:
                self._show(f"cannot read {path}: {exc}. Fix: check the path, or paste the "
                           "script into the box.")
                return None
            return box.text, path, None
        if not box.text.strip():
            self._show("Nothing to import: paste a command or a script first (or give a "
                       "script's path above and leave the box empty).")
            return None
        if path is not None and path.is_file():
            return box.text, path, None  # the file's text, maybe edited: `source` still works
        return box.text, None, name

    def on_resize(self) -> None:
        if self.imported is not None:
            self._show_report()  # re-wrapped to the new width

    def _show_report(self) -> None:
        assert self.imported is not None
        width = self.query_one("#paste-report-scroll").scrollable_content_region.width
        self._show(report_text(self.imported, width - 1, self.judged))  # a scrollbar cell

    def _show(self, text: str | Text) -> None:
        # Text, never markup: a script's ${ARR[@]} would read as a markup tag
        self.query_one("#paste-report", Static).update(Text(text) if isinstance(text, str)
                                                       else text)

    @on(Button.Pressed, "#open")
    def _open(self) -> None:
        if self.imported is not None:
            self.dismiss(self.imported)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
