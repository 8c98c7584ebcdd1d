"""The attached progress view of `ppodeck run`: a live bar per rollout, the last metrics,
Ctrl-C to detach or stop, and the exit code from the run's final state.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ...engine.run.events import follow
from ...engine.run.rundir import (
    RunDir,
    read_status,
    write_status,
)
from ...engine.run.state import RunState
from ...engine.vocabulary import (
    ACTIVE_STATES,
    INIT_PHASE,
    INIT_STEP_LABEL,
    Kind,
    Metric,
    State,
    is_eval_reward,
)
from .common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
)
from .common import err as _err
from .tail import format_event, number_text

if TYPE_CHECKING:
    import subprocess




# --------------------------------------------------------------------- attached progress view


class RunProgress:
    """What the attached view shows: the run's fold (engine.run.state, as the TUI's) plus this
    view's own wall clock and Ctrl-C note."""

    def __init__(self, run_id: str, num_rollout: int | None) -> None:
        self.run_id = run_id
        self.fold = RunState(series_capacity=8, log_capacity=1, phase_capacity=16)
        self.fold.num_rollout = num_rollout
        self.started = time.monotonic()
        self.interrupted_state: str | None = None  # after Ctrl-C, until the run says more
        self.note = ""  # e.g. the Ctrl-C hint

    def apply(self, event: dict[str, Any]) -> None:
        if event.get("kind") == Kind.STATUS:
            self.interrupted_state = None
        self.fold.apply((event,))

    @property
    def rollout_id(self) -> int | None:
        return self.fold.rollout_id

    @property
    def num_rollout(self) -> int | None:
        return self.fold.num_rollout

    @property
    def state(self) -> str:
        return self.interrupted_state or self.fold.event_state or State.STARTING

    @property
    def phase(self) -> str:
        current, ended = self.fold.current_phase, self.fold.last_ended_phase
        step = self.fold.current_init_step
        if current == INIT_PHASE and step:  # the start's minute or two, step by step
            return f"{current}: {INIT_STEP_LABEL.get(step, step)}"
        return current or (f"{ended} done" if ended else State.STARTING)

    @property
    def reward(self) -> float | None:
        return self.fold.latest(Metric.REWARD)

    @property
    def value_loss(self) -> float | None:
        return self.fold.latest(Metric.VALUE_LOSS)

    @property
    def evals(self) -> dict[str, float]:
        """eval/<dataset> -> its latest mean reward."""
        return self.fold.eval_rewards()

    def rollout_text(self) -> str:
        return rollout_count_text(self.rollout_id, self.num_rollout)

    def eval_text(self) -> str:
        return "  ".join(f"{key} {number_text(value)}" for key, value in self.evals.items())

    def line(self) -> str:
        elapsed = _clock(time.monotonic() - self.started)
        evals = f"  {self.eval_text()}" if self.evals else ""
        return (f"rollout {self.rollout_text()}  phase {self.phase}  "
                f"reward {number_text(self.reward)}  "
                f"value loss {number_text(self.value_loss)}{evals}  elapsed {elapsed}")

    def __rich__(self) -> Group:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        done = 0 if self.rollout_id is None else self.rollout_id + 1
        grid.add_row("run", Text(f"{self.run_id}  ({self.state})"))
        grid.add_row("rollout", Text(self.rollout_text()))
        if self.num_rollout:
            grid.add_row("", ProgressBar(total=self.num_rollout, completed=done, width=40))
        grid.add_row("phase", Text(self.phase))
        grid.add_row("reward", number_text(self.reward))
        grid.add_row("value loss", number_text(self.value_loss))
        if self.evals:
            grid.add_row("eval reward", self.eval_text())
        grid.add_row("elapsed", _clock(time.monotonic() - self.started))
        return Group(grid, Text(self.note, style="yellow")) if self.note else Group(grid)


def eval_rewards(metrics: dict[str, Any]) -> dict[str, float]:
    """eval/<dataset> (a dataset's mean reward), not eval/<dataset>/... nor the _ratio keys."""
    return {k: v for k, v in metrics.items() if is_eval_reward(k) and isinstance(v, (int, float))}


