"""Flag editor: schema-generated fields, validation on every keystroke, drafts, save, launch.

Validation loop (attributes down, messages up): FlagField.Changed -> EditScreen updates
`config` -> check(config) -> each field's issue, the issues panel, derived values and the
command preview are set from the report; Launch stays disabled while any error exists.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.events import ScreenResume
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Button, Collapsible, Input, Static

from ....engine.config import BY_DEST, BY_NAME, FLAGS, Flag, Report, RunConfig, check, to_argv
from ....engine.config.knock_on import knock_on_tree
from ....engine.config.schema import GROUP_TITLES, GROUPS
from ....engine.run.pace import machine_here
from .. import drafts
from ..errors import guard
from ..messages import LaunchFailed, RunLaunched
from ..widgets.command_preview import CommandPreview, format_argv
from ..widgets.derived_panel import DerivedPanel
from ..widgets.flag_field import FieldIssue, FlagField
from ..widgets.flag_group import FlagGroup
from ..widgets.footer import DeckFooter
from ..widgets.issues_panel import IssuesPanel, PanelIssue
from ..widgets.text_input import DeckInput
from ..widgets.view_tabs import ViewTabs
from .confirm import (
    ConfirmDialog,
    FieldSpec,
    FormDialog,
    LaunchChoice,
    LaunchDialog,
)

if TYPE_CHECKING:
    from ....engine.miles.script_import import ImportReport
    from ....engine.presets import Preset

DRAFT_DEBOUNCE_S = 0.4
SIDE_WIDTH = 64  # the issues/derived/command column in the wide layout (app.tcss)
FOCUS_TRIES = 100  # refreshes to wait for a group's fields before giving the keys back
SEARCH_OPEN_MAX = 40  # matches across all groups at most this many: open their groups
OPEN_GROUPS = ("critic", "ppo")  # the PPO-specific groups start expanded
LEVEL_RANK = {"error": 0, "warning": 1, "info": 2}
VIEWS = (("flags", "Flags"), ("issues", "Issues"), ("derived", "Derived"),
         ("command", "Command"))
DESTS = tuple(flag.dest for flag in FLAGS)  # Flag.dest is computed: look it up once
# what a search looks in, lowered once: per flag, its name without `--`, and its help
SEARCH_NAMES = tuple(flag.name[2:].lower() for flag in FLAGS)
SEARCH_HELPS = tuple(flag.help.lower() for flag in FLAGS)
ALL_DESTS = frozenset(DESTS)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

HELP = """\
## Flag editor
Every flag of the schema, grouped as the schema groups them. Fields changed from the preset
are marked `●` and have a `↺` reset button. Each keystroke re-validates the whole config:
errors and warnings show under the field and in the Issues panel (select one to jump to its
field). Derived shows world size, DP, engines, optimizer steps and a per-GPU memory estimate;
Command shows the exact miles-style argv (secrets masked).

Unsaved edits are kept as a draft in the state directory and come back next time.

Search: `ctrl+f` (or `/`) puts the cursor in the search box with its text selected, so typing
replaces the old search; `enter` or `tab` there jumps to the first matching field.
A value that does not parse stays as you typed it, marked as an error, until you fix it.

