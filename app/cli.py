"""ppodeck: the headless CLI (typer). Bare `ppodeck` opens the TUI.

Only typer and the pure engine layer are imported at module scope; the TUI, tomlkit and the
run commands (app/cli_runs.py) load when used. Data goes to stdout, diagnostics to stderr.
Exit codes: 0 ok, 1 invalid config, 2 usage.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli_common import EXIT_INVALID, EXIT_USAGE
from app.cli_common import err as _err
from app.cli_common import fail as _fail
from engine.config import Issue, RunConfig, check, parse_command_line, to_argv
from engine.config.argv import suggest
from engine.config.derived import PHASES, ROLES
from engine.config.model import coerce
from engine.config.schema import BY_NAME
from engine.presets import (
    Preset,
    PresetError,
    UnknownPresetError,
    config_to_toml,
    diff_configs,
    export_preset,
    import_preset,
    list_presets,
    load_preset,
    read_preset_file,
    resolve_preset,
    save_preset,
    user_preset_dir,
)

ENV_HELP = """\
\b
Environment:
  PPODECK_HOME         models and data for `prepare` (default ~/.cache/ppodeck)
  PPODECK_CONFIG_DIR   user config dir; presets live in its presets/ subdir
  PPODECK_PRESET_PATH  colon-separated team preset dirs (searched after built-ins and user)
  PPODECK_RUNS_DIR     where runs are created (default ./runs)
  PPODECK_LOG_DIR      where unexpected CLI errors are logged (default: user log dir)
