"""`ppodeck presets ...`: list, show, compare, share and create presets, and import a miles
launch script as one.

Exit codes: 0 ok, 1 invalid preset, 2 usage (unknown preset, existing file without --force).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ...engine.config import RunConfig, check
from ...engine.presets import (
    Preset,
    PresetError,
    config_to_toml,
    diff_configs,
    export_preset,
    import_preset,
    list_presets,
    read_preset_file,
    resolve_preset,
    save_preset,
    user_preset_dir,
)
from .common import (
    EXIT_INVALID,
    EXIT_USAGE,
    JsonOption,
    LauncherArgsOption,
    MilesRootOption,
    RunLauncherOption,
    SetOption,
    TrustLauncherOption,
    apply_sets,
    count,
    fail,
    format_issue,
    import_command_or_fail,
    load_or_fail,
    resolve_or_fail,
)
from .common import err as _err

presets_app = typer.Typer(
    help="List, show, compare and share presets.",
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the `presets` group to the ppodeck app."""
    app.add_typer(presets_app, name="presets")


def _preset_json(preset: Preset) -> dict[str, Any]:
    from ...engine.config.schema import BY_DEST

    return {
        "name": preset.name, "source": preset.source, "path": str(preset.path),
        "description": preset.description, "extends": preset.extends,
        "shadows": [str(p) for p in preset.shadows], "error": preset.error,
        "errors": preset.error.splitlines() if preset.error else [], "clash": preset.clash,
        "provenance": dict(preset.provenance),
        "flags": {BY_DEST[d].name[2:]: list(v) if isinstance(v, tuple) else v
                  for d, v in preset.flags.items() if not BY_DEST[d].secret},
        "passthrough": list(preset.passthrough),
        "engines": list(_runs_on(preset)),
    }


def _runs_on(preset: Preset) -> tuple[str, ...]:
    """The engines it runs on (`engines`, resolved along extends); none for a broken file."""
    from ...engine.presets import PresetError, preset_engines

    if preset.error:
        return ()
    try:
        return preset_engines(preset)
    except PresetError:
        return ()


@presets_app.command("ls")
def presets_ls(as_json: JsonOption = False) -> None:
    """List presets on the search path; when a name is shadowed, show which file wins.

    Search order (first match wins): built-ins, user dir, $PPODECK_PRESET_PATH dirs. A file
    that does not load is listed with every error it has; a file whose `name` is another
    file's name is marked with which file that name opens.

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
    engines = {p.path: ",".join(_runs_on(p)) or "-" for p in presets}
    runs_width = max((len(e) for e in engines.values()), default=7)
    indent = " " * (width + 12 + runs_width + 2)
    typer.echo(f"{'name':<{width}}  {'source':<8}  {'engines':<{runs_width}}  description")
    for p in presets:
        errors = p.error.splitlines() if p.error else []
        text = p.description if not errors else f"(invalid: {len(errors)} error(s), below)"
        typer.echo(f"{p.name:<{width}}  {p.source:<8}  {engines[p.path]:<{runs_width}}  {text}")
        for shadowed in p.shadows:
            typer.echo(f"{indent}wins over {shadowed}")
        if p.clash:
            typer.echo(f"{indent}name clash: {p.clash}")
        for error in errors:
            typer.echo(f"{indent}✖ {error}")


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
    preset = load_or_fail(name)
    if as_json:
        data = _preset_json(preset)
        if resolved:
            data["resolved"] = {k[2:]: v for k, v in _named_values(resolve_or_fail(preset)).items()}
        typer.echo(json.dumps(data, indent=2))
    elif resolved:
        typer.echo(_export(preset, keep_extends=False), nl=False)
    else:
        typer.echo(preset.path.read_text(encoding="utf-8"), nl=False)


def _named_values(config: RunConfig) -> dict[str, Any]:
    from ...engine.config.schema import BY_DEST

    return {BY_DEST[d].name: list(v) if isinstance(v, tuple) else v
            for d, v in config.values.items() if not BY_DEST[d].secret}


def _export(preset: Preset, keep_extends: bool) -> str:
    try:
        return export_preset(preset, keep_extends=keep_extends)
    except PresetError as exc:
        fail(str(exc), EXIT_INVALID)


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
    changes = diff_configs(resolve_or_fail(load_or_fail(a)), resolve_or_fail(load_or_fail(b)))
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
        fail(f"{path} already exists. Fix: pass --force to overwrite it.", EXIT_USAGE)
    try:
        save_preset(path, text)
    except OSError as exc:
        fail(f"{path}: cannot write ({exc}). Fix: check the directory permissions.",
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
    text = _export(load_or_fail(name), keep_extends)
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
        fail(str(exc), EXIT_INVALID)
    for issue in report.errors + report.warnings:
        _err(format_issue(issue))
    if report.config_errors and not force:  # engine.* errors: it may run on another machine
        fail(f"{file} has {count(len(report.config_errors), 'error')}. Fix: correct them, or "
              "pass --force to import anyway.", EXIT_INVALID)
    try:
        target, changes = import_preset(file, name=name, force=force)
    except PresetError as exc:
        fail(str(exc), EXIT_INVALID)
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

    The file is written even when the resulting config does not validate (a preset may be a
    start to edit further); its errors are then listed on stderr.

    Example:

    \b
        ppodeck presets new my-ppo --from qwen3-4b-ppo --set num-rollout=50
    """
    if base is not None:
        resolve_or_fail(load_or_fail(base))  # fail early on a broken parent
    config = apply_sets(RunConfig(), sets)
    _refuse_bad_values(config)
    header = f"{name}: {description or 'my preset'}\n\nLaunch: ppodeck run {name}"
    text = config_to_toml(config, name=name, description=description, header_comment=header,
                          extends=base)
    path = user_preset_dir() / f"{name}.toml"
    _write_new(path, text, force)
    typer.echo(str(path))
    _say_if_invalid(name, apply_sets(resolve_or_fail(load_or_fail(str(path))), None))


