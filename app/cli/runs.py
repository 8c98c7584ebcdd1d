"""CLI commands that manage runs: run, runs ls, tail, stop, attach.

Data goes to stdout, diagnostics to stderr. Exit codes: 0 ok, 1 invalid config, 2 usage
(unknown run, bad --set), 3 run failed, 130 interrupted. engine.config, engine.presets and
engine.launch.local are imported inside the commands so `ppodeck --help` stays fast.
"""

from __future__ import annotations

import difflib
import json
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ...engine.run.events import follow, read_events
from ...engine.run.rundir import (
    RUNS_DIR_ENV,
    RunDir,
    RunInfo,
    driver_alive,
    list_runs,
    read_status,
    runs_root,
    write_status,
)
from ...engine.run.state import RunState
from ...engine.vocabulary import (
    ACTIVE_STATES,
    EVENT_KINDS,
    FINAL_STATES,
    INIT_PHASE,
    INIT_STEP_LABEL,
    Kind,
    Metric,
    State,
    is_eval_reward,
)
from .common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_USAGE,
    RunArg,
    SetOption,
    apply_sets,
    find_run_or_fail,
    format_issue,
    preset_config,
)
from .common import err as _err
from .common import fail as _fail

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Sequence

    from ...engine.config import RunConfig
    from .health import TailJudge

_RUNS_HELP = f"Runs live under ${RUNS_DIR_ENV} (default ./runs)."


def register(app: typer.Typer) -> None:
    """Add run, runs ls, tail, stop and attach to the ppodeck app."""
    app.command("run")(run)
    runs_app = typer.Typer(help=f"Inspect runs. {_RUNS_HELP}", no_args_is_help=True,
                           rich_markup_mode=None, pretty_exceptions_enable=False)
    runs_app.command("ls")(runs_ls)
    runs_app.command("add")(runs_add)
    app.add_typer(runs_app, name="runs")
    app.command("tail")(tail)
    app.command("stop")(stop)
    app.command("attach")(attach)


# ---------------------------------------------------------------------------------- helpers


def _revive_follower(rundir: RunDir) -> None:
    """A submitted run mirrors its Ray job through a local follower; restart it if it died."""
    from ...engine.launch.jobs import JobError, revive_follower

    try:
        if revive_follower(rundir):
            _err(f"run {rundir.id} is a Ray job whose local follower had stopped; "
                 "following it again (the whole job log is read first)")
    except (JobError, OSError) as exc:
        _err(f"run {rundir.id}: could not follow its Ray job again: {exc}")


def _did_you_mean(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1)
    return f"; did you mean {close[0]}?" if close else ""


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
                                  help="The miles checkout whose train.py --engine miles runs.")
    ] = None,
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
        raise typer.Exit(_run_miles(preset, set_ or [], run_dir, detach, yes, trust, resume,
                                    submit, miles_root))
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
    _check_or_exit(config)
    _check_inputs_or_exit(config)
    if not trusted:
        _confirm_code_flags(config, yes, trust)
    if resume is not None:
        if submit is not None:
            _fail("--resume runs here; --submit starts new runs on a cluster. Drop one.",
                  EXIT_USAGE)
        popen = _relaunch(rundir, config)
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
    raise typer.Exit(_follow_run(rundir, popen, config.get("num_rollout")))


def _run_miles(preset: str | None, sets: list[str], run_dir: Path | None, detach: bool,
               yes: bool, trust: bool, resume: str | None, submit: str | None,
               miles_root: Path | None) -> int:
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
    _check_or_exit(config, engine="miles", submit=submit)
    _check_inputs_or_exit(config)
    if not trusted:
        _confirm_code_flags(config, yes, trust)
    from ...engine.launch.local import LaunchError, prepare_run

    try:
        rundir = prepare_run(config, preset_name, run_dir)
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
    return _follow_run(rundir, popen, config.get("num_rollout"))


def _load_config(preset: str, sets: list[str]) -> tuple[RunConfig, str, bool]:
    """The preset's config with --set applied, its name, and whether it is built in.

    Read by app.cli.common, so `run` and `validate` read presets and overrides the same way.
    """
    config, loaded = preset_config(preset, sets)
    return config, loaded.name, loaded.source == "built-in"