"""

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
presets_app = typer.Typer(
    help="List, show, compare and share presets.",
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)
app.add_typer(presets_app, name="presets")

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="FLAG=VALUE",
                 help="Override a flag: kl-coef=0.1, --kl-coef=0.1, colocate, "
                      "no-offload-train, offload-train=false. Repeatable."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
MilesRootOption = Annotated[Path | None, typer.Option(
    "--miles-root", metavar="DIR",
    help="A miles checkout: model names are read from its scripts/models (as text, never run) "
         "before the built-in table.")]


# --- small helpers ---------------------------------------------------------------------------

def _load(name: str) -> Preset:
    try:
        return load_preset(name)
    except UnknownPresetError as exc:
        _fail(str(exc), EXIT_USAGE)
    except PresetError as exc:
        _fail(str(exc), EXIT_INVALID)


def _resolve(preset: Preset) -> RunConfig:
    try:
        return resolve_preset(preset)
    except PresetError as exc:
        _fail(str(exc), EXIT_INVALID)


def preset_config(name: str, sets: list[str] | None) -> tuple[RunConfig, Preset]:
    """A preset's resolved config with --set applied, and the preset: one reading for
    `validate`, `run` and `prepare` (an unknown preset exits 2, a broken one 1)."""
    preset = _load(name)
    return apply_sets(_resolve(preset), sets), preset


def _read_text(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{source}: cannot read the file ({exc}). Fix: check the path, or pass - to "
              "read stdin.", EXIT_USAGE)


def parse_set(item: str) -> dict[str, Any]:
    """One --set item -> {dest: value} (None = unset). typer.BadParameter on bad syntax."""
    text = item.strip()
    body = text[2:] if text.startswith("--") else text
    name, eq, raw = body.partition("=")
    name = name.strip().replace("_", "-")
    if not name:
        raise typer.BadParameter(f"{item!r}: expected FLAG=VALUE, e.g. kl-coef=0.1",
                                 param_hint="--set")
    flag = BY_NAME.get("--" + name)
    if flag is None:
        guess = suggest("--" + name)
        hint = f" Did you mean {guess[2:]}?" if guess else ""
        raise typer.BadParameter(f"unknown flag --{name}.{hint}", param_hint="--set")
    negative = "--" + name == flag.negative
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


def _script_path(source: str) -> Path | None:
    """A script given as a path: its `source`d files are read from next to it."""
    return None if source == "-" else Path(source).expanduser()


def build_config(preset: str | None, sets: list[str] | None,
                 from_command: str | None, miles_root: Path | None = None
                 ) -> tuple[RunConfig, list[Issue], str]:
    """Preset, then a pasted command line on top, then --set overrides."""
    issues: list[Issue] = []
    config = RunConfig()
    label = "(flags)"
    if preset:
        config = _resolve(_load(preset))
        label = preset
    if from_command:
        pasted, issues = parse_command_line(_read_text(from_command), env=os.environ,
                                            path=_script_path(from_command),
                                            miles_root=miles_root)
        config = RunConfig({**config.values, **pasted.values},
                           config.passthrough + pasted.passthrough)
        label = from_command if not preset else f"{preset} + {from_command}"
    return apply_sets(config, sets), issues, label


# --- output ----------------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def format_issue(issue: Issue) -> str:
    flags = f"  [{' '.join(issue.flags)}]" if issue.flags else ""
    lines = [f"{issue.level:<8}{issue.code}{flags}", f"        {issue.message}"]
    if issue.fix:
        lines.append(f"        fix: {issue.fix}")
    return "\n".join(lines)


def format_derived(derived: Any) -> str:
    d = derived
    lines = [
        "derived:",
        f"  world size {_fmt(d.world_size)} · DP {_fmt(d.dp_size)} · rollout GPUs "
        f"{_fmt(d.rollout_num_gpus)} · engines {_fmt(d.rollout_engines)} · GPUs needed "
        f"{_fmt(d.gpus_needed)}",
        f"  samples/rollout {_fmt(d.samples_per_rollout)} (trimmed {_fmt(d.samples_trimmed)})"
        f" · optimizer steps/rollout: actor {_fmt(d.actor_steps_per_rollout)}, critic "
        f"{_fmt(d.critic_steps_per_rollout)} · total train iters {_fmt(d.total_train_iters)}",
        f"  params {_fmt(d.params)}",
        "  memory GiB/GPU (rough)" + "".join(f"{role:>9}" for role in ROLES),
    ]
    for phase in PHASES:
        row = d.memory_gib.get(phase, {})
        lines.append(f"    {phase:<20}" + "".join(f"{_fmt(row.get(r)):>9}" for r in ROLES))
    return "\n".join(lines)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- top level -------------------------------------------------------------------------------

def _run_tui(preset: str | None) -> None:
    if importlib.util.find_spec("app.tui.app") is None:
        _fail("the TUI is not available in this installation (app/tui/app.py is missing). "
              "Fix: use the headless commands, see `ppodeck --help`.", EXIT_INVALID)
    from app.tui.app import run_tui

    if preset is None:
        run_tui()
    else:
        run_tui(preset=preset)


@app.callback()
def _root(ctx: typer.Context) -> None:
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


@app.command()
def validate(
    preset: Annotated[str | None, typer.Argument(
        metavar="PRESET", help="Preset name or .toml path.")] = None,
    sets: SetOption = None,
    from_command: Annotated[str | None, typer.Option(
        "--from-command", metavar="FILE|-",
        help="A pasted miles launch command (file, or - for stdin), applied on top of PRESET.",
    )] = None,
    as_json: JsonOption = False,
    miles_root: MilesRootOption = None,
) -> None:
    """Check a preset (plus overrides) against every rule and show the derived numbers.

    Exit codes: 0 no errors, 1 errors, 2 usage (unknown preset, bad --set syntax).

    Example:

    \b
        ppodeck validate qwen3-4b-ppo
        ppodeck validate tiny-cpu --set kl-coef=0.1 --json
        ppodeck validate --from-command run-qwen3-4b-ppo.sh
    """
    if preset is None and from_command is None:
        _fail("nothing to validate. Fix: pass a PRESET or --from-command FILE.", EXIT_USAGE)
    config, parse_issues, label = build_config(preset, sets, from_command, miles_root)
    report = check(config)
    issues = [*parse_issues, *report.issues]
    ok = not any(i.level == "error" for i in issues)
    if as_json:
        typer.echo(json.dumps({"ok": ok, "issues": [i.as_dict() for i in issues],
                               "derived": report.derived.as_dict()}, indent=2))
    else:
        counts = [sum(i.level == lvl for i in issues) for lvl in ("error", "warning", "info")]
        typer.echo(f"{label}: {'OK' if ok else 'INVALID'} ({_count(counts[0], 'error')}, "
                   f"{_count(counts[1], 'warning')}, {_count(counts[2], 'info')})")
        order = {"error": 0, "warning": 1, "info": 2}
        for issue in sorted(issues, key=lambda i: order[i.level]):
            typer.echo(format_issue(issue))
        typer.echo(format_derived(report.derived))
    raise typer.Exit(0 if ok else EXIT_INVALID)


@app.command()
def command(
    preset: Annotated[str, typer.Argument(metavar="PRESET", help="Preset name or .toml path.")],
    sets: SetOption = None,
    show_secrets: Annotated[bool, typer.Option(
        "--show-secrets", help="Print secret values (e.g. --wandb-key) instead of ********.")
    ] = False,
    raw_paths: Annotated[bool, typer.Option(
        "--raw-paths", help="Keep ${PPODECK_HOME} and ~ in paths instead of expanding them.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Print the exact miles-style argv of a preset (for `python3 train.py ...`).

    Diagnostics go to stderr; the exit code is 1 when the config has errors.

    Example:

    \b
        ppodeck command qwen3-4b-ppo
        ppodeck command qwen3-4b-ppo --set num-rollout=3 --json
    """
    config, _, _ = build_config(preset, sets, None)
    argv = to_argv(config, show_secrets=show_secrets, expand_paths=not raw_paths)
    typer.echo(json.dumps(argv) if as_json else shlex.join(argv))
    report = check(config)
    if report.config_errors:
        _err(f"ppodeck: {preset} has {_count(len(report.config_errors), 'error')}; see "
             f"`ppodeck validate {preset}`.")
        raise typer.Exit(EXIT_INVALID)
    if report.errors:  # engine.* only: the command is still right for miles itself
        _err(f"ppodeck: PPO Deck's engine cannot run {preset} as it is "
             f"({', '.join(sorted({i.code for i in report.errors}))}); the command above is "
             f"for miles. See `ppodeck validate {preset}`.")


