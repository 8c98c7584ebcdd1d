"""`python -m ppodeck.engine.driver --run-dir D`: the driver process (engine/driver/ppo.py)."""

from __future__ import annotations

import atexit
import os
import sys

_exit_code: list[int] = []


def _end_without_teardown() -> None:
    """Registered first, so it runs after every other exit handler (Ray's, the trackers'):
    the run's files are closed by then, and the interpreter's own teardown (Ray's core
    worker, torch) would keep the process alive for seconds that the CLI and the TUI wait
    out. docs/performance.md has the figure."""
    if _exit_code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_code[0])


atexit.register(_end_without_teardown)

from .ppo import main  # noqa: E402 - after the handler, so that it runs last

_exit_code.append(main())
sys.exit(_exit_code[0])
