"""Textual's Footer, rebuilt only when the keys it shows change.

The stock Footer recomposes on every bindings update, and a screen's start sends several
(mount, focus, each widget that refreshes its bindings): on the preset picker that was six
rebuilds of every key widget, with their CSS, before the first frame. Same keys, same footer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen

ShownKeys = tuple[tuple[Binding, bool, str], ...]


def shown_keys(screen: Screen) -> ShownKeys:
    """Everything the footer draws from: each shown binding (a frozen dataclass: key, text,
    display, group), whether it is enabled, and its tooltip; and the palette key's entry.
    Hidden bindings are left out: focusing a table adds a dozen of them and changes nothing."""
    palette = screen.app.COMMAND_PALETTE_BINDING
    return tuple((binding, enabled, tooltip)
                 for key, (_node, binding, enabled, tooltip) in screen.active_bindings.items()
                 if binding.show or key == palette)


class DeckFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._shown: ShownKeys | None = None

    def bindings_changed(self, screen: Screen) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            keys = shown_keys(screen)
            if keys == self._shown:
                return
            self._shown = keys
        super().bindings_changed(screen)