def _check_or_exit(config: RunConfig, engine: str = "ppodeck", submit: str | None = None
                   ) -> None:
    from ...engine.config import check

    machine = None
    if engine == "miles":
        from ...engine.miles.drive import launch_machine

        machine = launch_machine(submit)
    report = check(config, machine=machine, engine=engine)
    for issue in report.issues:
        _err(format_issue(issue))
    if report.errors:
        _fail(f"the config has {len(report.errors)} error(s); nothing was launched. "
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


def _relaunch(rundir: RunDir, config: RunConfig) -> subprocess.Popen[bytes]:
    from ...engine.launch.local import LaunchError, prepare_resume, start_driver
    from ...engine.run.secrets import secret_env

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


def _launch(
    config: RunConfig, preset_name: str, run_dir: Path | None
) -> tuple[RunDir, subprocess.Popen[bytes]]:
    from ...engine.launch.local import LaunchError, prepare_run, start_driver
    from ...engine.run.secrets import secret_env

    try:
        rundir = prepare_run(config, preset_name, run_dir)
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
        rundir = prepare_run(config, preset_name, run_dir)
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


# --------------------------------------------------------------------- attached progress view


class RunProgress:
    """What the attached view shows: the run's fold (engine.run.state, as the TUI's) plus this
    view's own wall clock and Ctrl-C note."""

    def __init__(self, run_id: str, num_rollout: int | None) -> None:
        self.run_id = run_id
        self.fold = RunState(series_capacity=8, log_capacity=1, phase_capacity=16)
        self.fold.num_rollout = num_rollout
        self.started = time.monotonic()
        self.interrupted_state: str | None = None  # after Ctrl-C, until the run says more
        self.note = ""  # e.g. the Ctrl-C hint

    def apply(self, event: dict[str, Any]) -> None:
        if event.get("kind") == Kind.STATUS:
            self.interrupted_state = None
        self.fold.apply((event,))

    @property
    def rollout_id(self) -> int | None:
        return self.fold.rollout_id

    @property
    def num_rollout(self) -> int | None:
        return self.fold.num_rollout

    @property
    def state(self) -> str:
        return self.interrupted_state or self.fold.event_state or State.STARTING

    @property
    def phase(self) -> str:
        current, ended = self.fold.current_phase, self.fold.last_ended_phase
        step = self.fold.current_init_step
        if current == INIT_PHASE and step:  # the start's minute or two, step by step
            return f"{current}: {INIT_STEP_LABEL.get(step, step)}"
        return current or (f"{ended} done" if ended else State.STARTING)

    @property
    def reward(self) -> float | None:
        return self.fold.latest(Metric.REWARD)

    @property
    def value_loss(self) -> float | None:
        return self.fold.latest(Metric.VALUE_LOSS)

    @property
    def evals(self) -> dict[str, float]:
        """eval/<dataset> -> its latest mean reward."""
        return self.fold.eval_rewards()

    def rollout_text(self) -> str:
        return _rollout(self.rollout_id, self.num_rollout)

    def eval_text(self) -> str:
        return "  ".join(f"{key} {_num(value)}" for key, value in self.evals.items())

    def line(self) -> str:
        elapsed = _clock(time.monotonic() - self.started)
        evals = f"  {self.eval_text()}" if self.evals else ""
        return (f"rollout {self.rollout_text()}  phase {self.phase}  reward {_num(self.reward)}  "
                f"value loss {_num(self.value_loss)}{evals}  elapsed {elapsed}")

    def __rich__(self) -> Group:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        done = 0 if self.rollout_id is None else self.rollout_id + 1
        grid.add_row("run", Text(f"{self.run_id}  ({self.state})"))
        grid.add_row("rollout", Text(self.rollout_text()))
        if self.num_rollout:
            grid.add_row("", ProgressBar(total=self.num_rollout, completed=done, width=40))
        grid.add_row("phase", Text(self.phase))
        grid.add_row("reward", _num(self.reward))
        grid.add_row("value loss", _num(self.value_loss))
        if self.evals:
            grid.add_row("eval reward", self.eval_text())
        grid.add_row("elapsed", _clock(time.monotonic() - self.started))
        return Group(grid, Text(self.note, style="yellow")) if self.note else Group(grid)


def eval_rewards(metrics: dict[str, Any]) -> dict[str, float]:
    """eval/<dataset> (a dataset's mean reward), not eval/<dataset>/... nor the _ratio keys."""
    return {k: v for k, v in metrics.items() if is_eval_reward(k) and isinstance(v, (int, float))}


def _rollout(rollout_id: int | None, num_rollout: int | None) -> str:
    """"4/10" while rollout_id 3 (0-based) runs or once it is done."""
    done = "-" if rollout_id is None else str(rollout_id + 1)
    return f"{done}/{'?' if num_rollout is None else num_rollout}"


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class _Interrupts:
    """SIGINT handler that only counts; the follow loop acts on the count (signal-safe)."""

    def __init__(self) -> None:
        self.received = 0
        self.handled = 0

    def handle(self, signum: int, frame: object) -> None:
        self.received += 1


class _View:
    """A Rich Live panel on a TTY; otherwise one plain line per finished rollout."""

    def __init__(self, progress: RunProgress, live: bool) -> None:
        self.progress = progress
        self.live = Live(progress, refresh_per_second=4, console=Console()) if live else None
        self.printed: int | None = None  # last rollout with a plain line

    def __enter__(self) -> _View:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.live is not None:
            self.live.stop()
        elif self.progress.rollout_id not in (None, self.printed):
            typer.echo(self.progress.line())

    def update(self, batch: list[dict[str, Any]]) -> None:
        for event in batch:
            if self.live is None:
                self._line_if_rollout_done(event.get("rollout_id"))
            self.progress.apply(event)
            kind = event["kind"]
            loud_log = kind == Kind.LOG and event.get("level") in ("warning", "error")
            if kind == Kind.STATUS or loud_log:
                self.say(format_event(event))

    def _line_if_rollout_done(self, rollout_id: Any) -> None:
        current = self.progress.rollout_id
        if isinstance(rollout_id, int) and current is not None and rollout_id > current:
            typer.echo(self.progress.line())
            self.printed = current

    def say(self, message: str) -> None:
        if self.live is not None:
            self.live.console.print(message, markup=False, highlight=False)
        else:
            typer.echo(message, err=True)


def _follow_run(rundir: RunDir, popen: subprocess.Popen[bytes], num_rollout: int | None) -> int:
    progress = RunProgress(rundir.id, num_rollout)
    view = _View(progress, live=sys.stdout.isatty())
    interrupts = _Interrupts()
    driver_gone = threading.Event()
    previous = signal.signal(signal.SIGINT, interrupts.handle)
    try:
        with view:
            for batch in follow(rundir.events_jsonl, driver_gone, idle_batches=True,
                                on_warning=view.say):
                view.update(batch)
                _act_on_interrupts(rundir, interrupts, view)
                if popen.poll() is not None:
                    driver_gone.set()  # follow() reads once more, then ends
    finally:
        signal.signal(signal.SIGINT, previous)
    return _exit_code(rundir, popen, interrupted=interrupts.received > 0)


def _act_on_interrupts(rundir: RunDir, interrupts: _Interrupts, view: _View) -> None:
    from ...engine.launch.local import stop_run

    while interrupts.handled < interrupts.received:
        interrupts.handled += 1
        force = interrupts.handled > 1
        view.say(stop_run(rundir, force=force))
        view.progress.interrupted_state = "killed" if force else State.STOPPING
        view.progress.note = "" if force else ("stopping after the current rollout… "
                                               "press Ctrl-C again to stop at once")
        if view.live is None and view.progress.note:
            view.say(view.progress.note)  # the live panel shows the note itself


def _exit_code(rundir: RunDir, popen: subprocess.Popen[bytes], interrupted: bool) -> int:
    status = read_status(rundir)
    state = status.get("state")
    if state in ACTIVE_STATES or state in (State.LOST, State.CREATED, None):
        detail = (f"driver exited with code {popen.returncode} before recording a final "
                  f"state; see {rundir.driver_log}")
        status = write_status(rundir, state=State.FAILED, detail=detail, ended=time.time())
        state = State.FAILED
    detail = status.get("detail") or ""
    if state == State.SUCCEEDED:
        _err(f"run {rundir.id} succeeded")
        return 0
    if interrupted or state == State.STOPPED:
        _err(f"run {rundir.id} stopped: {detail}")
        return EXIT_INTERRUPTED
    _err(f"run {rundir.id} {state}: {detail}\ndriver log: {rundir.driver_log}")
    return EXIT_FAILED


# ----------------------------------------------------------------------------------- runs ls

RunsRootOption = Annotated[Path | None, typer.Option(
    "--root", envvar=RUNS_DIR_ENV, show_envvar=True,
    help="Directory that holds the runs (default ./runs).")]


def runs_ls(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
    root: RunsRootOption = None,
) -> None:
    """List runs, newest first: id, state, preset, rollout i/N, start time, detail.

    A run whose driver died without saying so is shown as lost.

    Example:

    \b
        ppodeck runs ls
        PPODECK_RUNS_DIR=/data/runs ppodeck runs ls --json
    """
    infos = list_runs(root)
    if as_json:
        typer.echo(json.dumps([{**asdict(i), "path": str(i.path), "job": _job_of(i),
                                "health": _health_of(i)} for i in infos], indent=2))
        return
    if not infos:
        _err(f"no runs under {root or runs_root()}; start one with `ppodeck run PRESET`")
        return
    console = Console()
    if not console.is_terminal:
        console.width = 1000  # piped: full rows, one per line, for grep and awk
    console.print(_runs_table(infos))


def runs_add(
    dump: Annotated[Path, typer.Argument(metavar="DIR",
                                         help="A miles --dump-details directory.")],
    root: RunsRootOption = None,
) -> None:
    """Watch a miles run: its --dump-details directory becomes a run that `runs ls`, attach,
    tail, health, compare and plot take. Nothing is written into DIR; PPO Deck's files about
    it (its events, health findings) live in a run directory of its own under the runs root.
    While DIR grows, a follower keeps that run current. Prints the run id.

    Example:

    \b
        ppodeck runs add /data/miles/dump-qwen3-4b-ppo
        ppodeck tail /data/miles/dump-qwen3-4b-ppo --kind metrics
    """
    from ...engine.miles.watch import MilesDumpError, open_dump

    try:
        rundir, new = open_dump(dump.expanduser(), root)
    except (MilesDumpError, OSError) as exc:
        _fail(f"cannot add {dump}: {exc}", EXIT_USAGE)
    if not new:
        _err(f"{dump} was already watched as run {rundir.id}; brought up to date")
    typer.echo(rundir.id)


def _runs_table(infos: list[RunInfo]) -> Table:
    """Every column but detail keeps its full width; detail folds into what is left."""
    headers = ("id", "state", "preset", "rollout", "started", "health")
    rows = [(i.id, i.state, i.preset, _rollout(i.rollout_id, i.num_rollout), _when(i.started),
             _health_of(i), _job_note(_job_of(i)) + i.detail) for i in infos]
    table = Table(box=None)
    for col, header in enumerate(headers):
        table.add_column(header, no_wrap=True,
                         min_width=max(len(header), *(len(row[col]) for row in rows)))
    table.add_column("detail", overflow="fold", min_width=20)
    for row in rows:
        table.add_row(*row)
    return table


def _job_of(info: RunInfo) -> dict[str, Any] | None:
    """The Ray job of a submitted run, with the job status its follower last saw."""
    return read_status(RunDir(info.path)).get("job")


def _health_of(info: RunInfo) -> str:
    """The worst health finding (`ppodeck health`); judged when the events changed."""
    from .health import health_column

    return health_column(info.path)


def _job_note(job: dict[str, Any] | None) -> str:
    return f"[job {job.get('status', '?')} at {job.get('address')}] " if job else ""


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


# -------------------------------------------------------------------------------------- tail


def tail(
    run_name: RunArg,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events until the run ends.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Raw JSON lines.")] = False,
    kinds: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help=f"Only these event kinds ({', '.join(EVENT_KINDS)}). "
                                          "Repeatable."),
    ] = None,
) -> None:
    """Print a run's events, one line each.

    Skipped lines (a torn last line, a corrupt line) are reported on stderr.
    Runs are looked up under $PPODECK_RUNS_DIR (default ./runs).

    Example:

    \b
        ppodeck tail 250101-120000-tiny-cpu --follow --kind metrics
        ppodeck tail runs/250101-120000-tiny-cpu-1a2b --json | jq .
    """
    for kind in kinds or ():
        if kind not in EVENT_KINDS:
            _fail(f"--kind {kind}: unknown event kind{_did_you_mean(kind, EVENT_KINDS)} "
                  f"(kinds: {', '.join(EVENT_KINDS)})", EXIT_USAGE)
    rundir = find_run_or_fail(run_name)
    _revive_follower(rundir)
    from .health import TailJudge

    judge = TailJudge(rundir)  # health findings are shown after the event that fired them
    show = _printer(as_json, set(kinds or ()), judge)
    if follow_:
        raise typer.Exit(_tail_follow(rundir, show, judge))
    try:
        events, warnings = read_events(rundir.events_jsonl)
    except FileNotFoundError:
        _err(f"run {rundir.id} has no events yet ({rundir.events_jsonl})")
        return
    for warning in warnings:
        _err(f"warning: {warning}")
    for event in events:
        show(event)
    if read_status(rundir).get("state") in FINAL_STATES:
        for finding in judge.end():
            show(finding)


