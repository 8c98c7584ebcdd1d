"""Keys typed before a screen can take them: held in order, replayed once it can.

Textual hands a key to the focused widget, or to the screen when nothing has focus yet. A
screen that has just been pushed focuses its field only once it has composed, so a user who
types ahead (before the first frame, or right after Enter opened the editor) lost those keys.
The app holds a key here while the screen on top still waits for its first focus, and replays
the held keys, in order, into whatever the screen focused. A focused input that
learns mid-burst that its screen moves on (Enter opened the editor, jumped to a field) hands
the keys already queued for it to the same place (widgets/text_input.py); held keys are
replayed in the order they were typed, whichever queue they came from.
"""

from __future__ import annotations

import bisect
import time

from textual import events
from textual.screen import Screen

HOLD_MAX_S = 3.0  # a screen that never focuses anything gets its keys after this at the latest


def waits_for_focus(screen: Screen) -> bool:
    """True while `screen` cannot take typed keys yet: the app's empty start-up screen, one of
    ours (TYPEAHEAD) that has not focused its first field, or one moving the focus to the
    field the next keys belong to (`holding_keys`)."""
    if screen.id == "_default":
        return True
    if getattr(screen, "holding_keys", False) or getattr(screen, "settling_focus", False):
        return True
    return bool(getattr(screen, "TYPEAHEAD", False)) and screen.focused is None


def fresh_copy(key: events.Key) -> events.Key:
    """A key as the terminal sent it: one a widget already took was marked forwarded and
    stopped, and Textual would not deliver it again."""
    copy = events.Key(key.key, key.character)
    copy.time = key.time
    return copy


class Typeahead:
    """The held keys, oldest first, and when the first of them arrived (0: none held)."""

    def __init__(self) -> None:
        self.keys: list[events.Key] = []
        self.since = 0.0

    def expired(self) -> bool:
        """Never hold for good: a screen that focuses nothing gets its keys anyway."""
        return self.since > 0 and time.monotonic() - self.since > HOLD_MAX_S

    def hold(self, event: events.Key) -> None:
        if not self.since:  # keys put back after a replay keep their first arrival
            self.since = time.monotonic()
        # A key comes here from the app's queue or from a widget's (DeckInput); its creation
        # time, set as the terminal's bytes were read, is the order the user typed it in.
        bisect.insort(self.keys, event, key=lambda key: key.time)

    def take(self) -> list[events.Key]:
        keys, self.keys = self.keys, []
        return keys

    def delivered(self) -> None:
        self.since = 0.0
