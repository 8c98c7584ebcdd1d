"""Polling helpers for tests that start real (fake-driver) processes."""

from __future__ import annotations

import time

from ppodeck.engine.driver.reaper import group_members
from ppodeck.engine.run.rundir import RunDir, read_status


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """True once no live process is left in the group.

    Zombies count as gone: an orphan is reaped by init, and some container inits never do.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not live_members(pgid):
            return True
        time.sleep(0.02)
    return False


def live_members(pgid: int) -> list[int]:
    return group_members(pgid)


def wait_for_state(rundir: RunDir, state: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while read_status(rundir).get("state") != state:
        assert time.monotonic() < deadline, f"run never reached {state}: {read_status(rundir)}"
        time.sleep(0.02)