def _printer(as_json: bool, kinds: set[str], judge: TailJudge | None = None
             ) -> Callable[[dict[str, Any]], None]:
    def emit(event: dict[str, Any]) -> None:
        if kinds and event["kind"] not in kinds:
            return
        typer.echo(json.dumps(event) if as_json else format_event(event))

    def show(event: dict[str, Any]) -> None:
        emit(event)
        if judge is not None and event["kind"] != Kind.HEALTH:
            for finding in judge.after(event):
                emit(finding)

    return show


def _tail_follow(rundir: RunDir, show: Callable[[dict[str, Any]], None],
                 judge: TailJudge) -> int:
    run_ended = threading.Event()
    next_check = 0.0
    try:
        for batch in follow(rundir.events_jsonl, run_ended, idle_batches=True,
                            on_warning=lambda m: _err(f"warning: {m}")):
            for event in batch:
                show(event)
            if time.monotonic() >= next_check:  # status.json at most once a second
                next_check = time.monotonic() + 1.0
                if _finished(rundir):
                    run_ended.set()
                else:
                    for finding in judge.idle(driver_alive(rundir, read_status(rundir))):
                        show(finding)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    for finding in judge.end():
        show(finding)
    return 0


def _finished(rundir: RunDir) -> bool:
    """Final state recorded and the driver gone (it flushes its last events as it exits).

    A driver on another host cannot be checked: a final state 30 s old is taken as the end.
    """
    status = read_status(rundir)
    if status.get("state") not in FINAL_STATES:
        return False
    ended_long_ago = time.time() - (status.get("ended") or 0) > 30
    return ended_long_ago or not driver_alive(rundir, status)


