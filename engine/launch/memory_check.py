"""The launch pre-flight for memory: just before a run starts, read what the GPUs and the host
hold now (engine/host/memory.py, never the cached reading a keystroke's check() uses) and refuse
the run when its memory estimate does not fit, with check()'s own message.

A holder is named by its PPO Deck run: from its ancestors' command line (the host seam), else
from the process groups and sessions the runs directory's status.json files record (a run
started elsewhere under the same runs root, a miles supervisor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config.issues import Issue
from ..config.rules_engine import Machine, this_machine
from ..config.rules_memory import MEMORY_CODES
from ..host.memory import Holdings, read_holdings, run_id_of, session_of
from ..run.rundir import RunDir, list_runs, read_status
from ..vocabulary import ACTIVE_STATES

if TYPE_CHECKING:
    from ..config import RunConfig


def fresh_machine(reader: Callable[..., Holdings] | None = None) -> Machine:
    """This machine with a reading taken now (`reader`: read_holdings when None)."""
    reading = (reader or read_holdings)(run_of_pid=run_namer())
    return dataclasses.replace(this_machine(), holdings=reading)


def memory_refusals(config: RunConfig, machine: Machine | None = None) -> list[Issue]:
    """check()'s memory errors for `config` on PPO Deck's engine (the estimate models it, not
    miles) against a fresh reading (or `machine`); empty when it fits."""
    from ..config import check

    report = check(config, machine=machine or fresh_machine())
    return [issue for issue in report.errors if issue.code in MEMORY_CODES]


def refusal_text(issues: list[Issue]) -> str:
    """The refusal as the CLI and the TUI show it: each error with its fix."""
    return "\n".join(f"{issue.message} Fix: {issue.fix}" for issue in issues)


def run_namer() -> Callable[[int], str | None]:
    """Names the PPO Deck run holding a pid: its ancestors' --run-dir, else a live run whose
    recorded process group (its session: the driver leads both) is the pid's session. The
    runs directory is read once, at the first pid that needs it."""
    table: dict[int, str] | None = None

    def name(pid: int) -> str | None:
        nonlocal table
        found = run_id_of(pid)
        session = session_of(pid)
        if found or session is None:
            return found
        if table is None:
            table = _live_run_sessions()
        return table.get(session)

    return name


def _live_run_sessions() -> dict[int, str]:
    sessions: dict[int, str] = {}
    for info in list_runs():
        if info.state not in ACTIVE_STATES:
            continue
        status = read_status(RunDir(info.path))
        for key in ("pgid", "pid"):
            if isinstance(status.get(key), int):
                sessions[status[key]] = info.id
    return sessions
