"""Modal dialogs: confirm launch (argv + run directory, run here or submit to a Ray cluster),
confirm stop, save as preset, export."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import RenderableType
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ..widgets.footer import DeckFooter
from ..widgets.text_input import DeckInput

if TYPE_CHECKING:
    from ....engine.config import RunConfig
    from ....engine.miles.parser_gate import Verdict


class ConfirmDialog(ModalScreen[bool]):
    """Yes/no with a body; dismisses True on confirm."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+y", "confirm", "Confirm")]
    TYPEAHEAD = True  # keys typed while it opens wait for its focus (typeahead.py)

    def __init__(self, title: str, body: RenderableType, confirm_label: str,
                 variant: str = "primary", dialog_id: str = "confirm-dialog") -> None:
        super().__init__(id=dialog_id)
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label
        self.variant = variant

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body, id="dialog-text")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel (esc)", id="cancel")
                yield Button(f"{self.confirm_label} (ctrl+y)", id="confirm",
                             variant=self.variant)  # type: ignore[arg-type]
        yield DeckFooter()  # the dialog's own keys, not the screen's underneath

    def on_mount(self) -> None:
        self.query_one("#confirm", Button).focus()

    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        if not self.confirm_held():
            self.dismiss(self.confirmed_result())

    def confirmed_result(self) -> bool:
        return True

    def confirm_held(self) -> bool:
        """True keeps the dialog open (it says why)."""
        return False

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)


@dataclass(frozen=True)
class LaunchChoice:
    """What the launch dialog decided: run here (submit "") or submit to a Ray cluster; on PPO
    Deck's engine (miles_root "") or miles' own train.py from that checkout."""

    submit: str = ""
    miles_root: str = ""


class LaunchDialog(ConfirmDialog):
    """Confirm a launch, with the choice to submit it to a Ray cluster as a Ray job instead
    (the dashboard address; `ppodeck run --submit` does the same). Dismisses a LaunchChoice,
    or False on cancel.

    With a miles checkout typed in, that checkout's own parser judges `config`'s miles argv in
    a worker thread (engine/miles/parser_gate.py, as `run --engine miles` does): the line
    under the command says "checking…", then the verdict; a refusal holds the launch."""

    DEFAULT_CSS = "LaunchDialog #submit-address, LaunchDialog #miles-root { width: 1fr; }"

    def __init__(self, title: str, body: RenderableType,
                 dialog_id: str = "confirm-launch", config: RunConfig | None = None) -> None:
        super().__init__(title, body, "Launch", "success", dialog_id=dialog_id)
        self.config = config
        self.miles_parser = ("", "")  # (checkout, outcome): checking, accept, refuse, ...

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            # not in the focus chain: Tab from Launch goes to the address, where Enter launches
            with VerticalScroll(classes="dialog-body", can_focus=False):
                yield Static(self.body, id="dialog-text")
                yield Static("", id="miles-parser", markup=False)
            with Horizontal(classes="dialog-buttons"):
                # one row with the buttons: the dialog keeps its height on small terminals
                yield DeckInput("", placeholder="empty: run here; or submit to a Ray cluster: "
                            "http://HEAD:8265", id="submit-address",
                            tooltip="Ray Jobs: the cluster's dashboard address. Auth headers "
                                    "come from $PPODECK_RAY_JOB_HEADERS (JSON).")
                yield DeckInput("", placeholder="empty: PPO Deck's engine; or a miles checkout",
                            id="miles-root",
                            tooltip="`ppodeck run --engine miles --miles-root DIR`: miles' own "
                                    "train.py with this command (PPO Deck's own flags left "
                                    "out), watched through its --dump-details")
                yield Button("Cancel (esc)", id="cancel")
                yield Button(f"{self.confirm_label} (ctrl+y)", id="confirm", variant="success")
        yield DeckFooter()

    def confirmed_result(self) -> LaunchChoice:  # type: ignore[override]
        return LaunchChoice(submit=self.query_one("#submit-address", Input).value.strip(),
                            miles_root=self.query_one("#miles-root", Input).value.strip())

    @on(Input.Submitted, "#submit-address")
    @on(Input.Submitted, "#miles-root")
    def _address_entered(self, event: Input.Submitted) -> None:
        """Enter in the address field launches, as Enter on the Launch button does."""
        event.stop()
        self.action_confirm()

    def confirm_held(self) -> bool:
        root = self.query_one("#miles-root", Input).value.strip()
        checked, outcome = self.miles_parser
        if root and checked == root and outcome in ("checking", "refuse"):
            if outcome == "checking":
                self._say_miles_parser("miles' parser: still checking… (launch once it "
                                       "answers, or clear the miles checkout)")
            return True
        return False

    @on(Input.Changed, "#miles-root")
    def _miles_root_changed(self, event: Input.Changed) -> None:
        root = event.value.strip()
        if self.config is None or not root or not (Path(root).expanduser() / "train.py"
                                                   ).is_file():
            self.miles_parser = (root, "")
            self._say_miles_parser("")
            return
        self.miles_parser = (root, "checking")
        self._say_miles_parser("miles' parser: checking…")
        self._judge_with_miles(root, self.config)

    @work(thread=True, exclusive=True, group="miles-parser", exit_on_error=False)
    def _judge_with_miles(self, root: str, config: RunConfig) -> None:
        from ....engine.miles.parser_gate import GateSetupError, gate_setup, judge

        try:
            setup = gate_setup(Path(root))
        except GateSetupError as exc:
            self.app.call_from_thread(self._miles_parser_answered, root, "unavailable",
                                      f"miles' parser: not run: {exc}")
            return
        verdict = judge(config, setup)
        self.app.call_from_thread(self._miles_parser_answered, root, verdict.outcome,
                                  miles_parser_line(verdict, setup.timeout_s))

    def _miles_parser_answered(self, root: str, outcome: str, line: str) -> None:
        if self.query_one("#miles-root", Input).value.strip() != root:
            return  # the field moved on while this checkout was judged
        self.miles_parser = (root, outcome)
        self._say_miles_parser(line)

    def _say_miles_parser(self, line: str) -> None:
        self.query_one("#miles-parser", Static).update(line)


