"""The config nouns: `validate` (every rule and the derived numbers), `command` (the miles
argv) and `flags` (every flag and how PPO Deck's engine treats it).

Exit codes: 0 ok, 1 invalid config, 2 usage.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from ...engine.config import Issue, RunConfig, check, to_argv
from ...engine.config.derived import PHASES, ROLES
from ...engine.config.knock_on import group_knock_on
from ...engine.host.machine import environment
from ...engine.run.pace import machine_here
from .common import (
    EXIT_INVALID,
    EXIT_USAGE,
    JsonOption,
    LauncherArgsOption,
    MilesParserTimeoutOption,
    MilesPythonOption,
    MilesRootOption,
    RunLauncherOption,
    SetOption,
    TrustLauncherOption,
    apply_sets,
    count,
    engine_issues,
    fail,
    format_issue,
    import_command_or_fail,
    load_or_fail,
    own_parser_issues_or_fail,
    resolve_or_fail,
)
from .common import err as _err


def register(app: typer.Typer) -> None:
    """Add validate, command and flags to the ppodeck app."""
    app.command()(validate)
    app.command()(command)
    app.command()(flags)


def build_config(preset: str | None, sets: list[str] | None,
                 from_command: str | None, miles_root: Path | None = None,
                 launcher: str | None = None, run_launcher: bool = False, trust: bool = False
                 ) -> tuple[RunConfig, list[Issue], str]:
    """Preset, then a pasted command line on top, then --set overrides."""
    config, issues, label, _ = build_config_and_report(preset, sets, from_command, miles_root,
                                                       launcher, run_launcher, trust)
    return config, issues, label


def build_config_and_report(preset: str | None, sets: list[str] | None,
                            from_command: str | None, miles_root: Path | None = None,
                            launcher: str | None = None, run_launcher: bool = False,
                            trust: bool = False) -> tuple[RunConfig, list[Issue], str, Any]:
    """build_config, and the import report of --from-command (None without it)."""
    issues: list[Issue] = []
    config = RunConfig()
    label = "(flags)"
    report = None
    if preset:
        config = resolve_or_fail(load_or_fail(preset))
        label = preset
    if from_command:
        report = import_command_or_fail(from_command, miles_root=miles_root, launcher=launcher,
                                        run=run_launcher, trust=trust)
        pasted, issues = report.config, report.issues
        config = RunConfig({**config.values, **pasted.values},
                           config.passthrough + pasted.passthrough)
        label = from_command if not preset else f"{preset} + {from_command}"
    return apply_sets(config, sets), issues, label, report


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def format_derived(derived: Any) -> str:
    d = derived
    on_cpu = d.host_memory_gib is not None
    where = (f"world size {_fmt(d.world_size)} CPU rank(s) · DP {_fmt(d.dp_size)} · engines "
             f"{_fmt(d.rollout_engines)}" if on_cpu else
             f"world size {_fmt(d.world_size)} · DP {_fmt(d.dp_size)} · rollout GPUs "
             f"{_fmt(d.rollout_num_gpus)} · engines {_fmt(d.rollout_engines)} · GPUs needed "
             f"{_fmt(d.gpus_needed)}")
    lines = [
        "derived:",
        f"  {where}",
        f"  samples/rollout {_fmt(d.samples_per_rollout)} (trimmed {_fmt(d.samples_trimmed)})"
        f" · optimizer steps/rollout: actor {_fmt(d.actor_steps_per_rollout)}, critic "
        f"{_fmt(d.critic_steps_per_rollout)} · total train iters {_fmt(d.total_train_iters)}",
        f"  params {_fmt(d.params)}",
    ]
    return "\n".join(lines + (_host_lines(d.host_memory_gib) if on_cpu else _gpu_lines(d)))


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _host_lines(host: Any) -> list[str]:
    """A run on CPU: its ranks, rollout and processes in host memory, against this machine."""
    parts = " · ".join(f"{part} {_gib(host.get(part))}"
                       for part in ("actor", "critic", "rollout", "processes"))
    machine = (f" of {_gib(host['available'])} available" if "available" in host else "") + (
        f" ({_gib(host['ram'])} RAM)" if "ram" in host else "")
    return [f"  host memory GiB (rough, CPU run): {parts} · total {_gib(host.get('total'))}"
            f"{machine}"]


def _gpu_lines(d: Any) -> list[str]:
    lines = ["  memory GiB/GPU (rough)" + "".join(f"{role:>9}" for role in ROLES)]
    for phase in PHASES:
        row = d.memory_gib.get(phase, {})
        lines.append(f"    {phase:<20}" + "".join(f"{_fmt(row.get(r)):>9}" for r in ROLES))
    if d.gpu_free_gib:  # what the estimate is judged against (read now, through NVML)
        lines.append("  free now: " + " · ".join(f"GPU {index} {_gib(free)} of {_gib(total)}"
                                                 for index, free, total in d.gpu_free_gib))
    return lines


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
    launcher: LauncherArgsOption = None,
    run_launcher: RunLauncherOption = False,
    trust: TrustLauncherOption = False,
    engine: Annotated[str, typer.Option(
        "--engine", metavar="ENGINE",
        help="The engine that will run it: ppodeck (its capability classes apply) or miles "
             "(miles' own rules and this machine's GPUs, as `run --engine miles` checks; "
             "with --miles-root, that checkout's own parser too).")
    ] = "ppodeck",
    miles_python: MilesPythonOption = None,
    miles_parser_timeout: MilesParserTimeoutOption = None,
) -> None:
    """Check a preset (plus overrides) against every rule and show the derived numbers.

    Exit codes: 0 no errors, 1 errors, 2 usage (unknown preset, bad --set syntax).

    Example:

    \b
        ppodeck validate qwen3-4b-ppo
        ppodeck validate tiny-cpu --set eps-clip=0.25 --json
        ppodeck validate qwen3-4b-ppo --engine miles
        ppodeck validate --from-command run-qwen3-4b-ppo.sh
        ppodeck validate --from-command run_qwen3_4b.py --launcher-args "--mode debug_minimal"
    """
    if preset is None and from_command is None:
        fail("nothing to validate. Fix: pass a PRESET or --from-command FILE.", EXIT_USAGE)
    if engine not in ("ppodeck", "miles"):
        fail(f"--engine {engine}: unknown engine (ppodeck or miles)", EXIT_USAGE)
    config, parse_issues, label, imported = build_config_and_report(
        preset, sets, from_command, miles_root, launcher, run_launcher, trust)
    report = check(config, machine=machine_here(), engine=engine)
    runs_on = engine_issues(preset, engine, config)
    gate = _own_parser(engine, config, miles_root, miles_python, miles_parser_timeout)
    issues = [*runs_on, *parse_issues, *report.issues, *_miles_departures(engine), *gate]
    ok = not any(i.level == "error" for i in issues)
    forecast = report.forecast.as_dict() if report.forecast else None
    if as_json:  # every issue, knock-ons included: a program reads them all
        typer.echo(json.dumps({"ok": ok, "issues": [i.as_dict() for i in issues],
                               "derived": report.derived.as_dict(), "forecast": forecast},
                              indent=2))
    else:
        # over a preset, an unread launcher adds nothing: the preset's issues are its own
        issues = imported.judged(list(report.issues)) if imported is not None and \
            preset is None else group_knock_on(parse_issues, list(report.issues))
        issues = [*runs_on, *issues, *gate]
        counts = [sum(i.level == lvl for i in issues) for lvl in ("error", "warning", "info")]
        typer.echo(f"{label}: {'OK' if ok else 'INVALID'} ({count(counts[0], 'error')}, "
                   f"{count(counts[1], 'warning')}, {count(counts[2], 'info')})")
        order = {"error": 0, "warning": 1, "info": 2}
        for issue in sorted(issues, key=lambda i: order[i.level]):
            typer.echo(format_issue(issue))
        typer.echo(format_derived(report.derived))
        if report.forecast is not None:
            typer.echo(report.forecast.text())
    raise typer.Exit(0 if ok else EXIT_INVALID)


def _own_parser(engine: str, config: RunConfig, miles_root: Path | None,
                python: str | None, timeout_s: float | None) -> list[Issue]:
    """Under --engine miles, the --miles-root checkout's own parser as the last word
    (engine/miles/parser_gate.py); without a checkout, said as not run."""
    if engine != "miles":
        return []
    if miles_root is None:
        from ...engine.miles.parser_gate import CODE_SKIPPED

        return [Issue("info", CODE_SKIPPED, (), "miles' own parser was not run: no "
                      "--miles-root names the checkout that would launch.",
                      "add --miles-root DIR to also hear that checkout's parse_args()")]
    return own_parser_issues_or_fail(config, miles_root, python, timeout_s)


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
    engine: Annotated[str, typer.Option(
        "--engine", metavar="ENGINE",
        help="ppodeck: every flag, PPO Deck's own included; miles: exactly what `run --engine "
             "miles` hands miles' train.py (PPO Deck's own flags left out).")] = "ppodeck",
) -> None:
    """Print the exact miles-style argv of a preset (for `python3 train.py ...`).

    Diagnostics go to stderr; the exit code is 1 when the config has errors.

    Example:

    \b
        ppodeck command qwen3-4b-ppo
        ppodeck command qwen3-4b-ppo --set num-rollout=3 --json
        ppodeck command qwen3-4b-ppo --engine miles
    """
    if engine not in ("ppodeck", "miles"):
        fail(f"--engine {engine}: unknown engine (ppodeck or miles)", EXIT_USAGE)
    config, _, _ = build_config(preset, sets, None)
    if engine == "miles":
        from ...engine.miles.drive import SECRET_ENV, train_argv

        argv, own = train_argv(config, show_secrets=show_secrets, expand_paths=not raw_paths)
        _say_what_miles_gets(own, [dest for dest in SECRET_ENV if config.is_set(dest)])
        for refusal in engine_issues(preset, engine, config):  # the argv is still miles'
            _err(f"ppodeck: {refusal.message} Fix: {refusal.fix}.")
    else:
        argv = to_argv(config, show_secrets=show_secrets,
                       expand_paths=None if raw_paths else environment())
    typer.echo(json.dumps(argv) if as_json else shlex.join(argv))
    report = check(config)
    if report.config_errors:
        _err(f"ppodeck: {preset} has {count(len(report.config_errors), 'error')}; see "
             f"`ppodeck validate {preset}`.")
        raise typer.Exit(EXIT_INVALID)
    if report.errors:  # engine.* only: the command is still right for miles itself
        _err(f"ppodeck: PPO Deck's engine cannot run {preset} as it is "
             f"({', '.join(sorted({i.code for i in report.errors}))}); the command above is "
             f"for miles. See `ppodeck validate {preset}`.")


def _say_what_miles_gets(own: list[str], secrets: list[str]) -> None:
    if own:
        _err(f"ppodeck: left out for miles (PPO Deck's own flags): {' '.join(own)}")
    if secrets:
        _err(f"ppodeck: {', '.join(secrets)} reach miles as environment variables, not argv")
    _err("ppodeck: `run --engine miles` adds --dump-details <run dir>/miles "
         "--use-miles-dashboard unless the preset sets them")


def flags(
    search: Annotated[str | None, typer.Argument(
        metavar="[SEARCH]", help="Only flags whose name, group, help or engine class contain "
        "this text.")] = None,
    as_json: JsonOption = False,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print docs/flags.md's flags-by-class tables.")] = False,
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
    from ...engine.config import reference

    if markdown:
        typer.echo(reference.markdown_table())
        return
    if as_json:
        typer.echo(json.dumps({"flags": reference.flag_rows(search)}, indent=2))
        return
    lines = reference.text_lines(search)
    if not lines:
        fail(f"no flag matches {search!r}. Fix: try a shorter search, or `ppodeck flags`.",
              EXIT_USAGE)
    typer.echo("\n".join(lines))


def _miles_departures(engine: str) -> list[Issue]:
    """This machine's departures from miles' image, shown with a miles verdict (read here, at
    the edge: check() reads no environment)."""
    if engine != "miles":
        return []
    from ...engine.miles.drive import departure_issues

    return departure_issues()
