"""F1: help for the current screen and the focused widget (a flag's full schema entry)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Markdown, Static

from .. import fmt

GLOBAL_KEYS = """\
### Everywhere
`F1` this help · `ctrl+p` command palette (open preset, launch, attach, export, stop run)
· `ctrl+o` presets · `ctrl+r` runs · `ctrl+q` quit. The mouse works on every control.
"""


def _flag_help(widget: Widget | None) -> str:
    from ..widgets.flag_field import FlagField

    node = widget
    while node is not None and not isinstance(node, FlagField):
        node = node.parent if isinstance(node.parent, Widget) else None
    if node is None:
        return ""
    flag = node.flag
    lines = [f"### `{flag.name}`", "", flag.help, "",
             f"- kind: {flag.kind}; group: {flag.group}",
             f"- default: `{fmt.flag_value(flag.default) or 'unset'}`"]
    if flag.choices:
        lines.append(f"- choices: {', '.join(flag.choices)}")
    if flag.kind == "tristate":
        lines.append(f"- unset keeps miles' default; off writes `{flag.negative}`")
    if flag.own:
        lines.append("- a PPO Deck flag (not a miles flag)")
    if flag.secret:
        lines.append("- secret: masked in previews, never written to files")
    if flag.runs_code:
        lines.append("- names code that will be executed: review it before launching")
    return "\n".join(lines) + "\n"


def help_for(screen: Screen, focused: Widget | None) -> str:
    text = getattr(screen, "HELP", "") or ""
    flag = _flag_help(focused)
    return "\n".join(part for part in (flag, text, GLOBAL_KEYS) if part)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self, markdown: str) -> None:
        super().__init__()
        self.markdown = markdown

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Help  (esc to close)", classes="dialog-title")
            with VerticalScroll(id="help-body"):
                yield Markdown(self.markdown)
