"""Preset picker: built-in, user and team presets with fuzzy search and a preview of what each
changes from the schema defaults. Enter opens the selected preset in the flag editor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.fuzzy import Matcher
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from .. import drafts, fmt
from ..messages import PresetChosen
from ..widgets.footer import DeckFooter
from ..widgets.text_input import DeckInput

if TYPE_CHECKING:
    from ....engine.presets import Preset

SOURCE_STYLE = {"built-in": "cyan", "user": "green", "team": "magenta", "file": "yellow"}

HELP = """\
## Preset picker
Built-in presets ship with PPO Deck; user presets live in the config directory
($PPODECK_CONFIG_DIR/presets); team presets come from $PPODECK_PRESET_PATH. The search box
has the keys: every letter you type searches names, descriptions and hardware; `up`/`down`
(and page keys) move through the list; `enter` opens the selected preset in the editor.
`ctrl+n` opens the editor on the defaults alone, `ctrl+r` lists runs, `ctrl+g` imports a miles
command or launch script.

The preview lists every flag the preset changes from the defaults. A `draft` tag means unsaved
edits are waiting for that preset. A red row is a file that does not load (every error of the
file is in the preview); a `clash` tag means two files claim one name, and the preview says
which file that name opens.
"""


def _haystack(preset: Preset) -> str:
    return f"{preset.name} {preset.description} {_hardware(preset)} {preset.source}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _hardware(preset: Preset) -> str:
    return str(preset.provenance.get("tested_hardware", "-"))


def _gpus(preset: Preset) -> str:
    """GPUs the preset (or the nearest preset it extends) declares, else what its config
    derives (placement bundles): a preset extending tiny-cpu needs tiny-cpu's 0, not 1."""
    if preset.error:
        return "?"
    from ....engine.config import derive
    from ....engine.host.machine import environment
    from ....engine.presets import extends_chain, resolve_preset

    try:
        chain = extends_chain(preset)
        declared = [p.provenance["gpus"] for p in chain if "gpus" in p.provenance]
        if declared:
            return str(declared[-1])  # the chain runs root first: the last is the nearest
        needed = derive(resolve_preset(preset), environment()).gpus_needed
    except Exception:  # a broken extends chain shows in the preview, not here
        return "?"
    return "?" if needed is None else str(needed)


def preset_clash(preset: Preset) -> str:
    return getattr(preset, "clash", "") or ""


def _row_text(preset: Preset) -> str:
    if preset.error:
        errors = preset.error.count("\n") + 1
        first = preset.error.splitlines()[0]
        return f"{errors} errors: {first}" if errors > 1 else first
    return preset.description


def _file_head(preset: Preset) -> Text:
    head = Text.assemble((preset.name, "bold"), f"  ({preset.source} preset, {preset.path})")
    if preset_clash(preset):
        head.append(f"\nname clash: {preset_clash(preset)}", "magenta")
    for shadowed in preset.shadows:
        head.append(f"\nwins over {shadowed} (same file name, later on the search path)",
                    "magenta")
    return head


def preview(preset: Preset) -> Text:
    """What the preset changes from the schema defaults, plus its provenance."""
    if preset.error:
        errors = preset.error.splitlines()
        head = _file_head(preset)
        head.append(f"\n\ndoes not load: {len(errors)} error(s)\n", "bold red")
        for error in errors:
            head.append(f"✖ {error}\n", "red")
        return head
    from ....engine.config import RunConfig
    from ....engine.presets import diff_configs, preset_engines, resolve_preset

    try:
        diffs = diff_configs(RunConfig(), resolve_preset(preset))
    except Exception as exc:  # a broken extends chain: show why instead of a preview
        return Text(str(exc), "bold red")
    # the file name, not the path: paths differ per machine (and per test run)
    source = f"  ({preset.source} preset, {preset.path.name})"
    head = Text.assemble((preset.name, "bold"), source)
    if preset_clash(preset) or preset.shadows:
        head = _file_head(preset)
    head.append("\n")
    head.append(preset.description or "(no description)", "italic")
    for key in ("author", "created", "tested_hardware", "gpus"):
        if key in preset.provenance:
            head.append(f"\n{key.replace('_', ' ')}: ", "dim")
            head.append(str(preset.provenance[key]))
    if preset.extends:
        head.append("\nextends: ", "dim")
        head.append(preset.extends, "bold")
    head.append("\nruns on: ", "dim")
    head.append(", ".join(preset_engines(preset)))
    head.append(f"\n\n{len(diffs)} flag(s) changed from the defaults\n", "bold")
    # plain aligned Text, not a rich Table: the preview redraws on every cursor move
    width = max((len(d.flag) for d in diffs), default=4) + 2
    shown = [(fmt.flag_value(d.a) or "unset", fmt.flag_value(d.b) or "unset") for d in diffs]
    default_width = min(max((len(a) for a, _ in shown), default=7), 24) + 2
    for diff, (default, value) in zip(diffs, shown, strict=True):
        head.append(f"{diff.flag:<{width}}")
        head.append(f"{_cut(default, default_width - 2):<{default_width}}", "dim")
        head.append(f"{value}\n", "bold green")
    return head


