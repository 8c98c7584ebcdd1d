"""Text inputs that apply every key in the order it was typed.

Textual inserts a printable key in the focused widget's own queue, but runs key bindings
(the input's backspace, delete, home; the screen's ctrl+f) only once the key has bubbled up to
the app's queue. In a burst the two queues race: `0.25`, four backspaces and `0.3` typed at
once left `0.`, because the `3` was inserted before the backspaces came back from the app.
Here the input runs the bindings where it receives the key, walking the same chain Textual
walks (the input, its containers, the screen, the app), so every key acts in typing order.
A binding of a container, the screen or the app may move the focus (ctrl+f to the search, a
dialog): the keys behind it are held (typeahead.py) until that focus has landed.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Input, TextArea


async def run_binding_in_order(widget: Widget, event: events.Key) -> bool:
    """Run the binding Textual would run for the key, now; True when one ran."""
    # the chain App._check_bindings walks for a non-priority key: focused widget up to the app
    for namespace, bindings in widget.screen._modal_binding_chain:
        for binding in bindings.key_to_bindings.get(event.key, ()):
            if binding.priority:
                continue  # priority bindings already ran from the app's queue
            if await widget.app.run_action(binding.action, namespace):
                event.stop()
                event.prevent_default()
                if namespace is not widget:
                    hold_while_focus_settles(widget)
                return True
    return False


def hold_while_focus_settles(widget: Widget) -> None:
    """Keys typed after a binding that may move the focus wait until the move is done: the
    focus moves through the app's queue (Widget.focus), so a callback queued after it runs once
    it has landed, and then lets the held keys go."""
    app = widget.app
    if not hasattr(app, "hold_key"):
        return
    screen = widget.screen
    screen.settling_focus = True  # type: ignore[attr-defined]

    def settled() -> None:
        screen.settling_focus = False  # type: ignore[attr-defined]

    app.call_later(settled)


def holds_keys(screen: Widget) -> bool:
    return bool(getattr(screen, "holding_keys", False) or getattr(screen, "settling_focus", False))


def held_for_screen(widget: Widget, event: events.Key) -> bool:
    """The screen moves the keys on (`holding_keys`, see typeahead.py): the app holds this one
    too, so it reaches the widget focused next, in typing order."""
    if not holds_keys(widget.screen):
        return False
    event.stop()
    event.prevent_default()
    widget.app.hold_key(event)  # type: ignore[attr-defined]
    return True


class DeckInput(Input):
    """`holds_on_submit`: Enter moves on to another screen or field, so the keys behind it in
    this input's queue are held for that target instead of typed here."""

    # Input sets its virtual width to its text's on every key, and Textual laid the whole screen
    # out again for it, before a flag search's own layout. An input scrolls its text without
    # that layout (ScrollView keeps its own virtual size); one sized `auto` still asks for it.
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def __init__(self, *args: Any, holds_on_submit: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holds_on_submit = holds_on_submit

    async def _on_key(self, event: events.Key) -> None:
        if held_for_screen(self, event):
            return
        if not event.is_printable and await run_binding_in_order(self, event):
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
        if not event.is_printable and await run_binding_in_order(self, event):
            return
        await super()._on_key(event)
