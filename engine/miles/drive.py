"""Run miles itself: its train.py with the preset's argv, watched like any run (LIGHT at import).

`ppodeck run PRESET --engine miles --miles-root DIR` makes a run directory as for our engine,
then starts a supervisor (`python -m ppodeck.engine.miles.drive supervise --run-dir D`, its own
process group, the pid in status.json) that does what miles' launchers do
(miles/utils/external_utils/command_utils.py execute_train): a Ray head (a private one on
127.0.0.1, or the cluster given with --submit), then `python3 <miles root>/train.py ARGV` as a
Ray job with miles' runtime_env. ARGV is `ppodeck command`'s (secrets unmasked), plus
`--dump-details <run dir>/miles --use-miles-dashboard` unless the preset sets them; the run
directory then watches that dump (engine/miles/watch.py) while the supervisor keeps it current,
copies the job's log into driver.log and records the job's end as the run's state. Ctrl-C,
`ppodeck stop` (SIGINT to the supervisor) stop the job through the Jobs API.

With --submit the dump is written on the cluster: the run directory must be on storage the
cluster sees at the same path for the run to be watched (the launcher says so).
"""

from __future__ import annotations

import json
import os
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

from ..config.issues import Issue
from ..host.machine import environment
from ..run.events import SCHEMA_VERSION, encode_event
from ..run.rundir import RunDir, update_status, write_status
from ..vocabulary import FINAL_STATES, Kind, State
from .watch import DUMP_SUBDIR, register, sync

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..config.machine import Machine

PYTHON_ENV = "PPODECK_MILES_PYTHON"  # the cluster's Python for train.py (miles: python3)
MEGATRON_ENV = "PPODECK_MEGATRON_PATH"
TEST_GPUS_ENV = "PPODECK_TEST_RAY_GPUS"  # engine/driver/cluster.py's test-only switch
LAUNCH_FILE = "miles_launch.json"  # what the supervisor runs (no secret values in it)
TERMINAL = {"SUCCEEDED": State.SUCCEEDED, "FAILED": State.FAILED, "STOPPED": State.STOPPED}
POLL_S = 1.0
# variables miles' execute_train passes through to the job when they are set
PASSED_THROUGH = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_DEBUG_FILE")


class MilesLaunchError(Exception):
    """str() is the user-facing message, with a fix."""


# ------------------------------------------------------------------------ the command and env


def check_miles_root(miles_root: Path) -> Path:
    root = Path(miles_root).expanduser().resolve()
    if not (root / "train.py").is_file():
        raise MilesLaunchError(f"--miles-root {miles_root}: no train.py there. Fix: pass the "
                               "root of a miles checkout (the directory holding train.py).")
    return root


def miles_argv(config: RunConfig, rundir: RunDir, *, show_secrets: bool = True
               ) -> tuple[list[str], list[str], list[str]]:
    """(train.py's argv, the flags added for watching, PPO Deck's own flags left out).

    The argv is `ppodeck command --engine miles`'s (train_argv) plus, unless the preset sets
    them, --dump-details into the run directory and --use-miles-dashboard (not with
    $PPODECK_MILES_DASHBOARD=0: the run is then watched through the dump's events/ records,
    for a miles install whose dashboard cannot run).
    """
    argv, own = train_argv(config, show_secrets=show_secrets)
    added: list[str] = []
    if not config.is_set("dump_details"):
        added += ["--dump-details", str(rundir.path.resolve() / DUMP_SUBDIR)]
    if not config.get("use_miles_dashboard") and dashboard_wanted():
        added.append("--use-miles-dashboard")
    return argv + added, added, own


DASHBOARD_ENV = "PPODECK_MILES_DASHBOARD"  # 0: leave --use-miles-dashboard to the preset


