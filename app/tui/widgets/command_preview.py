"""The exact miles-style argv of the current config (engine.config.to_argv), secrets masked."""

from __future__ import annotations

import shlex

from rich.text import Text
from textual.widgets import Static


def format_argv(argv: list[str]) -> Text:
    """One flag per line with shell continuations, so the preview reads like a launch script."""
    text = Text("python3 train.py", "bold")
    i = 0
    while i < len(argv):
        token = argv[i]
        values: list[str] = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        text.append(" \\\n  ")
        text.append(token, "bold cyan")
        if values:
            text.append(" " + " ".join(shlex.quote(v) for v in values))
    return text


class CommandPreview(Static):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.argv: list[str] = []

    def show(self, argv: list[str]) -> None:
        if argv == self.argv:
            return
        flags_before = sum(t.startswith("--") for t in self.argv)
        self.argv = list(argv)
        # one line per flag: only a flag added or removed changes the height (a new layout)
        self.update(format_argv(self.argv),
                    layout=sum(t.startswith("--") for t in self.argv) != flags_before)

    def point_at(self, flag_name: str) -> None:
        """Scroll the pane so the line of `flag_name` (or its --no- form) is in view."""
        negative = "--no-" + flag_name[2:]
        flags = [token for token in self.argv if token.startswith("--")]
        line = next((i + 1 for i, token in enumerate(flags) if token in (flag_name, negative)),
                    None)  # line 0 is `python3 train.py`
        if line is not None and self.parent is not None:
            self.parent.scroll_to(y=max(0, line - 2), animate=False)  # type: ignore[attr-defined]

    @property
    def command_line(self) -> str:
        return shlex.join(["python3", "train.py", *self.argv])
