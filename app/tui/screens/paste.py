"""Import a miles launch script or command line by pasting it: the import report, then the editor.

The text is read as bash reads it (engine.config.script_import; nothing runs). Import shows the
report in place (what was resolved and from where, what stayed unresolved with its line, the
command-only and refused flags); Open in editor then edits the imported config. The pasted text
stays in the box until the dialog closes, so nothing typed is lost by a second try.
"""

from __future__ import annotations

import os

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static, TextArea

from engine.config import RunConfig

PLACEHOLDER = "paste a miles launch script or `python3 train.py ...` here, then ctrl+y"


class PasteCommandScreen(ModalScreen[RunConfig | None]):
    """Dismisses the imported RunConfig (Open in editor) or None (Cancel)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("ctrl+y", "import_text", "Import", priority=True)]  # over TextArea redo

    def __init__(self, text: str = "") -> None:
        super().__init__(id="paste-dialog")
        self.initial_text = text
        self.imported: RunConfig | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Import a miles command or launch script", classes="dialog-title")
            yield TextArea(self.initial_text, id="paste-text", soft_wrap=False,
                           placeholder=PLACEHOLDER)
            with VerticalScroll(classes="dialog-body"):
                yield Static("ctrl+y imports; nothing in the script is run.", id="paste-report")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Import (ctrl+y)", id="import", variant="primary")
                yield Button("Open in editor", id="open", variant="success", disabled=True)

    def on_mount(self) -> None:
        self.query_one("#paste-text", TextArea).focus()

    @on(Button.Pressed, "#import")
    def action_import_text(self) -> None:
        from engine.config.script_import import import_script

        text = self.query_one("#paste-text", TextArea).text
        if not text.strip():
            self._show("Nothing to import: paste a command or a script first.")
            return
        try:
            report = import_script(text, env=dict(os.environ))
        except Exception as exc:  # noqa: BLE001 - a parser bug must not take the TUI down
            self._show(f"could not import: {type(exc).__name__}: {exc}")
            return
        self.imported = report.config
        issues = [f"{i.level} {i.code}: {i.message}" for i in report.issues]
        self._show("\n".join(report.lines() + (["  issues:"] + [f"    {i}" for i in issues]
                                               if issues else [])))
        self.query_one("#open", Button).disabled = False

    def _show(self, text: str) -> None:
        self.query_one("#paste-report", Static).update(text)

    @on(Button.Pressed, "#open")
    def _open(self) -> None:
        if self.imported is not None:
            self.dismiss(self.imported)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