def rollout_count_text(rollout_id: int | None, num_rollout: int | None) -> str:
    """"4/10" while rollout_id 3 (0-based) runs or once it is done."""
    done = "-" if rollout_id is None else str(rollout_id + 1)
    return f"{done}/{'?' if num_rollout is None else num_rollout}"




def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class _Interrupts:
    """SIGINT handler that only counts; the follow loop acts on the count (signal-safe)."""

    def __init__(self) -> None:
        self.received = 0
        self.handled = 0

    def handle(self, signum: int, frame: object) -> None:
        self.received += 1


class _View:
    """A Rich Live panel on a TTY; otherwise one plain line per finished rollout."""

    def __init__(self, progress: RunProgress, live: bool) -> None:
        self.progress = progress
        self.live = Live(progress, refresh_per_second=4, console=Console()) if live else None
        self.printed: int | None = None  # last rollout with a plain line

    def __enter__(self) -> _View:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.live is not None:
            self.live.stop()
        elif self.progress.rollout_id not in (None, self.printed):
            typer.echo(self.progress.line())

    def update(self, batch: list[dict[str, Any]]) -> None:
        for event in batch:
            if self.live is None:
                self._line_if_rollout_done(event.get("rollout_id"))
            self.progress.apply(event)
            kind = event["kind"]
            loud_log = kind == Kind.LOG and event.get("level") in ("warning", "error")
            if kind == Kind.STATUS or loud_log:
                self.say(format_event(event))

    def _line_if_rollout_done(self, rollout_id: Any) -> None:
        current = self.progress.rollout_id
        if isinstance(rollout_id, int) and current is not None and rollout_id > current:
            typer.echo(self.progress.line())
            self.printed = current

    def say(self, message: str) -> None:
        if self.live is not None:
            self.live.console.print(message, markup=False, highlight=False)
        else:
            typer.echo(message, err=True)


def follow_run(rundir: RunDir, popen: subprocess.Popen[bytes], num_rollout: int | None) -> int:
    progress = RunProgress(rundir.id, num_rollout)
    view = _View(progress, live=sys.stdout.isatty())
    interrupts = _Interrupts()
    driver_gone = threading.Event()
    previous = signal.signal(signal.SIGINT, interrupts.handle)
    try:
        with view:
            for batch in follow(rundir.events_jsonl, driver_gone, idle_batches=True,
                                on_warning=view.say):
                view.update(batch)
                _act_on_interrupts(rundir, interrupts, view)
                if popen.poll() is not None:
                    driver_gone.set()  # follow() reads once more, then ends
    finally:
        signal.signal(signal.SIGINT, previous)
    return _exit_code(rundir, popen, interrupted=interrupts.received > 0)


def _act_on_interrupts(rundir: RunDir, interrupts: _Interrupts, view: _View) -> None:
    from ...engine.launch.local import stop_run

    while interrupts.handled < interrupts.received:
        interrupts.handled += 1
        force = interrupts.handled > 1
        view.say(stop_run(rundir, force=force))
        view.progress.interrupted_state = "killed" if force else State.STOPPING
        view.progress.note = "" if force else ("stopping after the current rollout… "
                                               "press Ctrl-C again to stop at once")
        if view.live is None and view.progress.note:
            view.say(view.progress.note)  # the live panel shows the note itself


def _exit_code(rundir: RunDir, popen: subprocess.Popen[bytes], interrupted: bool) -> int:
    status = read_status(rundir)
    state = status.get("state")
    if state in ACTIVE_STATES or state in (State.LOST, State.CREATED, None):
        detail = (f"driver exited with code {popen.returncode} before recording a final "
                  f"state; see {rundir.driver_log}")
        status = write_status(rundir, state=State.FAILED, detail=detail, ended=time.time())
        state = State.FAILED
    detail = status.get("detail") or ""
    if state == State.SUCCEEDED:
        _err(f"run {rundir.id} succeeded")
        return 0
    if interrupted or state == State.STOPPED:
        _err(f"run {rundir.id} stopped: {detail}")
        return EXIT_INTERRUPTED
    _err(f"run {rundir.id} {state}: {detail}\ndriver log: {rundir.driver_log}")
    return EXIT_FAILED