Keys: `ctrl+z` reset the focused field, `ctrl+s` save as preset, `ctrl+t` export, `ctrl+l`
launch (disabled while errors exist), `esc` back to presets (an imported config that is not
saved yet asks first).
"""


def load_for_editing(preset_name: str | None
                     ) -> tuple[Preset | None, RunConfig, RunConfig | None, str]:
    """(preset, its config, the draft config if one was saved, a draft warning)."""
    from ....engine.presets import PresetError, config_from_toml, load_preset, resolve_preset

    preset = load_preset(preset_name) if preset_name is not None else None
    base = resolve_preset(preset) if preset is not None else RunConfig()
    key = preset.name if preset is not None else "defaults"
    text = drafts.read_draft(key)
    if text is None:
        return preset, base, None, ""
    try:
        return preset, base, config_from_toml(text, drafts.draft_path(key)), ""
    except PresetError as exc:  # a draft from an older schema: keep the preset, say why
        return preset, base, None, f"draft ignored: {exc}"


def flag_matches(flag: Flag, query: str) -> bool:
    """Fuzzy on the name, all words as substrings of the help text."""
    return flag.dest in matching_dests(query)


def in_order(query: str, name: str) -> bool:
    """Whether the query's characters appear in `name` in order: exactly when Textual's fuzzy
    Matcher scores the name above 0, without scoring every way they do (that enumeration cost
    milliseconds a key, and far more for a query like `ppo`)."""
    rest = iter(name)
    return all(char in rest for char in query)


@lru_cache(maxsize=64)
def matching_dests(query: str) -> frozenset[str]:
    """The dests of every flag `query` matches: fuzzy on the name (Matcher's rule, see
    in_order), all words as substrings of the help text."""
    query = query.strip().lower()
    if not query:
        return ALL_DESTS
    words = query.split()
    return frozenset(dest for dest, name, help_text in zip(DESTS, SEARCH_NAMES, SEARCH_HELPS,
                                                          strict=True)
                     if all(word in help_text for word in words) or in_order(query, name))


def masked_argv(config: RunConfig) -> list[str]:
    """to_argv with secret values replaced by a mask (never shown, never exported)."""
    return to_argv(config, show_secrets=False)


def _panel_issue(issue: Any, knock_ons: tuple[Any, ...] = ()) -> PanelIssue:
    return PanelIssue(issue.level, issue.code, tuple(issue.flags), issue.message, issue.fix,
                      tuple(_panel_issue(i) for i in knock_ons))


def _parse_issue(dest: str, message: str) -> PanelIssue:
    """A field whose text does not parse: an error like any other, until it is fixed."""
    return PanelIssue("error", "parse", (BY_DEST[dest].name,), message,
                      "type a valid value, or clear the field to unset it")


def _field_issue(issues: list[Any]) -> FieldIssue | None:
    if not issues:
        return None
    worst = min(issues, key=lambda i: LEVEL_RANK.get(i.level, 3))
    return FieldIssue(worst.level, worst.message, worst.fix)


class FlagSearch(DeckInput):
    """The flag search box: `enter` and `tab` go to the first matching field; the keys typed
    after them wait for that field (EditScreen.holding_keys) instead of landing here."""

    BINDINGS = [Binding("tab", "first_match", "First match", show=False)]

    def action_first_match(self) -> None:
        screen = self.screen
        if isinstance(screen, EditScreen) and screen.focus_first_match():
            return
        self.screen.focus_next()


class EditScreen(Screen[None]):
    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch"),
        Binding("ctrl+s", "save_preset", "Save preset"),
        Binding("ctrl+t", "export", "Export"),
        Binding("ctrl+z", "reset_field", "Reset field"),
        Binding("ctrl+f,slash", "search", "Search", show=False),
        Binding("escape", "back", "Back"),
    ]
    HELP = HELP
    AUTO_FOCUS = "#flag-search"
    TYPEAHEAD = True  # keys typed while the editor opens wait for the search box (typeahead.py)

    def __init__(self, preset: Preset | None, base: RunConfig, draft: RunConfig | None = None,
                 draft_note: str = "", name: str | None = None,
                 imported: ImportReport | None = None) -> None:
        super().__init__()
        self.preset = preset
        # a pasted launch script: its flags' lines go into the presets saved from here
        self.imported = imported
        # `name`: what the edits are drafted under without a preset (e.g. "pasted")
        self.preset_name = preset.name if preset is not None else (name or "defaults")
        self.base = base
        self.config = draft if draft is not None else base
        self.restored_draft = draft is not None
        self.draft_note = draft_note
        self.parse_errors: dict[str, str] = {}  # dest -> why its text does not parse
        self.typed: dict[str, str] = {}  # dest -> that text, as typed (shown, drafted)
        self._restore_typed()
        self.machine = machine_here()  # with this machine's finished runs: the forecast's
        self.report: Report = check(self.config, self.machine)
        self.query_text = ""
        self._draft_timer: Timer | None = None
        self._draft_dirty = False
        self._groups_cache: list[FlagGroup] = []
        self._search_pending = False  # a filter is queued for after the next refresh
        self._issues_cache: tuple[Any, dict[str, list[Any]]] = (None, {})
        self.holding_keys = False  # True while a jump to a field waits for it (typeahead.py)
        self._told = False  # the draft notes are shown (_on_screen_resume)
        self._opened = False  # the open groups have mounted their first fields
        self.laid_out_ahead = False  # styled and laid out before shown (app/tui/prebuild.py)

    # ---- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="edit-bar"):
            yield Static("", id="edit-summary")
            yield Button("Save as preset", id="save", compact=True)
            yield Button("Export", id="export", compact=True)
            yield Button("Launch", id="launch", variant="success", compact=True)
        yield ViewTabs(*VIEWS, id="view-tabs")
        with Grid(id="edit-body"):
            with Vertical(id="pane-flags", classes="pane -active"):
                yield FlagSearch(placeholder="search flags by name or help (ctrl+f; enter "
                                 "or tab: first match)", id="flag-search", compact=True,
                                 select_on_focus=False, holds_on_submit=True)
                yield Static("", id="search-summary", markup=False)
                with VerticalScroll(id="flag-groups"):
                    yield Static("", id="no-match", markup=False)
                    yield from self._groups()
            with Vertical(id="edit-side", classes="pane-host"):
                with Vertical(id="pane-issues", classes="pane"):
                    yield IssuesPanel(id="issues-panel")
                with Vertical(id="pane-derived", classes="pane"):
                    yield DerivedPanel(id="derived-panel")
                with VerticalScroll(id="pane-command", classes="pane"):
                    yield CommandPreview(id="command-preview")
        yield DeckFooter()

    def _groups(self) -> list[FlagGroup]:
        issues = self._issues_by_dest()
        groups = []
        for group in GROUPS:
            flags = [flag for flag in FLAGS if flag.group == group]
            if not flags:
                continue
            has_error = any(i.level == "error" for f in flags for i in issues.get(f.dest, []))
            groups.append(FlagGroup(group, GROUP_TITLES.get(group, group), flags,
                                    self._field_for, collapsed=not (
                                        group in OPEN_GROUPS or has_error)))
        return groups

    def _restore_typed(self) -> None:
        """Field texts of the draft that did not parse: back in their fields, still marked."""
        from ....engine.config import coerce

        for name, text in drafts.read_typed(self.preset_name).items():
            flag = BY_NAME.get(name)
            if flag is None or flag.secret:
                continue
            try:
                coerce(flag, text)
            except ValueError as exc:
                self.parse_errors[flag.dest] = str(exc)
                self.typed[flag.dest] = text
                self.restored_draft = True

    def _field_for(self, flag: Flag) -> FlagField:
        """Build one field with the screen's current state (used when a group first opens)."""
        field = FlagField(flag, self.config.get(flag.dest) if self.config.is_set(flag.dest)
                          else None, self.is_changed(flag.dest),
                          _field_issue(self._issues_by_dest().get(flag.dest, [])),
                          text=self.typed.get(flag.dest))
        field.display = flag_matches(flag, self.query_text)
        return field

    def on_mount(self) -> None:
        self.query_one("#pane-issues").border_title = "Issues"
        self.query_one("#pane-derived").border_title = "Derived"
        self.query_one("#pane-command").border_title = "Command (miles argv)"
        self._apply_report()
        if self.is_current:
            self.call_after_refresh(self._mount_open_groups)
        else:  # built off screen (prebuild.py): no first paint to wait for
            self._mount_open_groups()

    def _on_screen_resume(self, event: ScreenResume) -> None:
        """Textual restyles a screen each time it is shown (0.3 s or more for an editor on
        two busy cores); one built ahead (prebuild.py) was styled as it mounted, so its first
        showing skips that. The draft notes are said when the editor is shown, not built."""
        if self._told:
            return
        self._told = True
        if self.laid_out_ahead:
            event.refresh_styles = False
        if self.restored_draft:
            self.notify(f"Restored unsaved edits of {self.preset_name} from "
                        f"{drafts.draft_path(self.preset_name)}. Palette → 'Discard edits' "
                        "goes back to the preset.", title="draft restored", timeout=8)
        if self.draft_note:
            self.notify(self.draft_note, severity="warning", timeout=8)

    def _mount_open_groups(self) -> None:
        """Fields of the groups that start open mount after the first paint: the screen
        appears at once and the fields fill in a moment later."""
        hits = matching_dests(self.query_text)
        for group in self.groups:
            if not group.collapsed:
                group.ensure_fields(hits)
        self._opened = True

    @property
    def fields_settled(self) -> bool:
        """The open groups' fields are all mounted (none waits for a refresh)."""
        return self._opened and not any(group.mounting for group in self.groups)

    def on_resize(self) -> None:
        compact = self.size.width < 110 or self.size.height < 30
        flags_width = self.size.width if compact else self.size.width - SIDE_WIDTH
        self.set_class(compact, "-compact")
        self.set_class(flags_width < 76, "-narrow")  # a shorter name column, a wider control

    def on_unmount(self) -> None:
        self._flush_draft()

    # ---- state ------------------------------------------------------------------------------

    def is_changed(self, dest: str) -> bool:
        return dest in self.parse_errors or self.config.get(dest) != self.base.get(dest)

    def _with_value(self, dest: str, value: Any) -> RunConfig:
        """Set `dest`, keeping the config minimal: back to the preset's value = the preset's
        own setting (set or unset), so the draft and argv only carry real changes."""
        if value is not None and value == self.base.get(dest):
            value = self.base.values.get(dest)
        return self.config.with_values(**{dest: value})

    @property
    def groups(self) -> list[FlagGroup]:
        if not self._groups_cache:  # the groups never change after compose: query once
            self._groups_cache = list(self.query(FlagGroup))
        return self._groups_cache

    def fields(self) -> dict[str, FlagField]:
        out: dict[str, FlagField] = {}
        for group in self.groups:
            out.update(group.fields)
        return out

    def _issues_by_dest(self) -> dict[str, list[Any]]:
        """Issues per flag dest (cached per report: a group opening asks once per field)."""
        key = (self.report, tuple(self.parse_errors.items()))
        if self._issues_cache[0] == key:
            return self._issues_cache[1]
        by_dest: dict[str, list[Any]] = {}
        for issue in self.report.issues:
            for name in issue.flags:
                flag = BY_NAME.get(name)
                if flag is not None:
                    by_dest.setdefault(flag.dest, []).append(issue)
        for dest, message in self.parse_errors.items():
            by_dest[dest] = [_parse_issue(dest, message)]
        self._issues_cache = (key, by_dest)
        return by_dest

    def panel_issues(self) -> list[PanelIssue]:
        parse = [_parse_issue(dest, message) for dest, message in self.parse_errors.items()]
        typed = {BY_DEST[dest].name for dest in self.parse_errors}  # their parse error says it
        return parse + [_panel_issue(i, knock_ons) for i, knock_ons in self._grouped_issues()
                        if not (i.code == "value.bad_type" and set(i.flags) <= typed)]

    def _grouped_issues(self) -> list[tuple[Any, tuple[Any, ...]]]:
        """The import's issues and check()'s, knock-ons grouped as `validate --from-command`
        groups them; an unreadable import's only while its (empty) config is unedited."""
        checked = list(self.report.issues)
        if self.imported and self.preset is None:
            edited = self.config != self.imported.config
            return self.imported.judged_tree(checked, config_edited=edited)
        return knock_on_tree([], checked)

    def _import_issues(self) -> list[Any]:
        """What the import itself found (unresolved variables, flags it could not read), as
        `validate --from-command` counts them, until the import is saved as a preset."""
        return list(self.imported.issues) if self.imported and self.preset is None else []

    @property
    def error_count(self) -> int:
        import_errors = sum(i.level == "error" for i in self._import_issues())
        return len(self.report.errors) + len(self.parse_errors) + import_errors

    # ---- the validation loop ----------------------------------------------------------------

    @on(FlagField.Changed)
    def _field_changed(self, message: FlagField.Changed) -> None:
        message.stop()
        dest = message.dest
        if message.error:
            # the config goes back to the preset's value, so no issue speaks of a value that is
            # no longer on screen; the text itself is kept (and drafted) until it parses
            self.parse_errors[dest] = message.error
            self.typed[dest] = message.text
            self.config = self.config.with_values(**{dest: self.base.values.get(dest)})
        else:
            self.parse_errors.pop(dest, None)
            self.typed.pop(dest, None)
            self.config = self._with_value(dest, message.value)
        self._revalidate()
        self.query_one(CommandPreview).point_at(BY_DEST[dest].name)

    @on(FlagField.ResetRequested)
    def _reset_requested(self, message: FlagField.ResetRequested) -> None:
        message.stop()
        self.reset_field(message.dest)

    def reset_field(self, dest: str) -> None:
        self.parse_errors.pop(dest, None)
        self.typed.pop(dest, None)
        self.config = self.config.with_values(**{dest: self.base.values.get(dest)})
        field = self.fields().get(dest)
        if field is not None:
            field.set_value(self.base.values.get(dest))
        self._revalidate()

    def _revalidate(self) -> None:
        with guard(self, "validating the config"):
            self.report = check(self.config, self.machine)
            self._apply_report()
        self._schedule_draft()

    def _apply_report(self) -> None:
        issues = self._issues_by_dest()
        fields = self.fields()
        for dest, field in fields.items():
            field.show_issue(_field_issue(issues.get(dest, [])))
            field.mark_changed(self.is_changed(dest))
        self._update_groups(issues)
        self.query_one(IssuesPanel).show(self.panel_issues())
        self.query_one(DerivedPanel).show(self.report.derived, self.report.forecast)
        self.query_one(CommandPreview).show(self.masked_argv())
        self._update_bar()

    def _update_groups(self, issues: dict[str, list[Any]]) -> None:
        for group in self.groups:
            dests = [flag.dest for flag in group.flags]
            levels = [i.level for d in dests for i in issues.get(d, [])]
            group.set_counts(sum(self.is_changed(d) for d in dests), levels.count("error"),
                             levels.count("warning"))

    def _update_bar(self) -> None:
        counts = self.query_one(IssuesPanel).counts
        changed = sum(self.is_changed(dest) for dest in DESTS)
        summary = (f"[b]{self.preset_name}[/b]  ● {changed} changed  "
                   f"[red]✖ {counts['error']}[/]  [yellow]⚠ {counts['warning']}[/]  "
                   f"ℹ {counts['info']}")
        # one line of fixed size: repaint it without laying out the whole screen again
        self.query_one("#edit-summary", Static).update(summary, layout=False)
        launch = self.query_one("#launch", Button)
        if launch.disabled != (self.error_count > 0):  # a restyle: only when it flips
            launch.disabled = self.error_count > 0
        launch.tooltip = (f"fix {counts['error']} error(s) first" if launch.disabled
                          else "launch this config")
        self.query_one(ViewTabs).set_label("issues",
                                           f"Issues ✖{counts['error']} ⚠{counts['warning']}")

    def masked_argv(self) -> list[str]:
        return masked_argv(self.config)

    # ---- search and focus ---------------------------------------------------------------------

    @on(Input.Changed, "#flag-search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.query_text = event.value
        # No timer: the filter runs after the next refresh, so the letter itself is on screen
        # first, and the keys of a burst that arrive before that refresh filter once.
        if not self._search_pending:
            self._search_pending = True
            self.call_after_refresh(self._run_queued_search)

    def _run_queued_search(self) -> None:
        if self._search_pending:
            self._search_pending = False
            self.apply_search()

    def apply_search(self) -> None:
        """Hide flags that do not match; open the groups with matches once few enough remain
        (opening every group for a one-letter query would mount hundreds of fields). An open
        group mounts only the fields the search shows; every change lands in one repaint."""
        self._search_pending = False
        hits = matching_dests(self.query_text)
        searching = bool(self.query_text.strip())
        matches = {group.group: [f.dest for f in group.flags if f.dest in hits]
                   for group in self.groups}
        total = sum(len(found) for found in matches.values())
        with self.app.batch_update():
            self._show_no_match(total)
            self._show_summary(total, sum(bool(found) for found in matches.values()))
            if searching:  # the matches read from the top, whatever was scrolled to before
                self.query_one("#flag-groups", VerticalScroll).scroll_home(animate=False)
            for group in self.groups:
                found = matches[group.group]
                if group.display != bool(found):
                    group.display = bool(found)
                group.set_matches(len(found) if searching else None)
                if searching and found and total <= SEARCH_OPEN_MAX:
                    group.open_quietly()
                elif not searching and group.opened_by_search:
                    group.collapsed = True  # back as it was before the search
                for field in group.fields.values():
                    field.show_match(field.dest in hits)
                if not group.collapsed:
                    group.ensure_fields(hits)

    def _show_summary(self, total: int, groups: int) -> None:
        """One line above the groups: how many flags match, so the count is on screen even
        when the groups that hold them reach below it."""
        summary = self.query_one("#search-summary", Static)
        summary.display = bool(self.query_text.strip()) and total > 0
        if summary.display:
            flags = f"{total} flag{'s' if total != 1 else ''}"
            where = f"{groups} group{'s' if groups != 1 else ''}"
            summary.update(f"{flags} match in {where}; enter or tab: the first")

    def _show_no_match(self, total: int) -> None:
        note = self.query_one("#no-match", Static)
        searching = bool(self.query_text.strip())
        note.display = searching and total == 0
        if note.display:
            note.update(f"No flag matches {self.query_text.strip()!r} (names are fuzzy-matched, "
                        "help text word by word). Clear the search (ctrl+f, then delete) to "
                        "see every flag.")

    @on(Input.Submitted, "#flag-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_first_match()

    def focus_first_match(self) -> bool:
        """Jump to the first flag the search matches; False when none does."""
        # the box itself: its Changed message may still be on its way (a burst of keys)
        self.query_text = self.query_one("#flag-search", Input).value
        self.apply_search()
        visible = [f for f in FLAGS if flag_matches(f, self.query_text)]
        if visible:
            self.focus_flag(visible[0].dest)
        else:
            self.holding_keys = False  # nowhere to go: the keys stay in the search box
        return bool(visible)

    def action_search(self) -> None:
        """Focus the search with its text selected: what is typed next replaces it."""
        self.query_one(ViewTabs).active = "flags"
        search = self.query_one("#flag-search", Input)
        search.focus()
        search.select_all()

    @on(IssuesPanel.Selected)
    def _issue_selected(self, message: IssuesPanel.Selected) -> None:
        message.stop()
        dests = [BY_NAME[n].dest for n in message.issue.flags if n in BY_NAME]
        if dests:
            self.focus_flag(dests[0])

    def focus_flag(self, dest: str) -> None:
        """Open the flag's group (mounting its fields if needed) and focus its control."""
        flag = BY_DEST[dest]
        self.query_one(ViewTabs).active = "flags"
        group = self.query_one(f"#group-{flag.group}", FlagGroup)
        group.display = True
        group.collapsed = False
        group.opened_by_search = False  # the user went there: it stays open
        self.holding_keys = True  # typeahead.py: what is typed next belongs to that field
        group.ensure_fields(matching_dests(self.query_text) | {dest})

        def focus(tries: int = 0) -> None:
            field = group.fields.get(dest)
            if field is None or not field.query(".flag-control"):
                if tries < FOCUS_TRIES:  # its group is still mounting its fields
                    self.call_after_refresh(focus, tries + 1)
                else:
                    self.holding_keys = False
                return
            self.holding_keys = False
            field.show_match(True)
            field.focus_control()
            self.query_one("#flag-groups", VerticalScroll).scroll_to_widget(field, top=True)
            self.query_one(CommandPreview).point_at(flag.name)

        self.call_after_refresh(focus)

    @on(Collapsible.Expanded)
    def _group_expanded(self, event: Collapsible.Expanded) -> None:
        if isinstance(event.collapsible, FlagGroup):
            event.collapsible.ensure_fields(matching_dests(self.query_text))

    def action_reset_field(self) -> None:
        node = self.focused
        while node is not None and not isinstance(node, FlagField):
            node = node.parent  # type: ignore[assignment]
        if isinstance(node, FlagField):
            self.reset_field(node.dest)

    def action_revert_all(self) -> None:
        self.parse_errors.clear()
        self.typed.clear()
        self.config = self.base
        for dest, field in self.fields().items():
            field.set_value(self.base.values.get(dest))
        self._revalidate()
        self.notify(f"back to the values of {self.preset_name}")

    # ---- leaving -----------------------------------------------------------------------------

    def action_back(self) -> None:
        """Back to where the editor was opened from. A preset's edits are a draft already; an
        import saved nowhere yet would be lost, so Esc asks first."""
        if self.imported is None or self.preset is not None:
            self.app.action_back()  # type: ignore[attr-defined]
            return
        body = (f"The config imported from {self.imported.script} is not saved as a preset "
                "yet. Leaving discards it (and any edits made here).\n\nKeep it: cancel, then "
                "ctrl+s saves it as a preset.")
        self.app.push_screen(ConfirmDialog("Discard the imported config?", Text(body), "Discard",
                                           variant="error", dialog_id="discard-import"),
                             self._discard_confirmed)

    def _discard_confirmed(self, discard: bool | None) -> None:
        if not discard:
            return
        self._draft_dirty = False
        drafts.delete_draft(self.preset_name)
        self.app.action_back()  # type: ignore[attr-defined]

    # ---- drafts -------------------------------------------------------------------------------

    def _schedule_draft(self) -> None:
        self._draft_dirty = True
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_DEBOUNCE_S, self._flush_draft)

    def _flush_draft(self) -> None:
        if not self._draft_dirty:
            return
        self._draft_dirty = False
        try:
            if self._unchanged():
                drafts.delete_draft(self.preset_name)
            else:
                drafts.write_draft(self.preset_name, self._toml(
                    self.preset_name, f"unsaved edits of {self.preset_name}",
                    "PPO Deck editor draft: unsaved edits, restored when the preset reopens."),
                    self._typed_by_name())
        except OSError as exc:
            self.notify(f"could not save the draft: {exc}", severity="warning")

    def _typed_by_name(self) -> dict[str, str]:
        """Texts that do not parse, by flag name; a secret's text never goes to disk."""
        return {BY_DEST[dest].name: text for dest, text in self.typed.items()
                if not BY_DEST[dest].secret}

    def _unchanged(self) -> bool:
        return (not self.typed and dict(self.config.values) == dict(self.base.values)
                and tuple(self.config.passthrough) == tuple(self.base.passthrough))

    def _toml(self, name: str, description: str, header: str) -> str:
        from ....engine.presets import config_to_toml
        from ....engine.run.secrets import without_secrets

        sources = self.imported.sources if self.imported is not None and self.preset is None \
            else {}  # a Python launcher's prepare() downloads, for `ppodeck prepare`
        text = config_to_toml(without_secrets(self.config), name=name, description=description,
                              header_comment=header,
                              provenance={"sources": dict(sources)} if sources else None)
        if self.imported is None:
            return text
        from ....engine.presets import with_flag_comments

        return with_flag_comments(text, self._script_line)

    def _still_unresolved_note(self) -> str:
        """What `presets from-command` writes too: the script's variables that no value replaced."""
        assert self.imported is not None
        argv = " ".join(to_argv(self.config))
        names = dict.fromkeys(u.variable for u in self.imported.unresolved if u.variable)
        left = [f"${name}" for name in names
                if re.search(rf"\$\{{?{re.escape(name)}\b", argv)]  # $NAME or ${NAME...}
        return ("\n\nFIX BEFORE USE: unresolved variables kept verbatim: " + ", ".join(left)
                if left else "")

    def _script_line(self, name: str) -> str | None:
        """Where the pasted script set flag `name`, while it still has the script's value."""
        assert self.imported is not None
        flag = BY_NAME.get(name)
        if flag is None or self.config.get(flag.dest) != self.imported.config.get(flag.dest):
            return None  # edited here: the script's line no longer says where it came from
        return self.imported.flag_comment(name)

    # ---- save, export, launch -----------------------------------------------------------------

    @on(Button.Pressed, "#save")
    def action_save_preset(self) -> None:
        from ....engine.presets import user_preset_dir

        directory = user_preset_dir()
        fresh_import = self.imported is not None and self.preset is None
        default = (self.preset_name if self._is_user_preset() or fresh_import
                   else f"{self.preset_name}-edited")
        description = self.preset.description if self.preset is not None else ""

        def validate(values: dict[str, str]) -> str:
            from ....engine.presets import find_preset_path

            name = values["name"]
            if not NAME_RE.match(name):
                return "a name is letters, digits, '.', '_' or '-' (it becomes the file name)"
            found = find_preset_path(name)
            if found is not None and found[0] == "built-in":
                return f"{name} is a built-in preset name: choose another name"
            exists = (directory / f"{name}.toml").exists()
            if exists and not (self._is_user_preset() and name == self.preset_name):
                return f"{directory / (name + '.toml')} exists: choose another name"
            return ""

        fields = (FieldSpec("name", "Preset name", default),
                  FieldSpec("description", "Description", description))
        self.app.push_screen(FormDialog("Save as preset", fields, "Save",
                                        note=f"Saved to {directory}", validate=validate,
                                        dialog_id="save-dialog"), self._save_confirmed)

    def _is_user_preset(self) -> bool:
        return self.preset is not None and self.preset.source == "user"

    def _save_confirmed(self, values: dict[str, str] | None) -> None:
        if values is None:
            return
        from ....engine.presets import PresetError, load_preset, save_preset, user_preset_dir

        name = values["name"]
        path = user_preset_dir() / f"{name}.toml"
        header = f"Saved from the PPO Deck editor (based on {self.preset_name})."
        if self.imported is not None and self.preset is None:
            header = (f"Imported from {self.imported.script} in the PPO Deck editor; a flag's "
                      "comment is the script line that set it.")
            header += self._still_unresolved_note()
        try:
            save_preset(path, self._toml(name, values["description"], header))
            saved = load_preset(str(path))
        except (OSError, PresetError) as exc:
            self.notify(f"could not save {path}: {exc}", severity="error")
            return
        drafts.delete_draft(self.preset_name)
        self.preset, self.preset_name, self.base = saved, name, self.config
        self._draft_dirty = False
        self._apply_report()
        self.notify(f"saved {path}", title="preset saved")

    @on(Button.Pressed, "#export")
    def action_export(self) -> None:
        default = str(Path.cwd() / f"{self.preset_name}.toml")
        fields = (FieldSpec("path", "Export to (.toml = preset file, .sh/.txt = command line)",
                            default),)
        self.app.push_screen(FormDialog("Export config", fields, "Export",
                                        dialog_id="export-dialog"), self._export_confirmed)

    def _export_confirmed(self, values: dict[str, str] | None) -> None:
        if not values or not values.get("path"):
            return
        from ....engine.launch.local import command_line
        from ....engine.presets import save_preset

        path = Path(values["path"]).expanduser()
        if path.suffix in (".sh", ".txt"):
            text = command_line(self.config) + "\n"
        else:
            text = self._toml(path.stem, f"exported from {self.preset_name}",
                              f"Exported from the PPO Deck editor (based on {self.preset_name}).")
        try:
            save_preset(path, text)
        except OSError as exc:
            self.notify(f"could not write {path}: {exc}", severity="error")
            return
        self.notify(f"exported to {path}", title="exported")

    @on(Button.Pressed, "#launch")
    def action_launch(self) -> None:
        if self.error_count:
            self.notify(f"fix {self.error_count} error(s) before launching (see Issues)",
                        severity="error")
            return

        from ....engine.launch.local import code_to_run, missing_inputs
        from ....engine.launch.memory_check import memory_refusals, refusal_text
        from ....engine.run.rundir import runs_root

        missing = missing_inputs(self.config)
        if missing:  # refused before anything starts, as `ppodeck run` does
            self.notify("\n".join(missing) + f"\nFix: correct the path, or run `ppodeck "
                        f"prepare {self.preset_name}`.", title="inputs missing",
                        severity="error", timeout=12)
            return
        where = runs_root().resolve() / f"<YYmmdd-HHMMSS>-{self.preset_name}-<hex4>"
        body = Text.assemble(("Run directory (created on confirm)\n", "bold"), f"{where}\n\n",
                             ("Command\n", "bold"), format_argv(self.masked_argv()))
        if self.report.forecast is not None:
            body.append(f"\n\n{self.report.forecast.text()}", "italic")
        code = code_to_run(self.config)
        if code:  # confirming is the explicit consent to run it
            body.append("\n\nThis run will execute code named by the config:\n", "bold red")
            body.append("\n".join(f"  {flag} {value}" for flag, value in code))
        refused = memory_refusals(self.config)  # read now: the last keystroke's may be stale
        if refused:  # a Ray job is judged on the cluster: submitting stays open
            body.append("\n\nThis machine cannot hold the run now; launching here is refused:"
                        "\n", "bold red")
            body.append(refusal_text(refused))
        self.app.push_screen(LaunchDialog("Launch run", body, config=self.config),
                             self._launch_confirmed)

    def _launch_confirmed(self, choice: LaunchChoice | bool | None) -> None:
        if isinstance(choice, LaunchChoice):
            self._flush_draft()
            self.launch_worker(self.config, self.preset_name, choice.submit, choice.miles_root)

    @work(thread=True, exclusive=True, group="launch", exit_on_error=False)
    def launch_worker(self, config: RunConfig, preset_name: str, submit: str = "",
                      miles_root: str = "") -> None:
        from ....engine.launch.local import prepare_run, start_driver
        from ....engine.run.secrets import secret_env

        try:
            if miles_root:  # miles' own train.py (engine/miles/drive.py), watched as a run
                from ....engine.miles.drive import launch as launch_miles

                rundir, popen = launch_miles(config, preset_name, Path(miles_root), submit or None)
                self.post_message(RunLaunched(rundir.path, popen))
                return
            rundir = prepare_run(config, preset_name, here=not submit)  # a job: judged there
            if submit:  # a Ray job; the returned process mirrors it into the run directory
                from ....engine.launch.jobs import forwarded_env
                from ....engine.launch.jobs import submit as submit_job

                popen = submit_job(rundir, preset_name, submit,
                                   {**forwarded_env(), **secret_env(config)})
            else:
                popen = start_driver(rundir, env=secret_env(config))
        except Exception as exc:  # LaunchError, OSError...: a sentence, never a traceback
            self.post_message(LaunchFailed(str(exc) or repr(exc)))
            return
        self.post_message(RunLaunched(rundir.path, popen))

    @on(LaunchFailed)
    def _launch_failed(self, message: LaunchFailed) -> None:
        self.notify(message.error, title="launch failed", severity="error", timeout=12)
