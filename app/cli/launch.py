"""`ppodeck run`: launch a preset on our engine or on miles, resume a run, submit a Ray Job.

The launch waits on the attached progress view (cli/progress.py) unless --detach.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ...engine.run.rundir import (
    RUNS_DIR_ENV,
    RunDir,
    read_status,
    write_status,
)
from ...engine.vocabulary import (
    State,
)
from .common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_USAGE,
    MilesParserTimeoutOption,
    MilesPythonOption,
    SetOption,
    apply_sets,
    engine_issues,
    find_run_or_fail,
    format_issue,
    own_parser_issues_or_fail,
    preset_config,
)
from .common import err as _err
from .common import fail as _fail
from .progress import follow_run

if TYPE_CHECKING:
    import subprocess

    from ...engine.config import Issue, RunConfig



# -------------------------------------------------------------------------------------- run


def run(
    preset: Annotated[str | None, typer.Argument(
        metavar="PRESET", help="Preset name, or path to a preset .toml file.")] = None,
    set_: SetOption = None,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", metavar="DIR",
                     help=f"Run directory to create (must be new or empty). "
                          f"Default: a fresh one under ${RUNS_DIR_ENV} or ./runs."),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Start the run, print its id and return.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask questions. Code that a preset "
                           "from a file or a teammate names still needs --trust.")
    ] = False,
    trust: Annotated[
        bool, typer.Option("--trust", help="Allow the code a non-built-in preset names "
                           "(custom reward/function/hook paths, worker env vars); it is "
                           "listed before the launch.")
    ] = False,
    resume: Annotated[
        str | None, typer.Option("--resume", metavar="RUN",
                                 help="Continue a stopped, failed or lost run from its last "
                                      "checkpoint (it needs --save), in the same directory.")
    ] = None,
    submit: Annotated[
        str | None, typer.Option("--submit", metavar="ADDRESS",
                                 help="Submit the run to a Ray cluster as a Ray job (the "
                                      "dashboard address, http://HEAD:8265); its events reach "
                                      "the local run directory from the job's log stream. "
                                      "Auth headers: $PPODECK_RAY_JOB_HEADERS (JSON).")
    ] = None,
    engine: Annotated[
        str, typer.Option("--engine", metavar="ENGINE",
                          help="ppodeck (PPO Deck's engine) or miles (miles' own train.py from "
                               "--miles-root, with the argv `ppodeck command` shows, watched "
                               "through its --dump-details).")
    ] = "ppodeck",
    miles_root: Annotated[
        Path | None, typer.Option("--miles-root", metavar="DIR",
                                  help="The miles checkout whose train.py --engine miles "
                                       "runs; its own parser judges the command first.")
    ] = None,
    miles_python: MilesPythonOption = None,
    miles_parser_timeout: MilesParserTimeoutOption = None,
) -> None:
    """Launch a PPO run from a preset and follow its progress.

    The config is checked first; any error refuses the launch. Ctrl-C once stops the run after
    the current rollout, twice stops it at once. Closing the terminal after --detach never
    stops a run. Exit codes: 0 succeeded, 1 invalid config, 3 run failed, 130 interrupted.

    Example:

    \b
        ppodeck run tiny-cpu --set num-rollout=10 --set eps-clip=0.1
        ppodeck run ./my-preset.toml --detach
        ppodeck run tiny-cpu --detach && ppodeck runs ls
        ppodeck run --resume 250101-120000-tiny-cpu-1a2b
        ppodeck run tiny-cpu --submit http://127.0.0.1:8265 --detach
        ppodeck run qwen3-4b-ppo --engine miles --miles-root ~/miles
    """
    if engine not in ("ppodeck", "miles"):
        _fail(f"--engine {engine}: unknown engine (ppodeck or miles)", EXIT_USAGE)
    if engine == "miles":
        gate = (miles_python, miles_parser_timeout)
        raise typer.Exit(_run_miles(preset, set_ or [], run_dir, detach, yes, trust, resume,
                                    submit, miles_root, gate))
    if resume is not None:
        if preset is not None or run_dir is not None:
            _fail("--resume continues a run from its own config and directory: drop PRESET "
                  "and --run-dir (change flags with --set).", EXIT_USAGE)
        config, preset_name, rundir = _resume_config(resume, set_ or [])
        trusted = False  # its code flags were allowed once; the config file may have changed
    elif preset is None:
        _fail("missing PRESET. Fix: `ppodeck run PRESET` (see `ppodeck presets ls`), or "
              "`ppodeck run --resume RUN`.", EXIT_USAGE)
    else:
        config, preset_name, trusted = _load_config(preset, set_ or [])
    _check_or_exit(config, runs_on=engine_issues(preset if resume is None else None,
                                                 "ppodeck", config))
    _check_inputs_or_exit(config)
    if not trusted:
        _confirm_code_flags(config, yes, trust)
    if resume is not None:
        if submit is not None:
            _fail("--resume runs here; --submit starts new runs on a cluster. Drop one.",
                  EXIT_USAGE)
        popen = _relaunch(rundir, config, yes)
    elif submit is not None:
        rundir, popen = _submit(config, preset_name, run_dir, submit)
    else:
        rundir, popen = _launch(config, preset_name, run_dir)
    if resume is None and preset is not None:
        from .health import snapshot_preset_health

        snapshot_preset_health(rundir, preset)
    if detach:
        typer.echo(rundir.id)
        _err(f"follow it with: ppodeck attach {rundir.id}   or   "
                        f"ppodeck tail {rundir.id} --follow")
        return
    raise typer.Exit(follow_run(rundir, popen, config.get("num_rollout")))


def _run_miles(preset: str | None, sets: list[str], run_dir: Path | None, detach: bool,
               yes: bool, trust: bool, resume: str | None, submit: str | None,
               miles_root: Path | None, gate: tuple[str | None, float | None]) -> int:
    """`run --engine miles`: miles' own train.py (engine/miles/drive.py), watched as a run."""
    from ...engine.miles.drive import (
        MilesLaunchError,
        check_miles_root,
        prepare,
        start_supervisor,
    )
    from ...engine.run.secrets import secret_env

    if resume is not None:
        _fail("--resume is for PPO Deck's engine; miles resumes from --load itself: start a "
              "new run with --set load=CHECKPOINT_DIR.", EXIT_USAGE)
    if miles_root is None or preset is None:
        _fail("--engine miles needs PRESET and --miles-root DIR (a miles checkout). Fix: "
              "`ppodeck run PRESET --engine miles --miles-root ~/miles`", EXIT_USAGE)
    try:
        root = check_miles_root(miles_root)
    except MilesLaunchError as exc:
        _fail(str(exc), EXIT_USAGE)
    config, preset_name, trusted = _load_config(preset, sets)
    _check_or_exit(config, engine="miles", submit=submit, gate=(root, *gate),
                   runs_on=engine_issues(preset, "miles", config))
    _check_inputs_or_exit(config)
    if not trusted:
        _confirm_code_flags(config, yes, trust)
    from ...engine.launch.local import LaunchError, prepare_run

    try:
        rundir = prepare_run(config, preset_name, run_dir, here=False)  # miles is judged there
        launch = prepare(rundir, config, root, submit)
    except (LaunchError, OSError) as exc:
        _fail(f"could not create the run directory: {exc}", EXIT_INVALID)
    if launch["dropped"]:
        _err(f"not passed to miles (PPO Deck's own flags, unknown to miles' train.py): "
             f"{', '.join(launch['dropped'])}")
    if launch["secret_env"]:
        _err(f"secrets reach miles as {', '.join(launch['secret_env'])} in the job's "
             "environment, not on its command line")
    _err(f"added for watching: {' '.join(launch['added'])}" if launch["added"] else
         "the preset sets --dump-details and --use-miles-dashboard itself")
    if submit is not None:
        _err(f"the run is submitted to {submit}; miles writes its dump at the run directory's "
             "path there, so it is watched only when the cluster shares that storage")
    _err(f"miles command: {rundir.command_txt.read_text().strip()}")
    try:
        popen = start_supervisor(rundir, env=secret_env(config))
    except OSError as exc:
        write_status(rundir, state=State.FAILED, detail=f"supervisor did not start: {exc}")
        _fail(f"could not start run {rundir.id}: {exc}", EXIT_FAILED)
    from .health import snapshot_preset_health

    snapshot_preset_health(rundir, preset)
    if detach:
        typer.echo(rundir.id)
        _err(f"follow it with: ppodeck attach {rundir.id}   or   "
             f"ppodeck tail {rundir.id} --follow")
        return 0
    return follow_run(rundir, popen, config.get("num_rollout"))


