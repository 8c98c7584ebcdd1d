"""What every ppodeck command shares: the exit codes and how a message reaches the user.

Exit codes (README): 0 ok, 1 invalid config (and a failed `prepare`), 2 usage, 3 run failed,
4 an error-level health rule fired, 130 interrupted. Data goes to stdout, diagnostics to stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from engine.rundir import RunDir

EXIT_INVALID, EXIT_USAGE, EXIT_FAILED, EXIT_UNHEALTHY, EXIT_INTERRUPTED = 1, 2, 3, 4, 130


def err(message: str) -> None:
    typer.echo(message, err=True)


def fail(message: str, code: int) -> NoReturn:
    err(f"ppodeck: {message}")
    raise typer.Exit(code)


def find_run_or_fail(run_name: str) -> RunDir:
    """A run by id, unique id prefix or path; a usage error naming the candidates if not."""
    from engine.rundir import RunNotFound, find_run

    try:
        return find_run(run_name)
    except RunNotFound as exc:
        fail(str(exc), EXIT_USAGE)