class PresetPickerScreen(Screen[None]):
    # The search box keeps the focus, so every printable key is search text and none is lost
    # to a command; commands are keys that type nothing. Enter in the box holds the keys
    # typed after it (DeckInput.holds_on_submit) until the editor it opens can take them.
    BINDINGS = [
        Binding("enter", "open", "Open", show=True),
        Binding("ctrl+n", "defaults", "Defaults"),
        Binding("ctrl+r", "app.open_runs", "Runs"),
        Binding("ctrl+g", "app.paste_command", "Import command"),
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "move(-10)", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("ctrl+f", "search", "Search", show=False),
    ]
    HELP = HELP
    AUTO_FOCUS = "#picker-search"
    TYPEAHEAD = True  # keys typed before the search box has focus wait for it (typeahead.py)

    def __init__(self) -> None:
        super().__init__()
        self.presets: list[Preset] = []
        self.shown: list[Preset] = []
        self._filled_width = 0
        self._previewed: Preset | None = None
        self.holding_keys = False  # set by the search box's Enter (typeahead.py)
        self._prebuild_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static("Choose a preset  ·  type to search, up/down to choose  ·  enter opens it in "
                     "the editor  ·  ctrl+g imports a miles command or script",
                     id="picker-hint", markup=False)
        yield DeckInput(placeholder="fuzzy search presets", id="picker-search", compact=True,
                        select_on_focus=False, holds_on_submit=True)
        with Vertical(id="picker-body"):
            yield DataTable(id="preset-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="preset-preview"):
                yield Static("", id="preset-preview-text")
        yield DeckFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.can_focus = False  # the search box drives it: no key goes astray in the table
        table.add_columns("preset", "source", "GPUs", "tested hardware", "description")
        self.load()
        self.call_after_refresh(self._painted)

    def _painted(self) -> None:
        if hasattr(self.app, "startup_painted"):
            self.app.startup_painted()
    def on_resize(self) -> None:
        if self.presets and self.size.width != self._filled_width:
            self._fill()  # the description column is cut to the new width

    def load(self) -> None:
        from ....engine.presets import list_presets

        try:
            self.presets = list_presets()
        except Exception as exc:  # unreadable preset dir: show why, keep the screen usable
            self.presets = []
            self.notify(f"cannot list presets: {exc}", severity="error")
        self.filter("")

    def filter(self, query: str) -> None:
        if query.strip():
            matcher = Matcher(query)
            # a hit in the name outranks one spread over description and hardware
            scored = [(2 * matcher.match(p.name) + matcher.match(_haystack(p)), p)
                      for p in self.presets]
            # a name clash ranks below the file that name opens
            ranked = sorted(scored, key=lambda s: (-s[0], bool(preset_clash(s[1]))))
            self.shown = [p for score, p in ranked if score > 0]
        else:
            self.shown = list(self.presets)
        self._fill()

    def _column_widths(self) -> tuple[int, int]:
        """(hardware, description) widths that fit the table into the screen width."""
        available = self.size.width - 4 - 2 * 5  # borders + scrollbar, 1 cell padding a side
        name = max((len(p.name) + (6 if drafts.has_draft(p.name) else 0)
                    for p in self.shown), default=8)
        hardware = max((len(_hardware(p)) for p in self.shown), default=4)
        description = available - name - 8 - 4 - hardware
        if description < 24:  # narrow terminal: hardware gives way first
            hardware = max(10, hardware - (24 - description))
            description = available - name - 8 - 4 - hardware
        return hardware, max(8, description)

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        hardware_width, description_width = self._column_widths()
        self._filled_width = self.size.width
        for index, preset in enumerate(self.shown):
            name = Text(preset.name, "bold red" if preset.error else "bold")
            if drafts.has_draft(preset.name):
                name.append(" draft", "italic yellow")
            if preset_clash(preset):
                name.append(" clash", "italic magenta")
            # rows are keyed by position: two files may claim one name (a teammate's copy)
            table.add_row(name, Text(preset.source, SOURCE_STYLE.get(preset.source, "")),
                          _gpus(preset), _cut(_hardware(preset), hardware_width),
                          _cut(_row_text(preset), description_width), key=str(index))
        if cursor and self.shown:
            table.move_cursor(row=min(cursor, len(self.shown) - 1))
        self._show_preview()

    @property
    def selected(self) -> Preset | None:
        table = self.query_one(DataTable)
        if not self.shown or table.cursor_row is None:
            return None
        return self.shown[min(table.cursor_row, len(self.shown) - 1)]

    def _show_preview(self) -> None:
        preset = self.selected
        if preset is not None and preset is self._previewed:
            return  # filling the table highlights the row it already previews
        self._previewed = preset
        text: Any = preview(preset) if preset else Text("no preset matches", "dim")
        self.query_one("#preset-preview-text", Static).update(text)
        self._prebuild_when_resting()

    def _prebuild_when_resting(self) -> None:
        """Build the highlighted preset's editor once the keys rest (app/tui/prebuild.py)."""
        from ..prebuild import PREBUILD_REST_S

        if self._prebuild_timer is not None:
            self._prebuild_timer.stop()
        self._prebuild_timer = self.set_timer(PREBUILD_REST_S, self._prebuild)

    def _prebuild(self) -> None:
        preset = self.selected
        prebuild = getattr(self.app, "prebuild_editor", None)
        if preset is None or preset.error or prebuild is None or not self.is_current:
            return
        prebuild(self._open_name(preset))

    def on_screen_suspend(self) -> None:
        """Another screen is on top: an editor built ahead and not taken is not needed."""
        if self._prebuild_timer is not None:
            self._prebuild_timer.stop()
        drop = getattr(self.app, "drop_prebuilt", None)
        if drop is not None:
            drop()

    def on_screen_resume(self) -> None:
        if self.presets:
            self._prebuild_when_resting()

    @on(Input.Changed, "#picker-search")
    def _search(self, event: Input.Changed) -> None:
        event.stop()
        self.filter(event.value)
        self._prebuild_when_resting()  # each key puts the rest off

    @on(Input.Submitted, "#picker-search")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            self.action_open()  # the editor, pushed now, holds the keys typed after Enter
        finally:
            self.holding_keys = False

    @on(DataTable.RowHighlighted)
    def _highlighted(self) -> None:
        self._show_preview()

    @on(DataTable.RowSelected)
    def action_open(self) -> None:
        preset = self.selected
        if preset is None:
            self.notify("no preset matches the search; clear it to see every preset",
                        severity="warning")
            return
        if preset.error:
            self.notify(preset.error, title="preset does not load", severity="error",
                        markup=False, timeout=12)
            return
        self._choose(self._open_name(preset))

    @staticmethod
    def _open_name(preset: Preset) -> str:
        """The file itself when a clashing name could open another file than the row shows."""
        return (str(preset.path) if preset.source == "file" or preset_clash(preset)
                else preset.name)

    def action_defaults(self) -> None:
        self._choose(None)

    def _choose(self, preset: str | None) -> None:
        """Open the editor now (from the key queue: see BINDINGS), or tell the app to."""
        open_editor = getattr(self.app, "open_editor", None)
        if open_editor is not None:
            open_editor(preset)
        else:
            self.post_message(PresetChosen(preset))

    def action_move(self, rows: int) -> None:
        table = self.query_one(DataTable)
        if self.shown:
            table.move_cursor(row=max(0, min(len(self.shown) - 1, table.cursor_row + rows)))

    def action_search(self) -> None:
        self.query_one("#picker-search", Input).focus()
