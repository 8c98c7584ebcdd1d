"""The `ppodeck` console entry point: bare, the TUI at once; with arguments, the CLI.

Bare `ppodeck` used to import the typer CLI (app.cli: typer, click and every command's module)
before it opened the TUI, which never uses them: about 0.15 s of a 0.8 s first paint on two
cores. Anything with an argument (`--help`, `tui PRESET`, `run ...`) goes to app.cli.main
unchanged, so the CLI's behaviour and exit codes stay its own.
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    if len(sys.argv) > 1:
        from ..cli import main as cli_main

        cli_main()
        return
    open_tui()


def open_tui() -> None:
    """The preset picker; a one-line error and a crash log instead of a traceback."""
    # Start-up builds long-lived objects only (modules, classes, styles): the collector's passes
    # over them cost ~0.1 s of the first paint for nothing. The app turns it back on (and
    # freezes what start-up built) once the first screen is painted: PPODeckApp.startup_painted.
    gc.disable()
    try:
        from .app import run_tui

        code = run_tui()
    except KeyboardInterrupt:
        from ..cli.common import (  # typer: only once something failed
            EXIT_INTERRUPTED,
            err,
        )

        err("ppodeck: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        from ..cli.common import EXIT_INVALID, err
        from .errors import write_crash_log

        path = write_crash_log(exc)
        err(f"ppodeck: unexpected error: {type(exc).__name__}: {exc} (details in {path})")
        sys.exit(EXIT_INVALID)
    if code:
        sys.exit(code)  # an internal error: the app has said why and where its log is