@app.command()
def flags(
    search: Annotated[str | None, typer.Argument(
        metavar="[SEARCH]", help="Only flags whose name, group, help or engine class contain "
        "this text.")] = None,
    as_json: JsonOption = False,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the README's flags-by-class tables.")] = False,
) -> None:
    """Every flag: type, default, group, help, and how PPO Deck's engine treats it.

    The engine class is honoured (the engine acts on it), refused (an error unless left at its
    default, with the reason and what runs instead) or command-only (kept in the miles command,
    ignored by this engine: a warning).

    Example:

    \b
        ppodeck flags
        ppodeck flags refused
        ppodeck flags --json kl
    """
    from engine.config import reference

    if markdown:
        typer.echo(reference.markdown_table())
        return
    if as_json:
        typer.echo(json.dumps({"flags": reference.flag_rows(search)}, indent=2))
        return
    lines = reference.text_lines(search)
    if not lines:
        _fail(f"no flag matches {search!r}. Fix: try a shorter search, or `ppodeck flags`.",
              EXIT_USAGE)
    typer.echo("\n".join(lines))


# --- presets ---------------------------------------------------------------------------------

def _preset_json(preset: Preset) -> dict[str, Any]:
    from engine.config.schema import BY_DEST

    return {
        "name": preset.name, "source": preset.source, "path": str(preset.path),
        "description": preset.description, "extends": preset.extends,
        "shadows": [str(p) for p in preset.shadows], "error": preset.error,
        "provenance": dict(preset.provenance),
        "flags": {BY_DEST[d].name[2:]: list(v) if isinstance(v, tuple) else v
                  for d, v in preset.flags.items() if not BY_DEST[d].secret},
        "passthrough": list(preset.passthrough),
    }


@presets_app.command("ls")
def presets_ls(as_json: JsonOption = False) -> None:
    """List presets on the search path; when a name is shadowed, show which file wins.

    Search order (first match wins): built-ins, user dir, $PPODECK_PRESET_PATH dirs.

    Example:

    \b
        ppodeck presets ls
        ppodeck presets ls --json
    """
    presets = list_presets()
    if as_json:
        typer.echo(json.dumps([_preset_json(p) for p in presets], indent=2))
        return
    width = max((len(p.name) for p in presets), default=4)
    for p in presets:
        text = p.description if p.error is None else f"(invalid: {p.error.splitlines()[0]})"
        typer.echo(f"{p.name:<{width}}  {p.source:<8}  {text}")
        for shadowed in p.shadows:
            typer.echo(f"{'':<{width}}  {'':<8}  wins over {shadowed}")