_MALFORMED = (AttributeError, TypeError, ValueError, KeyError, OverflowError, OSError)


def format_event(event: dict[str, Any]) -> str:
    """One human-readable line per event; fields of the wrong type are shown raw."""
    kind = event["kind"]
    try:
        body = _FORMATTERS.get(kind, _format_other)(event)
    except _MALFORMED:  # e.g. "metrics": 3 from a foreign writer: show it, do not crash tail
        body = _format_other(event)
    return f"{_clock_of(event.get('ts'))} {kind:<8} {body}"


def _clock_of(ts: Any) -> str:
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts or 0))
    except _MALFORMED:  # not a number, or out of the platform's time range
        return "--:--:--"


def _format_metrics(e: dict[str, Any]) -> str:
    values = "  ".join(f"{k}={_num(v)}" for k, v in (e.get("metrics") or {}).items())
    return f"{e.get('step_key', 'step')}={e.get('step')}  {values}"


def _format_phase(e: dict[str, Any]) -> str:
    took = f" ({e['seconds']:.2f} s)" if isinstance(e.get("seconds"), (int, float)) else ""
    parts = e.get("parts")
    if isinstance(parts, dict) and parts:  # a trainer's init: where its seconds went
        took += ": " + ", ".join(f"{k} {_num(v)} s" for k, v in parts.items())
    if e.get("parent"):
        name = INIT_STEP_LABEL.get(str(e.get("name")), e.get("name"))
        return f"{e['parent']}  {name} {e.get('state')}{took}"
    where = "startup" if e.get("rollout_id") is None else f"rollout {e.get('rollout_id')}"
    return f"{where}  {e.get('name')} {e.get('state')}{took}"


