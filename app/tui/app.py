"""PPO Deck's Textual app: routing only. Logic lives in screens/ and widgets/.

Bare `ppodeck` calls run_tui(): preset picker -> flag editor -> launch -> run monitor;
`attach` opens the monitor on a run directory, `replay` plays a recorded events.jsonl.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, on
from textual.app import App
from textual.binding import Binding

from .commands import DeckCommands
from .messages import PresetChosen, RunChosen, RunLaunched
from .typeahead import Typeahead, fresh_copy, waits_for_focus

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel
    from textual.timer import Timer

    from ...engine.miles.script_import import ImportReport
    from .screens.edit import EditScreen


RELEASE_POLL_S = 0.02  # how often held keys look for a screen that can take them
GC_BACK_ON_S = 3.0  # the collector is back on by then even if no screen says it painted
# a pause in typing this long lets the collector run (PPODeckApp.hold_collector)
TYPING_PAUSE_S = 0.4


class PPODeckApp(App[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses elsewhere work too
    TITLE = "PPO Deck"
    COMMANDS = App.COMMANDS | {DeckCommands}
    BINDINGS = [
        Binding("f1", "help", "Help"),
        Binding("ctrl+o", "open_presets", "Presets", show=False),
        Binding("ctrl+r", "open_runs", "Runs", show=False),
    ]

    def __init__(self, preset: str | None = None, attach: str | None = None,
                 replay: str | None = None, *, replay_speed: float | None = None,
                 now: float | None = None) -> None:
        super().__init__()
        self.start_preset = preset
        self.start_attach = attach
        self.start_replay = replay
        self.replay_speed = replay_speed  # tests: 0 replays instantly
        self.fixed_now = now  # tests: freeze the wall clock of live runs
        self.drivers: list[subprocess.Popen[bytes]] = []
        self.typeahead = Typeahead()
        # (preset, the editor built for it while the picker rested, the drafts it read)
        self.prebuilt: tuple[str, EditScreen, tuple[object, ...]] | None = None
        self.crash_message = ""  # set by _handle_exception, printed once the terminal is back
        self.collector_timer: Timer | None = None  # hold_collector: runs after a typing pause

    def on_mount(self) -> None:
        self.set_interval(2.0, self._reap_drivers)
        self.set_timer(GC_BACK_ON_S, self.startup_painted)  # in case no screen reports it
        if self.start_replay:
            self.open_replay(Path(self.start_replay))
        elif self.start_attach:
            self.attach(self.start_attach)
        elif self.start_preset:
            self.open_editor(self.start_preset)
        else:
            self.open_picker()

    # ---- keys typed ahead (typeahead.py) -----------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            self.hold_collector()
            await self._deliver_keys([event])
            return
        await super().on_event(event)

    # ---- the garbage collector waits for a pause in typing -----------------------------------

    def hold_collector(self) -> None:
        """A key (a search filter, say) makes tens of thousands of objects, and a full
        collection landing on one costs it ~0.1 s; the collector is off while keys come and
        runs once typing pauses for TYPING_PAUSE_S."""
        if self.collector_timer is not None:
            self.collector_timer.reset()
        elif gc.isenabled():  # off already: start-up holds it (startup_painted turns it on)
            gc.disable()
            self.collector_timer = self.set_timer(TYPING_PAUSE_S, self._collect_in_pause)

    def _collect_in_pause(self) -> None:
        self.collector_timer = None
        gc.enable()
        gc.collect()

    def on_unmount(self) -> None:
        if self.collector_timer is not None:  # quit while typing: the collector goes back on
            self.collector_timer.stop()
            self.collector_timer = None
            gc.enable()

    async def _deliver_keys(self, keys: list[events.Key]) -> None:
        """Held keys first, then `keys`; whatever the screen on top cannot take yet is held."""
        pending = [*self.typeahead.take(), *keys]
        for index, key in enumerate(pending):
            if self._must_hold():
                for held in pending[index:]:
                    self.hold_key(held)
                return
            await super().on_event(key)
        self.typeahead.delivered()

    def hold_key(self, key: events.Key) -> None:
        """Keep `key` until the screen on top can take it (also for widgets: DeckInput)."""
        self.typeahead.hold(fresh_copy(key))
        self.set_timer(RELEASE_POLL_S, self._release_held)

    def _must_hold(self) -> bool:
        return waits_for_focus(self.screen) and not self.typeahead.expired()

    async def _release_held(self) -> None:
        if self.typeahead.keys:
            await self._deliver_keys([])

    # ---- routes -------------------------------------------------------------------------------

    def open_picker(self) -> None:
        from .screens.presets import PresetPickerScreen

        self.push_screen(PresetPickerScreen())

    def open_editor(self, preset: str | None) -> None:
        """Open a preset (name or path; None = schema defaults) in the flag editor: the one
        built while the picker rested on it, when its drafts have not changed since."""
        from .screens.edit import EditScreen, load_for_editing

        ready = self.take_prebuilt(preset)
        if ready is not None:
            self.push_screen(ready)
            return
        try:
            loaded = load_for_editing(preset)
        except Exception as exc:  # PresetError and friends: say why, stay where we are
            self.notify(str(exc), title="cannot open preset", severity="error", timeout=10)
            if len(self.screen_stack) <= 1:
                self.open_picker()
            return
        self.push_screen(EditScreen(*loaded))

    # ---- the editor built ahead (prebuild.py) -------------------------------------------------

    def prebuild_editor(self, preset: str) -> None:
        """Build the editor for `preset` now, off screen, so Enter only has to show it."""
        from . import prebuild

        if self.prebuilt is not None and self.prebuilt[0] == preset:
            return
        self.drop_prebuilt()
        self.prebuilt = prebuild.build(self, preset)

    def take_prebuilt(self, preset: str | None) -> EditScreen | None:
        from . import prebuild

        held, self.prebuilt = self.prebuilt, None
        if held is None:
            return None
        if held[0] == preset and prebuild.still_fresh(held):
            return held[1]
        prebuild.discard(self, held[1])
        return None

    def drop_prebuilt(self) -> None:
        from . import prebuild

        held, self.prebuilt = self.prebuilt, None
        if held is not None:
            prebuild.discard(self, held[1])

    def open_paste(self) -> None:
        """Paste a miles command or launch script; its import report; then the editor."""
        from .screens.paste import PasteCommandScreen

        def opened(report: ImportReport | None) -> None:
            if report is None:
                return
            from .screens.edit import (
                EditScreen,  # the editor loads once it is needed
            )

            name = "pasted" if report.script == "<pasted>" else Path(report.script).stem
            self.push_screen(EditScreen(None, report.config, name=name, imported=report))

        self.push_screen(PasteCommandScreen(), opened)

    def open_runs(self) -> None:
        from .screens.runs import RunsScreen

        if not isinstance(self.screen, RunsScreen):
            self.push_screen(RunsScreen())

    def attach(self, name_or_path: str) -> None:
        from ...engine.miles.watch import find_or_open

        try:
            rundir = find_or_open(name_or_path)  # a run, or a miles dump watched as one
        except Exception as exc:  # RunNotFound, MilesDumpError: show it, offer the list
            self.notify(str(exc), title="cannot attach", severity="error", timeout=10)
            self.open_runs()
            return
        self.open_monitor(run_dir=rundir.path)

    def _watch_if_miles(self, run_dir: Path) -> None:
        """A watched miles dump: bring it up to date, and follow it while it grows."""
        from ...engine.miles.watch import dump_of, watch
        from ...engine.run.rundir import RunDir

        try:
            watch(RunDir(run_dir))
        except OSError as exc:
            self.notify(f"its miles dump {dump_of(RunDir(run_dir))} could not be read: {exc}",
                        title="miles dump", severity="warning", timeout=10)

    def open_replay(self, path: Path) -> None:
        if not path.is_file():
            self.notify(f"{path} is not a file; pass a recorded events.jsonl",
                        title="cannot replay", severity="error", timeout=10)
            self.open_runs()
            return
        self.open_monitor(replay=path)

    def open_monitor(self, run_dir: Path | None = None, replay: Path | None = None) -> None:
        from .screens.monitor import MonitorScreen

        if run_dir is not None:
            self._watch_if_miles(run_dir)
        self.push_screen(MonitorScreen(run_dir=run_dir, replay=replay,
                                       replay_speed=self.replay_speed, now=self.fixed_now))

    # ---- messages from screens ---------------------------------------------------------------

    @on(PresetChosen)
    def _preset_chosen(self, message: PresetChosen) -> None:
        self.open_editor(message.preset)

    @on(RunChosen)
    def _run_chosen(self, message: RunChosen) -> None:
        self.open_monitor(run_dir=message.run_dir)

    @on(RunLaunched)
    def _run_launched(self, message: RunLaunched) -> None:
        from .screens.monitor import MonitorScreen

        if message.process is not None:
            self.drivers.append(message.process)
        self.notify(f"run started: {message.run_dir}", title="launched")
        self.switch_screen(MonitorScreen(run_dir=message.run_dir, now=self.fixed_now))

    def startup_painted(self) -> None:
        """The first screen is up. If start-up ran without the garbage collector (app.tui.entry),
        freeze what it built (kept for the whole session, never garbage) and collect again."""
        if not gc.isenabled() and self.collector_timer is None:  # not held for typing
            gc.freeze()
            gc.enable()

    def _reap_drivers(self) -> None:
        # A driver we started is our child: poll() reaps it so it never lingers as a zombie.
        self.drivers = [popen for popen in self.drivers if popen.poll() is None]

    # ---- actions (keys and the command palette) ------------------------------------------------

    def action_open_presets(self) -> None:
        from .screens.presets import PresetPickerScreen

        if not isinstance(self.screen, PresetPickerScreen):
            self.open_picker()

    def action_open_runs(self) -> None:
        self.open_runs()

    def action_paste_command(self) -> None:
        self.open_paste()

    def action_back(self) -> None:
        if len(self.screen_stack) > 2:
            self.pop_screen()
        else:
            self.open_picker()

    def action_help(self) -> None:
        from .screens.help import HelpScreen, help_for  # Markdown is slow to import

        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(help_for(self.screen, self.focused)))

    def action_screen(self, action: str) -> None:
        """Run `action` on the current screen when it offers it (palette entries)."""
        method = getattr(self.screen, f"action_{action}", None)
        if method is None:
            self.notify(f"'{action.replace('_', ' ')}' needs the flag editor or a run monitor",
                        severity="warning")
            return
        method()

    def action_stop_run(self) -> None:
        self.action_screen("stop_run")

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every notification as plain text: messages quote files and TOML (`[health]`,
        `tables are [name]`) that markup would eat; none of ours uses markup."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # ---- last-resort error handling -----------------------------------------------------------

    def _handle_exception(self, error: Exception) -> None:
        """Keep tracebacks off the screen: write them to a crash log, exit with one sentence."""
        if self.is_headless:
            super()._handle_exception(error)  # tests want the real exception
            return
        from .errors import write_crash_log

        path = write_crash_log(error)
        # printed by run_tui once the terminal is back: Textual's exit message goes through
        # Rich, which folds it to the console's width and would break the log's path where a
        # user copies it
        self.crash_message = (f"PPO Deck stopped after an internal error: {error!r}. "
                              f"Details: {path}. Unsaved editor changes are kept as a draft.")
        self.exit(return_code=1)


def run_tui(preset: str | None = None, attach: str | None = None,
            replay: str | None = None) -> int:
    """Open the TUI: the preset picker, or a preset in the editor, or a run's monitor. Returns
    the exit code: 1 after an internal error (see _handle_exception), else 0."""
    app = PPODeckApp(preset=preset, attach=attach, replay=replay)
    app.run()
    if app.crash_message:
        print(app.crash_message, file=sys.stderr)
    return app.return_code or 0
