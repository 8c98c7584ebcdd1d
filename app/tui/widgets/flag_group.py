"""A schema group of flags in a Collapsible; its title counts changes and issues.

Fields mount when the group first opens (after the screen's first paint for the groups that
start open), and a search that opens a group mounts only the fields it matches: 538 flags x
~5 widgets would make the editor slow to appear and a search slow to filter, and a closed
group needs none of them. Mounted fields stay mounted; the search only flips their display.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.content import Content
from textual.css.query import NoMatches
from textual.widgets import Collapsible
from textual.widgets._collapsible import CollapsibleTitle  # textual is pinned (pyproject)

from .flag_field import FlagField

if TYPE_CHECKING:
    from ....engine.config import Flag


FIELDS_PER_CHUNK = 8  # about one screenful of fields


class GroupTitle(CollapsibleTitle):
    """A title as wide as its row (app.tcss) and one line high, so a new count in it repaints
    the line without laying out the editor again: a search key changes twelve titles."""

    def _update_label(self) -> None:
        symbol = self.collapsed_symbol if self.collapsed else self.expanded_symbol
        self.update(Content.assemble(symbol, " ", self.label), layout=False)


class FlagGroup(Collapsible, inherit_css=False):
    """`inherit_css=False`: Collapsible's default CSS has a `:focus-within` rule, and Textual
    restyles the whole group (every field in it) each time the focus enters or leaves it. The
    few rules the group needs are in app.tcss (.flag-group)."""

    def __init__(self, group: str, title: str, flags: Sequence[Flag],
                 field_for: Callable[[Flag], FlagField], collapsed: bool = True) -> None:
        super().__init__(title=f"{title} ({len(flags)})", collapsed=collapsed,
                         id=f"group-{group}", classes="flag-group")
        self._title = GroupTitle(label=self._title.label, collapsed=collapsed,
                                 collapsed_symbol=self._title.collapsed_symbol,
                                 expanded_symbol=self._title.expanded_symbol)
        self.group = group
        self.base_title = title
        self._open_quietly = False  # the next expansion leaves the scroll position alone
        self.opened_by_search = False  # closes again when the search is cleared
        self.flags = tuple(flags)
        self._field_for = field_for
        self.fields: dict[str, FlagField] = {}  # built so far (mounted, or in the queue)
        self.mounting = False  # chunks of fields wait for the next refreshes
        self.matches: int | None = None  # search hits, shown in the title while searching
        self._counts = (0, 0, 0)

    def compose(self) -> ComposeResult:
        yield self._title
        yield self.Contents()

    def _update_collapsed(self, collapsed: bool) -> None:
        """Collapsible flips a CSS class here, and a class change restyles every widget in the
        group: opening eight groups of mounted fields took 3.7 s on two cores. The contents'
        display flips inline instead (tests/tui/test_edit_screen.py checks the hook exists)."""
        if collapsed:
            self.opened_by_search = False
        try:
            self._title.collapsed = collapsed
            self.query_one(Collapsible.Contents).display = not collapsed
        except NoMatches:  # not composed yet: on_mount calls this again
            pass

    def open_quietly(self) -> None:
        """Expand without scrolling to the group (Collapsible scrolls to each group it opens:
        a search that opens nine groups scrolled nine times, animated)."""
        if self.collapsed:
            self._open_quietly = True
            self.collapsed = False
            self.opened_by_search = True

    def scroll_visible(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
        if self._open_quietly:
            self._open_quietly = False
            return
        super().scroll_visible(*args, **kwargs)

    def ensure_fields(self, only: Collection[str] | None = None) -> None:
        """Mount the fields not mounted yet (all of them, or those whose dest is in `only`),
        each in its schema place: the first few at once, the rest a chunk per refresh, so the
        group shows its first fields without waiting for all of them."""
        if not self.is_mounted:
            return
        missing = [flag for flag in self.flags if flag.dest not in self.fields
                   and (only is None or flag.dest in only)]
        if not missing:
            return
        built = [self._field_for(flag) for flag in missing]
        self.fields.update((field.dest, field) for field in built)
        self._mount_chunk(built)

    def _mount_chunk(self, pending: list[FlagField]) -> None:
        self.mounting = False
        if not self.is_attached:
            return
        # an editor built off screen (prebuild.py) has no paint to interleave, and Textual
        # runs no after-refresh callbacks for a screen that is not shown: all at once
        size = FIELDS_PER_CHUNK if self.screen.is_current else len(pending)
        chunk, rest = pending[:size], pending[size:]
        contents = self.query_one(Collapsible.Contents)
        for anchor, run in self._runs_by_anchor(chunk):
            if anchor is None:
                contents.mount_all(run)
            else:
                contents.mount_all(run, before=anchor)
        if rest:
            self.mounting = True
            self.call_after_refresh(self._mount_chunk, rest)

    def _runs_by_anchor(self, chunk: list[FlagField]
                        ) -> list[tuple[FlagField | None, list[FlagField]]]:
        """The chunk split into runs that go before the same mounted field (None: at the end),
        so fields mounted at different times still read in schema order."""
        order = {flag.dest: index for index, flag in enumerate(self.flags)}
        mounted = sorted((field for field in self.fields.values() if field.parent is not None),
                         key=lambda field: order[field.dest])
        runs: list[tuple[FlagField | None, list[FlagField]]] = []
        for field in chunk:
            anchor = next((m for m in mounted if order[m.dest] > order[field.dest]), None)
            if runs and runs[-1][0] is anchor:
                runs[-1][1].append(field)
            else:
                runs.append((anchor, [field]))
        return runs

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
            # Collapsible's title repaints the whole group (every line of it, a key's search
            # changes twelve titles); the title row alone shows it.
            self.set_reactive(Collapsible.title, title)
            self._title.label = title