def _load_config(preset: str, sets: list[str]) -> tuple[RunConfig, str, bool]:
    """The preset's config with --set applied, its name, and whether it is built in.

    Read by app.cli.common, so `run` and `validate` read presets and overrides the same way.
    """
    config, loaded = preset_config(preset, sets)
    return config, loaded.name, loaded.source == "built-in"


def _check_or_exit(config: RunConfig, engine: str = "ppodeck", submit: str | None = None,
                   gate: tuple[Path, str | None, float | None] | None = None,
                   runs_on: list[Issue] | None = None) -> None:
    """Print the config's issues and exit on an error. Under --engine miles, `gate` (the
    checkout, its Python, the parser's time bound) runs that checkout's own parser once PPO
    Deck's rules pass: the last word before the launch. `runs_on`: the preset's engines
    (preset.engines), said first."""
    from ...engine.config import check
    from ...engine.config.knock_on import group_knock_on

    machine = None
    if engine == "miles":
        from ...engine.miles.drive import launch_machine

        machine = launch_machine(submit)
    report = check(config, machine=machine, engine=engine)
    # a refused --set value: its knock-ons
    shown = [*(runs_on or []), *group_knock_on([], list(report.issues))]
    if engine == "miles":
        from ...engine.miles.drive import departure_issues

        shown += departure_issues()  # this machine's setup against miles' image, at the edge
        if gate is not None and not any(i.level == "error" for i in shown):
            shown += own_parser_issues_or_fail(config, *gate)
    for issue in shown:
        _err(format_issue(issue))
    errors = [i for i in shown if i.level == "error"]
    if errors:
        _fail(f"the config has {len(errors)} error(s); nothing was launched. "
              "Fix them in the preset or with --set.", EXIT_INVALID)