def _format_offload(e: dict[str, Any]) -> str:
    if e.get("noop"):
        return f"{e.get('model')} {e.get('direction')}: already on {e.get('where')}"
    speed = f", {e['gbps']:.1f} GB/s" if isinstance(e.get("gbps"), (int, float)) else ""
    return (f"{e.get('model')} {e.get('direction')} -> {e.get('where')}  "
            f"{_gib(e.get('bytes'))} in {_num(e.get('seconds'))} s{speed}")


def _format_gpu(e: dict[str, Any]) -> str:
    devices = "  ".join(
        f"gpu{d.get('index')} {_gib(d.get('used_bytes'))}/{_gib(d.get('total_bytes'))}"
        f" (non-torch {_gib(d.get('non_torch_bytes'))})"
        for d in e.get("devices") or [])
    return f"{e.get('label')}: {devices}  host rss {_gib(e.get('rss_bytes'))}"


def _format_status(e: dict[str, Any]) -> str:
    detail = e.get("detail")
    return f"{e.get('state')}: {detail}" if detail else str(e.get("state"))


def _format_log(e: dict[str, Any]) -> str:
    return f"{e.get('level')} [{e.get('source')}] {e.get('msg')}"


def _format_other(e: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in e.items() if k not in ("v", "ts", "kind")})


