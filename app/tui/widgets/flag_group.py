"""A schema group of flags in a Collapsible; its title counts changes and issues.

Fields mount when the group first opens (after the screen's first paint for the groups that
start open): 209 flags x ~6 widgets would make the editor slow to appear, and a closed group
needs none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.widgets import Collapsible

from .flag_field import FlagField

if TYPE_CHECKING:
    from ....engine.config import Flag


FIELDS_PER_CHUNK = 8  # about one screenful of fields


class FlagGroup(Collapsible):
    def __init__(self, group: str, title: str, flags: Sequence[Flag],
                 field_for: Callable[[Flag], FlagField], collapsed: bool = True) -> None:
        super().__init__(title=f"{title} ({len(flags)})", collapsed=collapsed,
                         id=f"group-{group}", classes="flag-group")
        self.group = group
        self.base_title = title
        self.flags = tuple(flags)
        self._field_for = field_for
        self.fields: dict[str, FlagField] = {}
        self.matches: int | None = None  # search hits, shown in the title while searching
        self._counts = (0, 0, 0)

    def compose(self) -> ComposeResult:
        yield self._title
        yield self.Contents()

    def _build_fields(self) -> list[FlagField]:
        built = [self._field_for(flag) for flag in self.flags]
        self.fields = {field.dest: field for field in built}
        return built

    def ensure_fields(self) -> None:
        """Mount the fields the first time the group opens: the first few at once, the rest a
        chunk per refresh, so the group shows its first fields without waiting for all of them
        (47 fields of the PPO group took seconds to appear on two busy cores)."""
        if not self.fields and self.is_mounted:
            self._mount_chunk(self._build_fields())

    def _mount_chunk(self, pending: list[FlagField]) -> None:
        if not self.is_attached:
            return
        chunk, rest = pending[:FIELDS_PER_CHUNK], pending[FIELDS_PER_CHUNK:]
        self.query_one(Collapsible.Contents).mount_all(chunk)
        if rest:
            self.call_after_refresh(self._mount_chunk, rest)

    def set_matches(self, matches: int | None) -> None:
        self.matches = matches
        self.set_counts(*self._counts)

    def set_counts(self, changed: int, errors: int, warnings: int) -> None:
        self._counts = (changed, errors, warnings)
        # Markup in the title, not a CSS class: restyling a class on the group would restyle
        # every field inside it on each keystroke.
        parts = [f"{self.base_title} ({len(self.flags)})"]
        if self.matches is not None:
            parts.append(f"[$accent]{self.matches} match{'es' if self.matches != 1 else ''}[/]")
        if changed:
            parts.append(f"[$warning]● {changed} changed[/]")
        if errors:
            parts.append(f"[$error]✖ {errors}[/]")
        if warnings:
            parts.append(f"[$warning]⚠ {warnings}[/]")
        title = "  ".join(parts)
        if title != self.title:
            self.title = title