def miles_parser_line(verdict: Verdict, timeout_s: float) -> str:
    """One line for the launch dialog: what the checkout's own parser said."""
    took = "cached" if verdict.cached else f"{verdict.seconds:.1f} s"
    if verdict.outcome == "accept":
        return f"miles' parser: accepts this command ({took})"
    if verdict.outcome == "refuse":
        at = f" (raised at {verdict.site})" if verdict.site else ""
        return f"miles' parser refuses this command: {verdict.error}{at}; launch held"
    if verdict.outcome == "skipped":
        return "miles' parser: not run ($PPODECK_MILES_PARSER_TIMEOUT is 0)"
    return (f"miles' parser: not run to the end ({verdict.error}); PPO Deck's rules alone "
            "judge this launch. Fix: $PPODECK_MILES_PYTHON names the Python miles runs in")


@dataclass(frozen=True)
class FieldSpec:
    id: str
    label: str
    value: str = ""
    placeholder: str = ""


class FormDialog(ModalScreen[dict[str, str] | None]):
    """A few labelled inputs; dismisses {id: text} or None. `validate` may veto with a reason."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    TYPEAHEAD = True

    def __init__(self, title: str, fields: tuple[FieldSpec, ...], confirm_label: str,
                 note: str = "", validate: Callable[[dict[str, str]], str] | None = None,
                 dialog_id: str = "form-dialog") -> None:
        super().__init__(id=dialog_id)
        self.title_text = title
        self.fields = fields
        self.confirm_label = confirm_label
        self.note = note
        self.validate = validate

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            for spec in self.fields:
                yield Label(spec.label)
                yield DeckInput(spec.value, placeholder=spec.placeholder, id=spec.id)
            if self.note:
                yield Static(self.note, classes="dialog-note", markup=False)
            yield Static("", id="dialog-error", classes="dialog-error", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self.confirm_label, id="confirm", variant="primary")

    def values(self) -> dict[str, str]:
        return {spec.id: self.query_one(f"#{spec.id}", Input).value.strip()
                for spec in self.fields}

    @on(Input.Submitted)
    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        values = self.values()
        reason = self.validate(values) if self.validate is not None else ""
        if reason:
            self.query_one("#dialog-error", Static).update(reason)
            return
        self.dismiss(values)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
