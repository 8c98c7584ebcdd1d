"""One flag, rendered from its schema entry: the control follows `Flag.kind`, never the name.

int/float/str/list -> Input, bool -> Switch, tristate -> Select(unset | on | off),
choice -> Select(unset | choices...).
The field turns widget values into typed values (engine.config.coerce) and posts
FlagField.Changed; the edit screen validates and hands issues back down via `show_issue`.
Number fields are plain text inputs: Textual's integer/number inputs drop a character they
do not accept (`4.5` became `45`, `x` vanished), while the CLI refuses the same text. Here the
text stays as typed, and a value that does not parse is marked as an error until it is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.css.query import NoMatches
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static, Switch

from .. import fmt
from .text_input import DeckInput

if TYPE_CHECKING:
    from ....engine.config import Flag

LEVEL_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ"}
LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
TRISTATE_OPTIONS = (("on", True), ("off", False))


@dataclass(frozen=True)
class FieldIssue:
    level: str
    message: str
    fix: str = ""


class NoRelayoutOnResize(Widget):
    """A widget whose new size, set by a layout, asks for no second layout: Textual lays the
    whole screen out again after any widget's virtual size changes (a search key showed or
    hid fields, and each of them asked), though a widget that scrolls nothing was already
    arranged at that size in the pass that sized it. Mixed into the editor's field stack only."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size,
                      layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)


class FieldName(NoRelayoutOnResize, Label):
    pass


class FieldDetail(NoRelayoutOnResize, Static):
    pass


class FlagSelect(Select):
    """Select whose first value and options survive a mount race: Textual 8.2's Select sets its
    value in on_mount, and when its SelectCurrent has not composed its label yet (a busy machine,
    many fields mounting at once) the update raised NoMatches and took the editor down."""

    def _watch_value(self, value: Any) -> None:  # noqa: ANN401
        try:
            super()._watch_value(value)
        except NoMatches:
            self.call_after_refresh(self._watch_value, value)

    def _setup_options_renderables(self) -> None:
        """The same race in on_mount's option list (its SelectOverlay not composed yet), seen
        when fields mount in chunks on a busy machine: set the options up once it is there."""
        try:
            super()._setup_options_renderables()
        except NoMatches:
            if self.is_attached:
                self.call_after_refresh(self._setup_options_renderables)


def _select_value(value: Any) -> Any:
    return Select.NULL if value is None else value


def _default_hint(flag: Flag) -> str:
    return "unset" if flag.default is None else f"default {fmt.flag_value(flag.default)}"


def build_control(flag: Flag, value: Any, text: str | None = None) -> Widget:
    """The input widget for a flag kind (the one place that maps kinds to widgets); `text`:
    what the user typed when it does not parse (shown as typed, never rewritten)."""
    control_id = f"control-{flag.dest}"
    if flag.kind == "bool":
        return Switch(value=bool(value), id=control_id, classes="flag-control")
    if flag.kind == "tristate":
        return FlagSelect(TRISTATE_OPTIONS, prompt=f"unset ({_default_hint(flag)})",
                      value=_select_value(value), compact=True, id=control_id,
                      classes="flag-control")
    if flag.kind == "choice":
        return FlagSelect(((c, c) for c in flag.choices), prompt=f"unset ({_default_hint(flag)})",
                      value=_select_value(value), compact=True, id=control_id,
                      classes="flag-control")
    placeholder = _default_hint(flag) + (" (secret)" if flag.secret else "")
    shown = fmt.flag_value(value) if text is None else text
    return DeckInput(shown, placeholder=placeholder, password=flag.secret, compact=True,
                 id=control_id, classes="flag-control", select_on_focus=False)


ENGINE_CLASS_STYLE = {"honoured": "green", "refused": "bold red", "command-only": "yellow"}


def engine_class_text(flag: Flag) -> Text:
    """How PPO Deck's engine treats the flag, ahead of its help: "refused (why) · "."""
    engine = flag.engine
    text = Text(engine.cls, ENGINE_CLASS_STYLE[engine.cls])
    if engine.reason:
        text.append(f" ({engine.reason})", ENGINE_CLASS_STYLE[engine.cls])
    text.append(" · ", "dim")
    return text