def _say_if_invalid(name: str, config: RunConfig) -> None:
    errors = check(config).errors
    if errors:
        _err(f"{name}: written, but INVALID as it stands ({count(len(errors), 'error')}):")
        for issue in errors:
            _err(format_issue(issue))
        _err(f"Fix: edit the file, then `ppodeck validate {name}`.")


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
    from ...engine.presets import with_flag_comments

    return with_flag_comments(text, report.flag_comment)


@presets_app.command("from-command")
def presets_from_command(
    source: Annotated[str, typer.Argument(metavar="FILE|-", help="Command text, - for stdin.")],
    name: Annotated[str, typer.Option("--name", help="Preset name.")] = "imported",
    save: Annotated[bool, typer.Option(
        "--save", help="Save into the user presets dir instead of printing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    miles_root: MilesRootOption = None,
    launcher: LauncherArgsOption = None,
    run_launcher: RunLauncherOption = False,
    trust: TrustLauncherOption = False,
) -> None:
    """Turn a miles launch script, Python launcher or pasted command line into a preset
    (printed, or saved with --save).

    The script is read as bash reads it, and nothing in it runs: `python3 train.py ...`,
    `ray job submit ... -- python3 train.py ...`, arrays, ${VARS}, `read -ra`, multi-line
    quoted JSON, `source` of files next to the script, and miles' model args by name
    (`model_args_utils.py qwen3-4B`, `source scripts/models/qwen3-4B.sh`). A miles Python
    launcher (`run_*.py`: ScriptArgs, prepare(), U.execute_train) is read as Python without
    running it; --launcher-args passes its own options, and its prepare() downloads become
    the preset's [provenance.sources] for `ppodeck prepare`. The import report on stderr says
    what was resolved and from where, what stayed unresolved (with its line), and which flags
    are command-only or refused; each flag in the preset keeps its script line.

    Example:

    \b
        ppodeck presets from-command run-qwen3-4b-ppo.sh --name my-ppo --save
        ppodeck presets from-command run-glm5.sh --miles-root ~/miles
        pbpaste | ppodeck presets from-command - > my-ppo.toml
        ppodeck presets from-command run_qwen3_4b.py --launcher-args "--model-name Qwen3-0.6B"
    """
    imported = import_command_or_fail(source, miles_root=miles_root, launcher=launcher,
                                      run=run_launcher, trust=trust)
    config, issues = imported.config, imported.issues
    for issue in issues:
        _err(format_issue(issue))
    for line in imported.lines():
        _err(line)
    if imported.unreadable:  # an empty preset would be a story the script does not tell
        _err(f"ppodeck: no preset written: {source} could not be read. Fix: the error above, "
             "then import it again.")
        raise typer.Exit(EXIT_INVALID)
    kind = "a miles Python launcher" if imported.language == "python" else \
        "a miles command line"
    header = (f"{name}: imported from {kind} ({source}).\n\n"
              f"Launch: ppodeck run {name}")
    unresolved = [i.flags[0] for i in issues if i.code == "command.unresolved_variable"]
    if unresolved:
        header += ("\n\nFIX BEFORE USE: unresolved variables kept verbatim: "
                   + ", ".join(unresolved))
        _err(f"ppodeck: edit the preset: {', '.join(unresolved)} are kept verbatim and a "
             "number flag holding one will not load until it is replaced by a value.")
    provenance = {"sources": dict(imported.sources)} if imported.sources else None
    text = annotate_flags(config_to_toml(config, name=name,
                                         description=f"Imported from {source}",
                                         header_comment=header, provenance=provenance),
                          imported)
    if not save:
        typer.echo(text, nl=False)
        return
    path = user_preset_dir() / f"{name}.toml"
    _write_new(path, text, force)
    typer.echo(str(path))
    _say_if_invalid(name, apply_sets(resolve_or_fail(load_or_fail(str(path))), None))


def _say_if_invalid(name: str, config: RunConfig) -> None:
    errors = check(config).errors
    if errors:
        _err(f"{name}: written, but INVALID as it stands ({count(len(errors), 'error')}):")
        for issue in errors:
            _err(format_issue(issue))
        _err(f"Fix: edit the file, then `ppodeck validate {name}`.")