def _gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, (int, float)) else "?"


def _format_health(e: dict[str, Any]) -> str:
    from .health import format_health

    return format_health(e)


_FORMATTERS = {Kind.METRICS: _format_metrics, Kind.PHASE: _format_phase,
               Kind.OFFLOAD: _format_offload, Kind.GPU: _format_gpu, Kind.STATUS: _format_status,
               Kind.LOG: _format_log, Kind.HEALTH: _format_health}


# ------------------------------------------------------------------------------ stop, attach


def stop(
    run_name: RunArg,
    force: Annotated[
        bool, typer.Option("--force", help="SIGKILL the driver's process group at once.")
    ] = False,
) -> None:
    """Stop a run: after its current rollout (SIGINT), or at once with --force (SIGKILL).

    Runs are looked up under $PPODECK_RUNS_DIR (default ./runs).

    Example:

    \b
        ppodeck stop 250101-120000-tiny-cpu
        ppodeck stop 250101-120000-tiny-cpu --force
    """
    from ...engine.launch.local import stop_run
    from ...engine.run.source import dump_of, is_driven

    rundir = find_run_or_fail(run_name)
    if dump_of(rundir) is not None and not is_driven(rundir):
        _fail(f"run {rundir.id} watches the miles dump {dump_of(rundir)}; PPO Deck did not "
              "launch it and only reads it. Stop it where it was launched (its Ray job or "
              "train.py).", EXIT_USAGE)
    try:
        typer.echo(stop_run(rundir, force=force))
    except OSError as exc:
        _fail(f"could not signal run {rundir.id}: {exc}", EXIT_FAILED)


def attach(run_name: RunArg) -> None:
    """Open the monitor on a run that is running or finished.

    Closing the monitor never stops the run. Runs are looked up under $PPODECK_RUNS_DIR
    (default ./runs).

    Example:

    \b
        ppodeck attach 250101-120000-tiny-cpu
    """
    rundir = find_run_or_fail(run_name)
    _revive_follower(rundir)
    try:
        from ..tui.app import run_tui
    except ImportError as exc:
        _fail(f"the TUI monitor is not available ({exc}); follow the run with "
              f"`ppodeck tail {rundir.id} --follow` instead", EXIT_USAGE)
    run_tui(attach=str(rundir.path))
