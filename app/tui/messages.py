"""Cross-screen messages: past-tense facts posted by workers, handled on the UI thread.

Widget-local messages live nested in their widget (FlagField.Changed, IssuesPanel.Selected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.message import Message


@dataclass
class EventsArrived(Message):
    """A batch of run events read by the tail worker (never coalesced: each batch counts)."""

    events: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


@dataclass
class RunStatusRead(Message):
    """status.json as read_status() returned it; only the newest matters."""

    status: dict[str, Any]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunStatusRead)


@dataclass
class TailEnded(Message):
    """The tail worker stopped: the run finished, the replay ran out, or reading failed."""

    reason: str
    failed: bool = False


@dataclass
class RunLaunched(Message):
    """prepare_run + start_driver succeeded: the monitor can attach to `run_dir`."""

    run_dir: Path
    process: Any = None  # the driver's Popen: the app polls it so it never lingers as a zombie


@dataclass
class LaunchFailed(Message):
    error: str


@dataclass
class RunsListed(Message):
    """ppodeck.engine.run.rundir.list_runs() result (RunInfo objects), or an error sentence."""

    runs: list[Any]
    error: str = ""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsListed)


@dataclass
class PresetChosen(Message):
    """The picker chose a preset (name or path) to open in the editor; None = defaults."""

    preset: str | None


@dataclass
class RunChosen(Message):
    """The runs list chose a run directory to attach to."""

    run_dir: Path
