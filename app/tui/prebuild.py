"""The flag editor, built while the preset picker rests on a preset, so Enter only shows it.

Building the editor (its groups, the open groups' fields, the first check) took 0.7-1.4 s
of a loaded two-core machine after Enter. When the picker's highlight rests (PREBUILD_REST_S
after the last key or move), the app builds the editor for the highlighted preset off screen:
Textual starts (composes and mounts) a screen the moment it is registered with the app, the
step `push_screen` takes for a new screen, and shows it only once it is pushed. Textual has
no public call for the first step alone; it is `App._register`, as `App._get_screen` uses it
(textual is pinned; tests/tui/test_prebuild.py fails if the hooks go). Without them the
editor is built on Enter as before, and the app says so once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import drafts

if TYPE_CHECKING:
    from textual.app import App

    from .screens.edit import EditScreen

PREBUILD_REST_S = 0.4  # a highlight that stays this long is likely the one opened next
LAYOUT_POLL_S = 0.25  # how often a built editor looks whether its fields are all mounted
HOOKS = ("_register", "_load_screen_css")
SCREEN_HOOKS = ("_refresh_layout",)
_said_unavailable = False


def available(app: App) -> bool:
    from textual.screen import Screen

    return (all(callable(getattr(app, hook, None)) for hook in HOOKS)
            and all(callable(getattr(Screen, hook, None)) for hook in SCREEN_HOOKS))


def _drafts_of(screen: EditScreen) -> tuple[object, ...]:
    """What the editor read from the drafts: if it changed, the built editor is stale."""
    return drafts.read_draft(screen.preset_name), drafts.read_typed(screen.preset_name)


def build(app: App, preset: str) -> tuple[str, EditScreen, tuple[object, ...]] | None:
    """Start an editor for `preset` off screen; None when it cannot be built ahead (the open
    on Enter then says why, as it always did)."""
    global _said_unavailable
    from .screens.edit import EditScreen, load_for_editing

    if not available(app):
        if not _said_unavailable:
            _said_unavailable = True
            app.notify("This Textual version lacks the hooks PPO Deck uses to build the editor "
                       "ahead; it opens after Enter instead (slower).", severity="warning")
        return None
    try:
        screen = EditScreen(*load_for_editing(preset))
    except Exception:  # PresetError and friends: opening it on Enter shows the message
        return None
    app._load_screen_css(screen)  # type: ignore[attr-defined]
    app._register(app, screen)  # type: ignore[attr-defined]
    app.set_timer(LAYOUT_POLL_S, lambda: _lay_out_when_mounted(app, screen))
    return preset, screen, _drafts_of(screen)


def _lay_out_when_mounted(app: App, screen: EditScreen, passes: int = 2) -> None:
    """Lay the built editor out at the terminal's size once its open groups have mounted
    their fields, so showing it is one paint (anything mounted later is laid out then).
    Twice: widgets given their first size ask for another layout, as they do when shown."""
    if not screen.is_attached or screen.is_current:
        return
    if not screen.fields_settled:
        app.set_timer(LAYOUT_POLL_S, lambda: _lay_out_when_mounted(app, screen, passes))
        return
    screen._refresh_layout(app.size)
    screen.laid_out_ahead = True
    _settle_first_paint(app, screen)
    if passes > 1:
        app.set_timer(LAYOUT_POLL_S, lambda: _lay_out_when_mounted(app, screen, passes - 1))


def _settle_first_paint(app: App, screen: EditScreen) -> None:
    """What the first paint would change and lay the whole screen out again for, changed
    before the last pass: an option list counts its lines (its scrollbar), and the toast rack
    shows (or hides) the app's notifications."""
    from textual.widgets import OptionList

    for option_list in screen.query(OptionList):
        update_lines = getattr(option_list, "_update_lines", None)
        if callable(update_lines):
            update_lines()
    for rack in screen.query("#textual-toastrack"):
        rack.display = bool(getattr(app, "_notifications", True))


def still_fresh(held: tuple[str, EditScreen, tuple[object, ...]]) -> bool:
    _, screen, seen = held
    return screen.is_running and screen.is_attached and _drafts_of(screen) == seen


def discard(app: App, screen: EditScreen) -> None:
    """Remove an editor built ahead and never shown (the picker moved on)."""
    if screen.is_attached and screen not in app.screen_stack:
        screen.remove()