def _confirm_code_flags(config: RunConfig, yes: bool, trust: bool) -> None:
    """Presets from files or teammates may name code to execute: show exactly what, and run it
    only with consent: an interactive yes, or --trust (--yes alone never suffices)."""
    from ...engine.launch.local import code_to_run

    named = code_to_run(config)
    if not named:
        return
    width = max(len(flag) for flag, _ in named)
    lines = "\n".join(f"  {flag:<{width}}  {value}" for flag, value in named)
    _err(f"this run would execute code that the preset names (Python modules it imports "
         f"and calls, or environment given to every worker):\n{lines}")
    if trust:
        return
    if yes or not sys.stdin.isatty():
        _fail("refusing to run code from a non-built-in preset without explicit consent; "
              "review the list above, then add --trust (with --yes for no questions).",
              EXIT_INVALID)
    if not typer.confirm("Run this code?", default=False, err=True):
        _fail("not launched: the code above was not allowed.", EXIT_INVALID)


def _check_inputs_or_exit(config: RunConfig) -> None:
    from ...engine.launch.local import missing_inputs

    missing = missing_inputs(config)
    if missing:
        _fail("missing inputs; nothing was launched:\n  " + "\n  ".join(missing)
              + "\nFix: correct the path, or run `ppodeck prepare` for this preset.",
              EXIT_INVALID)


