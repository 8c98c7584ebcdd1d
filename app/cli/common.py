"""What every ppodeck command shares: exit codes, how a message reaches the user, the `--set`
option and how a preset and its overrides are read.

Exit codes (docs/usage.md): 0 ok, 1 invalid config (and a failed `prepare`), 2 usage, 3 run failed,
4 an error-level health rule fired, 130 interrupted. Data goes to stdout, diagnostics to stderr.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ...engine.config import Issue, RunConfig
from ...engine.config.argv import suggest
from ...engine.config.model import coerce
from ...engine.config.schema import BY_NAME
from ...engine.presets import (
    Preset,
    PresetError,
    UnknownPresetError,
    load_preset,
    resolve_preset,
)

if TYPE_CHECKING:
    from ...engine.run.rundir import RunDir

EXIT_INVALID, EXIT_USAGE, EXIT_FAILED, EXIT_UNHEALTHY, EXIT_INTERRUPTED = 1, 2, 3, 4, 130

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="FLAG=VALUE",
                 help="Override a flag: eps-clip=0.25, --eps-clip=0.25, colocate, "
                      "no-offload-train, offload-train=false; FLAG= (nothing after =) "
                      "unsets it. Repeatable."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
MilesRootOption = Annotated[Path | None, typer.Option(
    "--miles-root", metavar="DIR",
    help="A miles checkout: model names are read from its scripts/models (as text, never run) "
         "before the built-in table.")]
MilesPythonOption = Annotated[str | None, typer.Option(
    "--miles-python", metavar="PATH",
    help="The Python miles runs in, for its own parser's verdict before a miles launch "
         "(default: $PPODECK_MILES_PYTHON, else python3).")]
MilesParserTimeoutOption = Annotated[float | None, typer.Option(
    "--miles-parser-timeout", metavar="S",
    help="Seconds --miles-root's own parse_args() may take (default: "
         "$PPODECK_MILES_PARSER_TIMEOUT, else 60); 0 skips it and says so.")]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id, unique id prefix, or path.")]
LauncherArgsOption = Annotated[str | None, typer.Option(
    "--launcher-args", metavar="ARGS",
    help="A miles Python launcher's own options, as you would pass them to it, e.g. "
         "\"--model-name Qwen3-0.6B --mode debug_minimal\" (read, never run).")]


RunLauncherOption = Annotated[bool, typer.Option(
    "--run-launcher", help="If reading a Python launcher statically is not enough: run it, "
    "with miles' helpers replaced by recorders (nothing downloaded, converted or launched by "
    "them; the launcher's own code does run). Needs --trust or an interactive yes.")]
TrustLauncherOption = Annotated[bool, typer.Option(
    "--trust", help="Allow --run-launcher to run the launcher's code without asking.")]


def import_command_or_fail(source: str, *, miles_root: Path | None, launcher: str | None,
                           run: bool = False, trust: bool = False) -> Any:
    """A script, command line or Python launcher -> its ImportReport; a usage error with the
    reason when the launcher args do not fit, or when running was refused or failed."""
    import os

    from ...engine.miles.py_launcher import LauncherError, is_python_launcher
    from ...engine.miles.script_import import import_script

    text, path, overrides = read_text(source), script_path(source), launcher_args(launcher)
    if run:
        if path is None or not is_python_launcher(text, path):
            fail("--run-launcher runs a miles Python launcher given as a file. Fix: pass the "
                 "launcher's path, or drop --run-launcher.", EXIT_USAGE)
        return _run_launcher_or_fail(path, overrides, miles_root, trust)
    try:
        return import_script(text, env=os.environ, path=path, miles_root=miles_root,
                             overrides=overrides)
    except LauncherError as exc:
        fail(f"{source}: {exc}", EXIT_USAGE)


def _run_launcher_or_fail(path: Path, overrides: list[str] | None, miles_root: Path | None,
                          trust: bool) -> Any:
    """The same consent rule as code named in presets: --trust, or an interactive yes."""
    import os

    from ...engine.miles.launcher_import import import_recorded
    from ...engine.miles.launcher_recorder import RecorderError, run_launcher

    err(f"--run-launcher would run {path} (its own code, in a subprocess; miles' helpers are "
        "replaced by recorders, so they download, convert and launch nothing).")
    if not trust:
        if not sys.stdin.isatty():
            fail("refusing to run a launcher without explicit consent; review it, then add "
                 "--trust.", EXIT_USAGE)
        if not typer.confirm("Run this launcher?", default=False, err=True):
            fail("not run: the launcher was not allowed.", EXIT_USAGE)
    try:
        record = run_launcher(path, overrides, env=os.environ, miles_root=miles_root)
    except RecorderError as exc:
        fail(f"{exc}. Fix: check the launcher args, or pass --miles-root for the miles "
             "modules it imports.", EXIT_INVALID)
    return import_recorded(record, path.name, env=os.environ, miles_root=miles_root,
                           overrides=overrides)


def own_parser_issues_or_fail(config: RunConfig, miles_root: Path, python: str | None,
                              timeout_s: float | None) -> list[Issue]:
    """The --miles-root checkout's own parser on the config's miles argv
    (engine/miles/parser_gate.py), said on stderr while it runs; a bad timeout is a usage
    error."""
    from ...engine.miles.parser_gate import GateSetupError, gate_setup, judge, verdict_issues

    try:
        setup = gate_setup(miles_root, python, timeout_s)
    except GateSetupError as exc:
        fail(str(exc), EXIT_USAGE)
    if setup.timeout_s > 0:
        err(f"miles' parser: checking… ({setup.root}, {setup.python}, at most "
            f"{setup.timeout_s:g} s)")
    return verdict_issues(judge(config, setup), setup)


def launcher_args(text: str | None) -> list[str] | None:
    """--launcher-args split as a shell splits it; a usage error when the quotes do not close."""
    if not text:
        return None
    import shlex

    try:
        return shlex.split(text)
    except ValueError as exc:
        fail(f"--launcher-args {text!r}: {exc}. Fix: close the quotes.", EXIT_USAGE)


def err(message: str) -> None:
    typer.echo(message, err=True)


def fail(message: str, code: int) -> NoReturn:
    err(f"ppodeck: {message}")
    raise typer.Exit(code)


def find_run_or_fail(run_name: str) -> RunDir:
    """A run by id, unique id prefix or path; a usage error naming the candidates if not.

    A miles --dump-details directory is a run too: it is watched (read-only) through a run
    directory of PPO Deck's own (engine/miles/watch.py), registered on first use and synced.
    """
    from ...engine.run.rundir import RunNotFound, find_run

    try:
        rundir = find_run(run_name)
    except RunNotFound as exc:
        return _miles_dump_or_fail(run_name, str(exc))
    _watch_if_miles(rundir)
    return rundir


def _miles_dump_or_fail(run_name: str, not_found: str) -> RunDir:
    from ...engine.miles.watch import MilesDumpError, is_miles_dump, open_dump

    path = Path(run_name).expanduser()
    if not is_miles_dump(path):
        fail(not_found, EXIT_USAGE)
    try:
        rundir, new = open_dump(path)
    except (MilesDumpError, OSError) as exc:
        fail(f"cannot watch the miles dump {path}: {exc}", EXIT_USAGE)
    if new:
        err(f"miles dump {path} is watched as run {rundir.id} (read-only; PPO Deck's files "
            f"about it are in {rundir.path})")
    return rundir


def _watch_if_miles(rundir: RunDir) -> None:
    from ...engine.miles.watch import dump_of, watch

    if dump_of(rundir) is None:
        return
    try:
        watch(rundir)
    except OSError as exc:
        err(f"warning: run {rundir.id}: its miles dump {dump_of(rundir)} could not be read "
            f"({exc}); showing what was read before")


# --- presets and --set ------------------------------------------------------------------------

def load_or_fail(name: str) -> Preset:
    try:
        return load_preset(name)
    except UnknownPresetError as exc:
        fail(str(exc), EXIT_USAGE)
    except PresetError as exc:
        fail(str(exc), EXIT_INVALID)


def resolve_or_fail(preset: Preset) -> RunConfig:
    try:
        return resolve_preset(preset)
    except PresetError as exc:
        fail(str(exc), EXIT_INVALID)


def preset_config(name: str, sets: list[str] | None) -> tuple[RunConfig, Preset]:
    """A preset's resolved config with --set applied, and the preset: one reading for
    `validate`, `run` and `prepare` (an unknown preset exits 2, a broken one 1)."""
    preset = load_or_fail(name)
    return apply_sets(resolve_or_fail(preset), sets), preset


def engine_issues(preset: str | None, engine: str, config: RunConfig) -> list[Issue]:
    """preset.engines: an error when the preset says it does not run on `engine`."""
    from ...engine.presets import engine_refusal

    if preset is None:
        return []
    try:
        refusal = engine_refusal(load_or_fail(preset), engine, config)
    except PresetError as exc:  # a broken extends chain: resolving it already said so
        fail(str(exc), EXIT_INVALID)
    return [refusal] if refusal is not None else []


def parse_set(item: str) -> dict[str, Any]:
    """One --set item -> {dest: value} (None = unset). typer.BadParameter on bad syntax."""
    text = item.strip()
    body = text[2:] if text.startswith("--") else text
    name, eq, raw = body.partition("=")
    name = name.strip().replace("_", "-")
    if not name:
        raise typer.BadParameter(f"{item!r}: expected FLAG=VALUE, e.g. eps-clip=0.25",
                                 param_hint="--set")
    flag = BY_NAME.get("--" + name)
    if flag is None:
        guess = suggest("--" + name)
        hint = f" Did you mean {guess[2:]}?" if guess else ""
        raise typer.BadParameter(f"unknown flag --{name}.{hint}", param_hint="--set")
    negative = "--" + name == flag.negative
    if eq and not raw.strip():
        return {flag.dest: None}  # `--set FLAG=`: unset, as clearing the field in the editor
    if flag.kind in ("bool", "tristate"):
        value = True
        if eq:
            try:
                value = coerce(flag, raw)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--set") from None
        value = value != negative
        if flag.kind == "bool" and value is False:
            return {flag.dest: None}
        return {flag.dest: value}
    if not eq:
        raise typer.BadParameter(f"--{name} expects a value: --set {name}=VALUE",
                                 param_hint="--set")
    if flag.kind == "list":
        return {flag.dest: tuple(raw.replace(",", " ").split()) or None}
    try:
        return {flag.dest: coerce(flag, raw)}
    except ValueError:
        return {flag.dest: raw}  # kept as text: check() reports it as an error naming the flag


def apply_sets(config: RunConfig, sets: list[str] | None) -> RunConfig:
    for item in sets or ():
        config = config.with_values(**parse_set(item))
    return config


# --- input and output -------------------------------------------------------------------------

def read_text(source: str) -> str:
    """A file's text, or stdin for `-`; a usage error naming the file if it cannot be read."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{source}: cannot read the file ({exc}). Fix: check the path, or pass - to "
             "read stdin.", EXIT_USAGE)


def script_path(source: str) -> Path | None:
    """A script given as a path: its `source`d files are read from next to it."""
    return None if source == "-" else Path(source).expanduser()


def format_issue(issue: Issue) -> str:
    flags = f"  [{' '.join(issue.flags)}]" if issue.flags else ""
    lines = [f"{issue.level:<8}{issue.code}{flags}", f"        {issue.message}"]
    if issue.fix:
        lines.append(f"        fix: {issue.fix}")
    return "\n".join(lines)


def count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ------------------------------------------------------------------------- run lookup helpers


def revive_follower_of(rundir: RunDir) -> None:
    """A submitted run mirrors its Ray job through a local follower; restart it if it died."""
    from ...engine.launch.jobs import JobError, revive_follower

    try:
        if revive_follower(rundir):
            err(f"run {rundir.id} is a Ray job whose local follower had stopped; "
                 "following it again (the whole job log is read first)")
    except (JobError, OSError) as exc:
        err(f"run {rundir.id}: could not follow its Ray job again: {exc}")


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1)
    return f"; did you mean {close[0]}?" if close else ""