def dashboard_wanted(environ: Mapping[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get(DASHBOARD_ENV, "1") != "0"


def train_argv(config: RunConfig, *, show_secrets: bool = True, expand_paths: bool = True
               ) -> tuple[list[str], list[str]]:
    """(miles' train.py argv, PPO Deck's own flags left out): `ppodeck command`'s argv without
    the flags PPO Deck adds itself (schema `own`: they mean nothing to miles' argparse) and
    without the secrets of SECRET_ENV, which travel as environment variables (secret_job_env).
    """
    from ..config import BY_DEST, to_argv

    own = [dest for dest, flag in BY_DEST.items() if flag.own and config.is_set(dest)]
    kept = config.with_values(**{dest: None for dest in own + list(SECRET_ENV)})
    argv = to_argv(kept, show_secrets=show_secrets,
                   expand_paths=environment() if expand_paths else None)
    return argv, [BY_DEST[d].name for d in own]


# secret flags that reach miles as the variable its library reads instead of on the command
# line (a job's entrypoint shows in driver.log and in Ray's job list): wandb.login() without a
# key reads WANDB_API_KEY
SECRET_ENV = {"wandb_key": "WANDB_API_KEY"}


def secret_job_env(config: RunConfig) -> dict[str, str]:
    return {var: str(config.get(dest)) for dest, var in SECRET_ENV.items()
            if config.is_set(dest)}


def dump_dir(config: RunConfig, rundir: RunDir) -> Path:
    """Where miles will write its dump: the preset's --dump-details, else the run's miles/."""
    from ..config.resolve import expand_path

    if config.is_set("dump_details"):
        dump = expand_path(str(config.get("dump_details")), environment())
        return Path(dump).expanduser().resolve()
    return rundir.path.resolve() / DUMP_SUBDIR


def megatron_path(environ: Mapping[str, str], miles_root: Path) -> str | None:
    """$PPODECK_MEGATRON_PATH, else a Megatron-LM checkout next to miles' (miles' layout)."""
    if environ.get(MEGATRON_ENV):
        return environ[MEGATRON_ENV]
    sibling = miles_root.parent / "Megatron-LM"
    return str(sibling) if sibling.is_dir() else None


def runtime_env_vars(miles_root: Path, config: RunConfig, environ: Mapping[str, str],
                     has_nvlink: bool) -> dict[str, str]:
    """The variables miles' execute_train gives the job (spec: its runtime_env table)."""
    master = environ.get("MASTER_ADDR", "127.0.0.1")
    env = {"PYTHONUNBUFFERED": "1"}
    if config.get("train_backend") != "fsdp":
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    env["NCCL_NVLS_ENABLE"] = environ.get("NCCL_NVLS_ENABLE") or str(int(has_nvlink))
    env.update({k: environ[k] for k in PASSED_THROUGH if k in environ})
    env["no_proxy"] = f"127.0.0.1,{master}"
    env["MASTER_ADDR"] = master
    megatron = megatron_path(environ, miles_root)
    paths = [str(miles_root), *([megatron] if megatron else []),
             *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def has_nvlink() -> bool:
    """What miles probes with `nvidia-smi topo -m` (NV links between GPUs)."""
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(word.startswith("NV") and word[2:].isdigit() for word in out.split())


def entrypoint(miles_root: Path, argv: list[str], environ: Mapping[str, str]) -> str:
    python = environ.get(PYTHON_ENV) or "python3"
    return shlex.join([python, str(miles_root / "train.py"), *argv])


def launch_machine(submit: str | None) -> Machine:
    """The machine check() judges a miles launch against: this one; with --submit the
    cluster's GPUs count (checked when the job starts there), so none are missing here.
    PPODECK_TEST_RAY_GPUS (tests only) declares the GPUs a private Ray head offers."""
    from dataclasses import replace

    from ..config.rules_engine import this_machine

    machine = this_machine()
    declared = os.environ.get(TEST_GPUS_ENV, "")
    if submit is not None:
        # the job's environment is the cluster's plus runtime_env_vars(), not this shell's
        return replace(machine, gpus=max(machine.gpus, 1 << 20), miles_ft_trainer=False)
    if declared.isdigit() and int(declared) > 0:
        return replace(machine, gpus=int(declared))
    return machine


# ------------------------------------------------------------------------------- the launcher


def prepare(rundir: RunDir, config: RunConfig, miles_root: Path, submit: str | None
            ) -> dict[str, Any]:
    """Record what the supervisor runs: LAUNCH_FILE, command.txt, source.json (the dump)."""
    from ..config import BY_DEST

    argv, added, dropped = miles_argv(config, rundir, show_secrets=False)
    shown = entrypoint(miles_root, argv, os.environ)
    launch = {"miles_root": str(miles_root), "submit": submit, "added": added,
              "dropped": dropped, "secret_dests": [d for d, f in BY_DEST.items()
                                                   if f.secret and config.is_set(d)],
              "secret_env": sorted(secret_job_env(config))}
    (rundir.path / LAUNCH_FILE).write_text(json.dumps(launch, indent=2) + "\n")
    rundir.command_txt.write_text(shown + "\n")
    register(dump_dir(config, rundir), driven=True, rundir=rundir)
    write_status(rundir, engine="miles")
    return launch


def launch(config: RunConfig, preset_name: str, miles_root: Path, submit: str | None
           ) -> tuple[RunDir, subprocess.Popen[bytes]]:
    """The TUI's launch on miles: miles' rules and this machine first (an error refuses it,
    MilesLaunchError naming the codes), then the run directory and the supervisor."""
    from ..config import check
    from ..launch.local import prepare_run
    from ..run.secrets import secret_env

    root = check_miles_root(miles_root)
    errors = check(config, machine=launch_machine(submit), engine="miles").errors
    if errors:
        raise MilesLaunchError("miles would refuse this config: " + "; ".join(
            f"{issue.code}: {issue.message}" for issue in errors))
    rundir = prepare_run(config, preset_name, here=False)
    prepare(rundir, config, root, submit)
    return rundir, start_supervisor(rundir, env=secret_env(config))


def start_supervisor(rundir: RunDir, env: Mapping[str, str] | None = None
                     ) -> subprocess.Popen[bytes]:
    """The supervisor in its own process group; `env` (the secrets) adds to this environment."""
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    argv = [sys.executable, "-m", "ppodeck.engine.miles.drive", "supervise", "--run-dir",
            str(rundir.path.resolve())]
    with open(rundir.driver_log, "ab") as log:
        popen = subprocess.Popen(argv, cwd=IMPORT_ROOT, env=child_env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def started(status: dict[str, Any]) -> dict[str, Any]:
        state = State.STARTING if status.get("state") in (None, State.CREATED) else \
            status["state"]
        return {**status, "state": state, "pid": popen.pid, "pgid": popen.pid,
                "host": socket.gethostname(), "started": time.time(), "ended": None}

    update_status(rundir, started)
    return popen


# ----------------------------------------------------------------------------- the supervisor


class _Stop:
    def __init__(self) -> None:
        self.requested = 0

    def handle(self, signum: int, frame: object) -> None:
        self.requested += 1


def supervise(rundir: RunDir) -> int:
    """Start the head (or join --submit's cluster), run train.py as a Ray job, watch it.

    A private head without Ray's dashboard packages has no Jobs API: train.py then runs as this
    process's child against that head (as `python3 train.py` under `ray start --head`), and the
    log says so.
    """
    from ..presets import config_from_toml
    from ..run.secrets import restore_secrets

    launch = json.loads((rundir.path / LAUNCH_FILE).read_text())
    config: RunConfig = restore_secrets(
        config_from_toml(rundir.config_toml.read_text(), rundir.config_toml))
    miles_root = Path(launch["miles_root"])
    argv, _, _ = miles_argv(config, rundir)
    stop = _Stop()
    signal.signal(signal.SIGINT, stop.handle)
    signal.signal(signal.SIGTERM, stop.handle)
    address = launch.get("submit")
    private = address is None
    try:
        announce_departures(rundir)
        env = runtime_env_vars(miles_root, config, os.environ, has_nvlink())
        print(f"miles job env: {json.dumps(env)}", flush=True)  # before the secrets join it
        env.update(secret_job_env(config))
        command = entrypoint(miles_root, argv, os.environ)
        if not private:
            return _run_job(rundir, address, command, env, stop, private)
        announce_machine_facts(rundir)  # this machine runs train.py: its bounds, before Ray
        missing = jobs_api_missing()
        write_status(rundir, state=State.STARTING, detail="starting a private Ray head")
        # without the Jobs API no runtime_env reaches Ray's workers: the head (whose raylet
        # starts them) gets the job's variables itself
        gcs, dashboard = _private_head(rundir, with_dashboard=missing is None,
                                       worker_env=None if missing is None else env)
        if missing is None:
            return _run_job(rundir, dashboard, command, env, stop, private)
        print(f"Ray's Jobs API is not installed here ({missing}): train.py runs as a child of "
              f"this supervisor against the private head at {gcs}", flush=True)
        return _run_direct(rundir, gcs, command, env, stop)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the run says it and why
        write_status(rundir, state=State.FAILED, ended=time.time(),
                     detail=f"miles run did not start: {type(exc).__name__}: {exc}")
        print(f"miles run did not start: {exc!r}", flush=True)
        return 1
    finally:
        sync(rundir, final=True)  # train.py has exited: its last rollout is complete
        if private:
            _stop_private_head()
            _end_leftovers()


DEPARTURES_ENV = "PPODECK_MILES_DEPARTURES"  # a JSON list of {"what", "why"}: set up by the host


def departures(environ: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """What this machine's miles setup changes against miles' own image, as its installer
    recorded it ($PPODECK_MILES_DEPARTURES names the file); [] when none is recorded.
    An unreadable record is itself a departure to show, never a silent nothing."""
    path = (environ if environ is not None else os.environ).get(DEPARTURES_ENV)
    if not path:
        return []
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return [{"what": f"${DEPARTURES_ENV}={path} could not be read",
                 "why": f"{type(exc).__name__}: {exc}"}]
    return [{"what": str(e.get("what")), "why": str(e.get("why"))} for e in entries
            if isinstance(e, dict)]


def departure_issues(environ: Mapping[str, str] | None = None) -> list[Issue]:
    """The departures as check()'s infos, added where a miles launch is judged (`validate
    --engine miles`, `run --engine miles`): check() itself reads no environment."""
    return [Issue("info", "miles.departure", (),
                  f"departure from miles' image, applied outside the miles checkout: "
                  f"{entry['what']}: {entry['why']}",
                  f"nothing to do; ${DEPARTURES_ENV} names the record of this machine's setup")
            for entry in departures(environ)]


def announce_departures(rundir: RunDir) -> None:
    """Each departure as a warning line in driver.log and a warning event (tail shows it)."""
    lines = [f"departure from miles' image (outside the miles checkout): {entry['what']}: "
             f"{entry['why']}" for entry in departures()]
    for line in lines:
        print(line, flush=True)
    events = [{"v": SCHEMA_VERSION, "ts": time.time(), "kind": Kind.LOG, "source": "miles",
               "level": "warning", "msg": line} for line in lines]
    if events:
        _append_events(rundir, events)


def announce_machine_facts(rundir: RunDir) -> None:
    """This machine kind's bounds (engine/host/probe.py: cached, or probed now for at most a
    couple of seconds) as a line in driver.log and an info event: the speed verdict
    (engine/run/bounds.py) holds miles' phase timers against them."""
    from ..host.kind import machine_kind
    from ..host.probe import start_probe

    line = start_probe(machine_kind()).line()
    print(line, flush=True)
    _append_events(rundir, [{"v": SCHEMA_VERSION, "ts": time.time(), "kind": Kind.LOG,
                             "source": "ppodeck", "level": "info", "msg": line}])


def _append_events(rundir: RunDir, events: list[dict[str, Any]]) -> None:
    from .watch import LOCK_FILE, locked

    with locked(rundir.path / LOCK_FILE), open(rundir.events_jsonl, "ab") as out:
        out.write(b"".join(encode_event(e) for e in events))


DIRECT_ENV = "PPODECK_MILES_DIRECT"  # 1: train.py as the supervisor's child, Jobs API or not


def jobs_api_missing() -> str | None:
    """None when Ray's Jobs API can run here, else why not: $PPODECK_MILES_DIRECT=1, or the
    import that fails (Ray's dashboard starts only when ray.dashboard.optional_deps imports)."""
    if os.environ.get(DIRECT_ENV) == "1":
        return f"{DIRECT_ENV}=1"
    try:
        import ray.dashboard.optional_deps  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc}: ray.dashboard.optional_deps does not import"
    return None


def _private_head(rundir: RunDir, with_dashboard: bool = True,
                  worker_env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """A Ray head of this run only, as miles' launchers start one (`ray start --head`), on
    127.0.0.1 with every visible GPU (and the Jobs API when `with_dashboard`). Every port is
    drawn free (two heads on one machine would otherwise share the job agent's 52365) and it is
    `--block`ed in a child process, so stopping that process takes the whole head down (Ray's
    reaper). `worker_env` joins the head's environment, which its workers inherit. Returns
    (the GCS address, the dashboard's http address)."""
    import tempfile

    from ..host.machine import visible_gpus
    from ..host.ports import free_port

    declared = os.environ.get(TEST_GPUS_ENV, "")
    gpus = int(declared) if declared.isdigit() and int(declared) > 0 else visible_gpus()
    dashboard, gcs = free_port(), free_port()
    temp_dir = tempfile.mkdtemp(prefix="ppdm-", dir="/tmp")  # short: socket paths live here
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
            "--node-ip-address", "127.0.0.1", "--port", str(gcs),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
            "--dashboard-agent-listen-port", str(free_port()),
            "--ray-client-server-port", str(free_port()), "--num-gpus", str(gpus),
            "--temp-dir", temp_dir, "--disable-usage-stats"]
    if not with_dashboard:
        argv += ["--include-dashboard", "false"]
    # loopback only (engine/driver/cluster.py loopback_only: why); no usage reporting
    env = {**os.environ, **(worker_env or {}), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=sys.stdout,
                            stderr=subprocess.STDOUT)
    _HEADS.append((head, temp_dir))
    address = f"http://127.0.0.1:{dashboard}"
    write_status(rundir, ray_head=address if with_dashboard else f"127.0.0.1:{gcs}")
    return f"127.0.0.1:{gcs}", address


_HEADS: list[tuple[subprocess.Popen[bytes], str]] = []
_SESSIONS: list[int] = []  # train.py's own session (direct runs)


def _end_leftovers() -> None:
    """End what outlived the head in this supervisor's and train.py's sessions: an SGLang
    server is a multiprocessing child of a Ray actor and can survive it, holding the GPU.
    Each one is named in the log; only processes of those sessions are touched, and this
    supervisor's own session only when it leads it (start_supervisor makes it so; run by hand
    from a shell it shares the shell's)."""
    sessions = set(_SESSIONS) | ({os.getpid()} if os.getsid(0) == os.getpid() else set())
    leftovers = [pid for pid, sid in _processes() if sid in sessions and pid != os.getpid()]
    for pid in leftovers:
        print(f"ending pid {pid} ({_cmdline(pid)}): still running after miles' Ray head "
              "stopped", flush=True)
        _signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(_alive(pid) for pid in leftovers):
        time.sleep(0.2)
    for pid in leftovers:
        if _alive(pid):
            _signal_pid(pid, signal.SIGKILL)


def _processes() -> list[tuple[int, int]]:
    """(pid, session id) of every process this user can read in /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 3 and fields[0] != "Z":
            found.append((int(entry.name), int(fields[3])))
    return found


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:120]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[:1] != ["Z"]


def _signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_private_head() -> None:
    import shutil

    for head, temp_dir in _HEADS:
        if head.poll() is None:
            head.terminate()  # `ray start --block` and its reaper take the head's processes
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
                head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _run_job(rundir: RunDir, address: str, command: str, env: dict[str, str], stop: _Stop,
             private: bool) -> int:
    from ..launch.jobs import client

    # (again) after ray.init, which installs handlers of its own
    signal.signal(signal.SIGINT, stop.handle)
    signal.signal(signal.SIGTERM, stop.handle)
    jobs = _wait_for_jobs_api(address) if private else client(address)
    if stop.requested:  # stopped while the head was starting: train.py never runs
        write_status(rundir, state=State.STOPPED, ended=time.time(),
                     detail="stopped at the user's request before miles' job was submitted")
        return 130
    _submit(jobs, rundir, command, env)
    write_status(rundir, state=State.RUNNING, miles_job={
        "address": address, "submission_id": rundir.id, "private_head": private},
                 detail=f"miles train.py running as Ray job {rundir.id} at {address}")
    written = 0
    asked_to_stop = 0
    while True:
        status = str(jobs.get_job_status(rundir.id)).rsplit(".", 1)[-1]
        written = _copy_log(rundir, jobs.get_job_logs(rundir.id), written)
        sync(rundir)
        if status in TERMINAL:
            return _finish(rundir, jobs, status)
        if stop.requested > asked_to_stop:
            asked_to_stop = stop.requested
            jobs.stop_job(rundir.id)
            update_status(rundir, _mark_stopping)
        time.sleep(POLL_S)


STOP_GRACE_S = 30.0  # after SIGINT, then SIGTERM to train.py's group, then SIGKILL


def _run_direct(rundir: RunDir, gcs: str, command: str, env: dict[str, str], stop: _Stop
                ) -> int:
    """train.py as a child in its own process group, on the private head at `gcs`: its
    output goes to driver.log, the dump is synced every POLL_S, and a stop interrupts it
    (SIGINT, then SIGTERM and SIGKILL to its group if it lingers)."""
    _wait_for_head(gcs)
    if stop.requested:
        write_status(rundir, state=State.STOPPED, ended=time.time(),
                     detail="stopped at the user's request before miles' train.py started")
        return 130
    # the head's loopback switch too: else ray.init looks for the GCS on the routable IP
    child_env = {**os.environ, **env, "RAY_ADDRESS": gcs, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    with open(rundir.driver_log, "ab") as log:
        child = subprocess.Popen(shlex.split(command), env=child_env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    write_status(rundir, state=State.RUNNING, miles_job={
        "address": gcs, "pid": child.pid, "private_head": True},
                 detail=f"miles train.py running (pid {child.pid}) on the private head {gcs}")
    _SESSIONS.append(child.pid)  # its own session: swept when the head is down
    asked_at: float | None = None
    signals = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    while child.poll() is None:
        sync(rundir)
        first_ask = stop.requested and asked_at is None
        overdue = asked_at is not None and time.monotonic() - asked_at > STOP_GRACE_S
        if signals and (first_ask or overdue):
            asked_at = time.monotonic()
            _signal_group(child.pid, signals.pop(0))
            update_status(rundir, _mark_stopping_direct)
        time.sleep(POLL_S)
    code = child.returncode
    if stop.requested:
        state, detail = State.STOPPED, "stopped at the user's request"
    elif code == 0:
        state, detail = State.SUCCEEDED, "miles train.py finished"
    else:
        state, detail = State.FAILED, f"miles train.py failed: exit code {code}"
    write_status(rundir, state=state, ended=time.time(), detail=detail)
    return {State.SUCCEEDED: 0, State.STOPPED: 130}.get(state, 3)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _wait_for_head(gcs: str, timeout: float = 120.0) -> None:
    """Until the private head's GCS port takes connections (or the head exits)."""
    host, port = gcs.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        dead = [head.returncode for head, _ in _HEADS if head.poll() is not None]
        if dead:
            raise MilesLaunchError(f"the private Ray head exited (code {dead[0]}) before it "
                                   "answered; its output is above in this log")
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise MilesLaunchError(f"the private Ray head at {gcs} did not answer in "
                                       f"{timeout:.0f} s: {exc}") from exc
            time.sleep(0.5)


def _wait_for_jobs_api(address: str, timeout: float = 180.0) -> Any:  # noqa: ANN401
    from ..launch.jobs import JobError, client

    deadline = time.monotonic() + timeout
    while True:
        dead = [head.returncode for head, _ in _HEADS if head.poll() is not None]
        if dead:
            raise MilesLaunchError(f"the private Ray head exited (code {dead[0]}) before its "
                                   "Jobs API answered; its output is above in this log")
        try:
            jobs = client(address)
            jobs.list_jobs()
            return jobs
        except (JobError, ConnectionError, RuntimeError) as exc:
            if time.monotonic() > deadline:
                raise MilesLaunchError(f"the private Ray head's Jobs API at {address} did not "
                                       f"answer in {timeout:.0f} s: {exc}") from exc
            time.sleep(0.5)


def _submit(jobs: Any, rundir: RunDir, command: str, env: dict[str, str],  # noqa: ANN401
            timeout: float = 120.0) -> None:
    """submit_job, retried while the head's job agent is still starting ("No available agent
    to submit job, please try again later", Ray's own words)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            jobs.submit_job(entrypoint=command, submission_id=rundir.id,
                            runtime_env={"env_vars": env},
                            metadata={"ppodeck_run": rundir.id, "ppodeck_engine": "miles"})
            return
        except RuntimeError as exc:
            if "try again" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _copy_log(rundir: RunDir, logs: str, written: int) -> int:
    if len(logs) > written:
        with open(rundir.driver_log, "a") as out:
            out.write(logs[written:])
    return max(written, len(logs))


def _mark_stopping(status: dict[str, Any]) -> dict[str, Any]:
    if status.get("state") in FINAL_STATES:
        return status
    return {**status, "state": State.STOPPING,
            "detail": "stop requested: the Ray job is being stopped"}


def _mark_stopping_direct(status: dict[str, Any]) -> dict[str, Any]:
    if status.get("state") in FINAL_STATES:
        return status
    return {**status, "state": State.STOPPING,
            "detail": "stop requested: miles' train.py is being interrupted (SIGINT, then "
                      f"SIGTERM and SIGKILL {STOP_GRACE_S:.0f} s apart)"}


def _finish(rundir: RunDir, jobs: Any, job_status: str) -> int:  # noqa: ANN401
    info = jobs.get_job_info(rundir.id)
    # the first line: Ray appends the job's last log lines, which driver.log already holds
    message = (getattr(info, "message", "") or "").strip().splitlines()[:1]
    message = message[0].rstrip(",") if message else ""
    state = TERMINAL[job_status]
    detail = {State.SUCCEEDED: "miles train.py finished",
              State.STOPPED: "stopped at the user's request"}.get(state, "miles train.py failed")
    write_status(rundir, state=state, ended=time.time(),
                 detail=f"{detail}: {message}" if message else detail)
    return 0 if state == State.SUCCEEDED else 3


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.miles.drive")
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("supervise", help="run miles' train.py for a run directory")
    run_cmd.add_argument("--run-dir", required=True)
    ns = parser.parse_args(argv)
    return supervise(RunDir(Path(ns.run_dir)))


if __name__ == "__main__":
    sys.exit(main())