class FlagField(NoRelayoutOnResize):
    """A flag's name, control, reset button, help and inline issue."""

    @dataclass
    class Changed(Message):
        """The user changed the field: `value` is typed (None = unset) unless `error` is set."""

        field: FlagField
        dest: str
        value: Any
        error: str = ""
        text: str = ""  # with `error`: the text as typed

        @property
        def control(self) -> FlagField:
            return self.field

    @dataclass
    class ResetRequested(Message):
        field: FlagField
        dest: str

    def __init__(self, flag: Flag, value: Any, changed: bool = False,
                 issue: FieldIssue | None = None, text: str | None = None) -> None:
        super().__init__(id=f"field-{flag.dest}", classes="flag-field")
        self.flag = flag
        self.value = value  # the typed value the field shows (None = unset)
        self.text = text  # text that does not parse, kept as typed (None: `value` is shown)
        self.issue = issue
        self.parse_error = issue.message if text is not None and issue is not None else ""
        # Changed, issue level and search hits are attributes and inline styles, not CSS
        # classes: a class change restyles the field and all its widgets (~4 ms each), and a
        # keystroke touched up to 200 fields.
        self._changed = changed
        self.set_class(flag.runs_code, "-runs-code")

    @property
    def dest(self) -> str:
        return self.flag.dest

    @property
    def changed(self) -> bool:
        return self._changed

    @property
    def level(self) -> str | None:
        """The level of the issue shown under the field (None: no issue)."""
        return self.issue.level if self.issue is not None else None

    def show_match(self, matches: bool) -> None:
        if self.display != matches:
            self.display = matches

    def compose(self) -> ComposeResult:
        # A grid (name | control | reset, then the detail across all three) instead of nested
        # containers: every widget less per field is ~200 less in a full editor layout.
        name = FieldName(self._name_text(), classes="flag-name")
        if len(self.flag.name) > 28:  # the column may cut it: hovering shows all of it
            name.tooltip = self.flag.name
        yield name
        yield build_control(self.flag, self.value, self.text)
        reset = Button("↺", compact=True, classes="flag-reset", tooltip="reset to preset value")
        reset.styles.visibility = "visible" if self._changed else "hidden"
        yield reset
        yield FieldDetail(self._detail_text(), classes="flag-detail")

    def _name_text(self) -> Content:
        style = "$error" if self.level == "error" else ""
        return Content.assemble(("● " if self.changed else "  ", "bold $warning"),
                                (self.flag.name, style))

    def _detail_text(self) -> Text:
        """Engine class, help, then the issue (if any) on its own line, in one widget."""
        extra = " Names code that will run." if self.flag.runs_code else ""
        text = engine_class_text(self.flag)
        text.append(self.flag.help + extra, "dim")
        if self.issue is not None:
            fix = f"  Fix: {self.issue.fix}" if self.issue.fix else ""
            icon = LEVEL_ICON.get(self.issue.level, "")
            text.append(f"\n{icon} {self.issue.message}{fix}", LEVEL_STYLE.get(self.issue.level))
        return text

    @property
    def control(self) -> Widget:
        return self.query_one(".flag-control")

    # ---- user edits -> Changed --------------------------------------------------------------

    @on(Input.Changed, ".flag-control")
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._typed(event.value)

    @on(Switch.Changed, ".flag-control")
    def _switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self._emit(event.value)

    @on(Select.Changed, ".flag-control")
    def _select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._emit(None if event.value is Select.NULL else event.value)

    @on(Button.Pressed, ".flag-reset")
    def _reset_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.ResetRequested(self, self.dest))

    def _typed(self, text: str) -> None:
        from ....engine.config import coerce

        if not text.strip():
            self._emit(None)
            return
        try:
            value = coerce(self.flag, text)
        except ValueError as exc:
            self.parse_error = str(exc)
            self.text = text
            self.post_message(self.Changed(self, self.dest, None, self.parse_error, text))
            return
        self._emit(value)

    def _emit(self, value: Any) -> None:
        if value == self.value and not self.parse_error:
            return  # echo of a programmatic set_value, or no real change
        self.parse_error = ""
        self.text = None
        self.value = value
        self.post_message(self.Changed(self, self.dest, value))

    # ---- attributes down --------------------------------------------------------------------
    # A field may not have composed yet (its group mounts fields a few at a time, FlagGroup):
    # then only the attributes change, and compose() builds from them.

    def _part(self, selector: str) -> Any:  # noqa: ANN401
        return next(iter(self.query(selector)), None)

    def set_value(self, value: Any) -> None:
        """Show `value` without reporting it back as a user change."""
        self.value = value
        self.parse_error = ""
        self.text = None
        control = self._part(".flag-control")
        if isinstance(control, Input):
            control.value = fmt.flag_value(value)
        elif isinstance(control, Switch):
            control.value = bool(value)
        elif isinstance(control, Select):
            control.value = _select_value(value)

    def mark_changed(self, changed: bool) -> None:
        if changed != self._changed:
            self._changed = changed
            reset, name = self._part(".flag-reset"), self._part(".flag-name")
            if reset is not None and name is not None:
                reset.styles.visibility = "visible" if changed else "hidden"
                name.update(self._name_text())

    def show_issue(self, issue: FieldIssue | None) -> None:
        if issue == self.issue:
            return
        was_error = self.level == "error"
        self.issue = issue
        name, detail = self._part(".flag-name"), self._part(".flag-detail")
        if name is None or detail is None:
            return
        if was_error != (self.level == "error"):
            name.update(self._name_text())
        detail.update(self._detail_text())

    def focus_control(self) -> None:
        self.control.focus()
