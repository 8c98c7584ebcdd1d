"""Text inputs that apply every key in the order it was typed.

Textual inserts a printable key in the focused widget's own queue, but runs the widget's key
bindings (backspace, delete, home, ...) only once the key has bubbled up to the app's queue.
In a burst the two queues race: `0.25`, four backspaces and `0.3` typed at once left `0.`,
because the `3` was inserted before the backspaces came back from the app. Here the widget
runs its own bindings where it receives the key, so every edit happens in typing order.
The widget's bindings win over the screen's either way (the focused widget is first in the
binding chain), so only the timing changes.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.widget import Widget
from textual.widgets import Input, TextArea


async def run_own_binding(widget: Widget, event: events.Key) -> bool:
    """Run `widget`'s own (non-priority) binding for the key now; True when one ran."""
    for binding in widget._bindings.key_to_bindings.get(event.key, ()):
        if binding.priority:
            continue  # priority bindings already ran from the app's queue
        if await widget.app.run_action(binding.action, widget):
            event.stop()
            event.prevent_default()
            return True
    return False


def held_for_screen(widget: Widget, event: events.Key) -> bool:
    """The screen moves the keys on (`holding_keys`, see typeahead.py): the app holds this one
    too, so it reaches the widget focused next, in typing order."""
    if not getattr(widget.screen, "holding_keys", False):
        return False
    event.stop()
    event.prevent_default()
    widget.app.hold_key(event)  # type: ignore[attr-defined]
    return True


class DeckInput(Input):
    """`holds_on_submit`: Enter moves on to another screen or field, so the keys behind it in
    this input's queue are held for that target instead of typed here."""

    def __init__(self, *args: Any, holds_on_submit: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holds_on_submit = holds_on_submit

    async def _on_key(self, event: events.Key) -> None:
        if held_for_screen(self, event):
            return
        if not event.is_printable and await run_own_binding(self, event):
            return
        await super()._on_key(event)

    async def action_submit(self) -> None:
        if self.holds_on_submit and hasattr(self.app, "hold_key"):
            self.screen.holding_keys = True  # type: ignore[attr-defined]
        await super().action_submit()


class DeckTextArea(TextArea):
    async def _on_key(self, event: events.Key) -> None:
        if held_for_screen(self, event):
            return
        if not event.is_printable and await run_own_binding(self, event):
            return
        await super()._on_key(event)
