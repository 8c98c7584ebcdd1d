"""A schema group of flags in a Collapsible; its title counts changes and issues."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.widgets import Collapsible

from app.tui.widgets.flag_field import FlagField

if TYPE_CHECKING:
    from engine.config import Flag


class FlagGroup(Collapsible):
    def __init__(self, group: str, title: str, flags: Sequence[Flag],
                 value_of: Callable[[str], Any], changed_of: Callable[[str], bool],
                 collapsed: bool = True) -> None:
        super().__init__(title=title, collapsed=collapsed, id=f"group-{group}",
                         classes="flag-group")
        self.group = group
        self.base_title = title
        self.flags = tuple(flags)
        self._value_of = value_of
        self._changed_of = changed_of

    def compose(self) -> ComposeResult:
        yield self._title
        with self.Contents():
            for flag in self.flags:
                yield FlagField(flag, self._value_of(flag.dest), self._changed_of(flag.dest))

    def set_counts(self, changed: int, errors: int, warnings: int) -> None:
        parts = [f"{self.base_title} ({len(self.flags)})"]
        if changed:
            parts.append(f"● {changed} changed")
        if errors:
            parts.append(f"✖ {errors}")
        if warnings:
            parts.append(f"⚠ {warnings}")
        title = "  ".join(parts)
        if title != self.title:
            self.title = title
        self.set_class(errors > 0, "-error")
