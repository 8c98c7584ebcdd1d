"""ppodeck: the root of the headless CLI (typer). Bare `ppodeck` opens the TUI.

The app, its own commands (the TUI) and the entry point; each noun's commands come from its
module below (config, presets, runs, health, prepare, samples), which never imports this
one. Only typer and the pure engine layer load at import; the TUI, tomlkit and the run
machinery load when used. Data goes to stdout, diagnostics to stderr. Exit codes: app/cli/common.py.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from ...engine.env_vars import cli_help
from . import canary, config, health, prepare, presets, runs, samples
from .common import EXIT_INVALID, err, fail

ENV_HELP = cli_help()

app = typer.Typer(
    name="ppodeck",
    help="PPO Deck: build, check and launch actor-critic PPO runs (miles flags). "
         "Run without a command to open the TUI.",
    epilog=ENV_HELP,
    invoke_without_command=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _run_tui(preset: str | None) -> None:
    try:
        from ..tui.app import run_tui
    except ImportError as exc:
        fail(f"the TUI is not available in this installation ({exc}). Fix: use the headless "
             "commands, see `ppodeck --help`.", EXIT_INVALID)
    code = run_tui() if preset is None else run_tui(preset=preset)
    if code:  # an internal error: the app has printed why and where its crash log is
        raise typer.Exit(code)


def _print_version(value: bool) -> None:
    if value:
        from ..version import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context, version: Annotated[bool, typer.Option(
        "--version", help="Print the version and the commit it was built from.",
        callback=_print_version, is_eager=True)] = False) -> None:
    if ctx.invoked_subcommand is None:
        _run_tui(None)


@app.command()
def tui(preset: Annotated[str | None, typer.Argument(
        metavar="PRESET", help="Preset to open.")] = None) -> None:
    """Open the TUI (the same as bare `ppodeck`), optionally on a preset.

    Example:

    \b
        ppodeck tui
        ppodeck tui tiny-cpu
    """
    _run_tui(preset)


def _crash_log_path() -> Path:
    override = os.environ.get("PPODECK_LOG_DIR")
    if override:
        return Path(override).expanduser() / "cli-errors.log"
    import platformdirs

    return Path(platformdirs.user_log_dir("ppodeck")) / "cli-errors.log"


def _log_crash(exc: BaseException) -> Path:
    """Append the traceback to a log only this user can read, with secret values masked."""
    import tempfile
    import time

    from ...engine.host.files import append_private
    from ...engine.run.secrets import redact_argv, scrub_secrets

    argv = sys.argv[1:]
    text = (f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} ppodeck {' '.join(redact_argv(argv))}\n"
            + scrub_secrets("".join(traceback.format_exception(exc)), argv))
    shared_tmp = Path(tempfile.gettempdir()) / f"ppodeck-cli-errors-{os.getuid()}.log"
    for path in (_crash_log_path(), shared_tmp):
        try:
            append_private(path, text)
            return path
        except OSError:
            continue
    return Path("(unwritable)")


def main() -> None:
    """Console entry point: a one-line error instead of a traceback for anything unexpected."""
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        err("ppodeck: interrupted")
        sys.exit(130)
    except Exception as exc:
        path = _log_crash(exc)
        err(f"ppodeck: unexpected error: {type(exc).__name__}: {exc} (details in {path})")
        sys.exit(EXIT_INVALID)


for _noun in (config, presets, runs, health, prepare, samples, canary):  # each adds its commands
    _noun.register(app)