@presets_app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(metavar="PRESET", help="Preset name or .toml path.")],
    resolved: Annotated[bool, typer.Option(
        "--resolved", help="Show the flags with extends applied instead of the file.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Print a preset file (or its resolved flags).

    Example:

    \b
        ppodeck presets show qwen3-4b-ppo
        ppodeck presets show qwen3-4b-ppo-ci --resolved
    """
    preset = _load(name)
    if as_json:
        data = _preset_json(preset)
        if resolved:
            data["resolved"] = {k[2:]: v for k, v in _named_values(_resolve(preset)).items()}
        typer.echo(json.dumps(data, indent=2))
    elif resolved:
        typer.echo(_export(preset, keep_extends=False), nl=False)
    else:
        typer.echo(preset.path.read_text(encoding="utf-8"), nl=False)


def _named_values(config: RunConfig) -> dict[str, Any]:
    from engine.config.schema import BY_DEST

    return {BY_DEST[d].name: list(v) if isinstance(v, tuple) else v
            for d, v in config.values.items() if not BY_DEST[d].secret}


def _export(preset: Preset, keep_extends: bool) -> str:
    try:
        return export_preset(preset, keep_extends=keep_extends)
    except PresetError as exc:
        _fail(str(exc), EXIT_INVALID)


@presets_app.command("diff")
def presets_diff(
    a: Annotated[str, typer.Argument(help="First preset.")],
    b: Annotated[str, typer.Argument(help="Second preset.")],
    as_json: JsonOption = False,
) -> None:
    """Compare the resolved values of two presets (extends applied, defaults filled in).

    Example:

    \b
        ppodeck presets diff qwen3-4b-ppo qwen3-4b-ppo-ci
    """
    changes = diff_configs(_resolve(_load(a)), _resolve(_load(b)))
    if as_json:
        typer.echo(json.dumps([{"flag": c.flag, "a": _jsonable(c.a), "b": _jsonable(c.b)}
                               for c in changes], indent=2))
        return
    if not changes:
        typer.echo(f"{a} and {b} resolve to the same flags.")
    for c in changes:
        typer.echo(f"{c.flag}: {_fmt_value(c.a)} -> {_fmt_value(c.b)}")


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _fmt_value(value: Any) -> str:
    return "(unset)" if value is None else repr(_jsonable(value))


def _write_new(path: Path, text: str, force: bool) -> None:
    if path.exists() and not force:
        _fail(f"{path} already exists. Fix: pass --force to overwrite it.", EXIT_USAGE)
    try:
        save_preset(path, text)
    except OSError as exc:
        _fail(f"{path}: cannot write ({exc}). Fix: check the directory permissions.",
              EXIT_USAGE)


@presets_app.command("export")
def presets_export(
    name: Annotated[str, typer.Argument(metavar="PRESET", help="Preset name or .toml path.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to FILE instead of stdout.")] = None,
    keep_extends: Annotated[bool, typer.Option(
        "--keep-extends", help="Keep `extends` instead of resolving it into the file.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE.")] = False,
) -> None:
    """Write a standalone preset file to share (extends resolved unless --keep-extends).

    Example:

    \b
        ppodeck presets export qwen3-4b-ppo-ci -o ci.toml
    """
    text = _export(_load(name), keep_extends)
    if output is None:
        typer.echo(text, nl=False)
        return
    _write_new(output, text, force)
    _err(f"wrote {output}")


@presets_app.command("import")
def presets_import(
    file: Annotated[Path, typer.Argument(help="Preset file to import.")],
    name: Annotated[str | None, typer.Option("--name", help="Import under this name.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite a preset of the same name / import despite errors.")
    ] = False,
) -> None:
    """Validate a preset file and copy it into your user presets dir.

    Shows the diff against an existing preset of that name and refuses to overwrite it (or
    to import a file with validation errors) without --force.

    Example:

    \b
        ppodeck presets import ~/Downloads/team-ppo.toml
        ppodeck presets import team-ppo.toml --name my-ppo --force
    """
    try:
        incoming = read_preset_file(file, "file")
        report = check(resolve_preset(incoming))
    except PresetError as exc:
        _fail(str(exc), EXIT_INVALID)
    for issue in report.errors + report.warnings:
        _err(format_issue(issue))
    if report.config_errors and not force:  # engine.* errors: it may run on another machine
        _fail(f"{file} has {_count(len(report.config_errors), 'error')}. Fix: correct them, or "
              "pass --force to import anyway.", EXIT_INVALID)
    try:
        target, changes = import_preset(file, name=name, force=force)
    except PresetError as exc:
        _fail(str(exc), EXIT_INVALID)
    for c in changes:
        _err(f"  {c.flag}: {_fmt_value(c.a)} -> {_fmt_value(c.b)}")
    typer.echo(str(target))


@presets_app.command("new")
def presets_new(
    name: Annotated[str, typer.Argument(help="Name of the new preset.")],
    base: Annotated[str | None, typer.Option(
        "--from", help="Extend this preset (stored as `extends`).")] = None,
    sets: SetOption = None,
    description: Annotated[str, typer.Option("--description", "-d")] = "",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Create a preset in your user presets dir, optionally extending another.

    Example:

    \b
        ppodeck presets new my-ppo --from qwen3-4b-ppo --set num-rollout=50
    """
    if base is not None:
        _resolve(_load(base))  # fail early on a broken parent
    config = apply_sets(RunConfig(), sets)
    _refuse_bad_values(config)
    header = f"{name}: {description or 'my preset'}\n\nLaunch: ppodeck run {name}"
    text = config_to_toml(config, name=name, description=description, header_comment=header,
                          extends=base)
    path = user_preset_dir() / f"{name}.toml"
    _write_new(path, text, force)
    typer.echo(str(path))


def _refuse_bad_values(config: RunConfig) -> None:
    """A preset file must load again: values of the wrong type are refused, not written.
    (A preset may be partial, so only the value errors count here, not missing flags.)"""
    bad = [i for i in check(config).issues if i.code == "value.bad_type"]
    if bad:
        for issue in bad:
            typer.echo(format_issue(issue), err=True)
        raise typer.Exit(EXIT_INVALID)


def annotate_flags(text: str, report: Any) -> str:
    """Each flag of a preset written from a script gets the script's file and line."""
    from engine.presets import with_flag_comments

    return with_flag_comments(text, report.flag_comment)


@presets_app.command("from-command")
def presets_from_command(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="Command text, - for stdin.")],
    name: Annotated[str, typer.Option("--name", help="Preset name.")] = "imported",
    save: Annotated[bool, typer.Option(
        "--save", help="Save into the user presets dir instead of printing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    miles_root: MilesRootOption = None,
) -> None:
    """Turn a miles launch script or pasted command line into a preset (printed, or saved
    with --save).

    The script is read as bash reads it, and nothing in it runs: `python3 train.py ...`,
    `ray job submit ... -- python3 train.py ...`, arrays, ${VARS}, `read -ra`, multi-line
    quoted JSON, `source` of files next to the script, and miles' model args by name
    (`model_args_utils.py qwen3-4B`, `source scripts/models/qwen3-4B.sh`). The import report on
    stderr says what was resolved and from where, what stayed unresolved (with its line), and
    which flags are command-only or refused; each flag in the preset keeps its script line.

    Example:

    \b
        ppodeck presets from-command run-qwen3-4b-ppo.sh --name my-ppo --save
        ppodeck presets from-command run-glm5.sh --miles-root ~/miles
        pbpaste | ppodeck presets from-command - > my-ppo.toml
    """
    from engine.config.script_import import import_script

    imported = import_script(_read_text(source), env=os.environ, path=_script_path(source),
                             miles_root=miles_root)
    config, issues = imported.config, imported.issues
    for issue in issues:
        _err(format_issue(issue))
    for line in imported.lines():
        _err(line)
    header = (f"{name}: imported from a miles command line ({source}).\n\n"
              f"Launch: ppodeck run {name}")
    unresolved = [i.flags[0] for i in issues if i.code == "command.unresolved_variable"]
    if unresolved:
        header += ("\n\nFIX BEFORE USE: unresolved variables kept verbatim: "
                   + ", ".join(unresolved))
        _err(f"ppodeck: edit the preset: {', '.join(unresolved)} are kept verbatim and a "
             "number flag holding one will not load until it is replaced by a value.")
    text = annotate_flags(config_to_toml(config, name=name,
                                         description=f"Imported from {source}",
                                         header_comment=header), imported)
    if not save:
        typer.echo(text, nl=False)
        return
    path = user_preset_dir() / f"{name}.toml"
    _write_new(path, text, force)
    typer.echo(str(path))


# --- entry point -----------------------------------------------------------------------------

def _crash_log_path() -> Path:
    override = os.environ.get("PPODECK_LOG_DIR")
    if override:
        return Path(override).expanduser() / "cli-errors.log"
    import platformdirs

    return Path(platformdirs.user_log_dir("ppodeck")) / "cli-errors.log"


def _log_crash(exc: BaseException) -> Path:
    import tempfile
    import time

    text = (f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} ppodeck {' '.join(sys.argv[1:])}\n"
            + "".join(traceback.format_exception(exc)))
    for path in (_crash_log_path(), Path(tempfile.gettempdir()) / "ppodeck-cli-errors.log"):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(text)
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
        _err("ppodeck: interrupted")
        sys.exit(130)
    except Exception as exc:
        path = _log_crash(exc)
        _err(f"ppodeck: unexpected error: {type(exc).__name__}: {exc} (details in {path})")
        sys.exit(EXIT_INVALID)


if importlib.util.find_spec("app.cli_runs") is not None:
    from app import cli_runs

    cli_runs.register(app)
if importlib.util.find_spec("app.cli_health") is not None:
    from app import cli_health

    cli_health.register(app)
if importlib.util.find_spec("app.cli_prepare") is not None:
    from app import cli_prepare

    cli_prepare.register(app)