def _resume_config(run_name: str, sets: list[str]) -> tuple[RunConfig, str, RunDir]:
    """The run's own config.toml with --set applied."""
    from ...engine.presets import PresetError, config_from_toml

    rundir = find_run_or_fail(run_name)
    try:
        config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    except (OSError, PresetError) as exc:
        _fail(f"cannot resume run {rundir.id}: its config is unreadable: {exc}", EXIT_INVALID)
    preset_name = read_status(rundir).get("preset") or rundir.id
    return apply_sets(config, sets), preset_name, rundir


def _relaunch(rundir: RunDir, config: RunConfig, yes: bool) -> subprocess.Popen[bytes]:
    from ...engine.launch.local import LaunchError, prepare_resume, start_driver
    from ...engine.run.secrets import secret_env
    from .save_check import settle_damaged_save

    settle_damaged_save(rundir, config, yes)  # before the run is touched
    try:
        start = prepare_resume(rundir, config)
    except (LaunchError, OSError) as exc:
        _fail(f"cannot resume run {rundir.id}: {exc}", EXIT_INVALID)
    _err(f"resuming run {rundir.id} at rollout {start} (after its last checkpoint)")
    try:
        return start_driver(rundir, env=secret_env(config))
    except (LaunchError, OSError) as exc:
        write_status(rundir, state=State.FAILED, detail=f"driver did not start: {exc}")
        _fail(f"could not start the driver for run {rundir.id}: {exc}", EXIT_FAILED)


def _command_started() -> float | None:
    """When this `ppodeck run` process started: the forecast's "launch to done" starts at the
    user's Enter, before Python's imports and check(), not at the run directory's creation."""
    import psutil

    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def _launch(
    config: RunConfig, preset_name: str, run_dir: Path | None
) -> tuple[RunDir, subprocess.Popen[bytes]]:
    from ...engine.launch.local import LaunchError, MemoryRefused, prepare_run, start_driver
    from ...engine.run.secrets import secret_env

    try:
        rundir = prepare_run(config, preset_name, run_dir, launched=_command_started())
    except MemoryRefused as exc:  # the pre-flight's own sentence: GiB, holders, fix
        _fail(str(exc), EXIT_INVALID)
    except (LaunchError, OSError) as exc:
        _fail(f"could not create the run directory: {exc}", EXIT_INVALID)
    try:
        return rundir, start_driver(rundir, env=secret_env(config))
    except (LaunchError, OSError) as exc:
        write_status(rundir, state=State.FAILED, detail=f"driver did not start: {exc}")
        _fail(f"could not start the driver for run {rundir.id}: {exc}", EXIT_FAILED)


def _submit(
    config: RunConfig, preset_name: str, run_dir: Path | None, address: str
) -> tuple[RunDir, subprocess.Popen[bytes]]:
    """A Ray job on the cluster at `address`; the returned process mirrors it locally."""
    from ...engine.launch.jobs import JobError, forwarded_env, submit
    from ...engine.launch.local import LaunchError, prepare_run
    from ...engine.run.secrets import secret_env

    try:
        rundir = prepare_run(config, preset_name, run_dir, here=False)  # the cluster judges it
    except (LaunchError, OSError) as exc:
        _fail(f"could not create the run directory: {exc}", EXIT_INVALID)
    env = {**forwarded_env(), **secret_env(config)}
    if env:
        _err(f"the job gets these variables from here: {', '.join(sorted(env))}")
    try:
        popen = submit(rundir, preset_name, address, env)
    except JobError as exc:
        write_status(rundir, state=State.FAILED, detail=f"not submitted: {exc}")
        _fail(str(exc), EXIT_FAILED)
    _err(f"submitted run {rundir.id} to {address} as Ray job {rundir.id}")
    return rundir, popen


