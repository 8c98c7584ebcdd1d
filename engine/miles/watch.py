"""A miles `--dump-details` directory watched as a PPO Deck run (LIGHT: stdlib only).

miles writes what a viewer needs under its dump directory (miles/dashboard/store.py):
`dashboard/metrics.jsonl` (one `log()` payload a line: ts, step_key, step, metrics, in the
metric vocabulary our panels use), `dashboard/phases/<hour>.jsonl` (timer intervals per rank:
name, t0, t1, node, gpus, rank, role; t1 == -1 marks an interval still open),
`dashboard/gpu_util/<hour>.jsonl` (NVML samples: ts, node, gpu, util, mem_mb, power_w) and
`dashboard/meta.json` (run name, start time, a few args).

Without `--use-miles-dashboard` miles still writes `events/<process>.jsonl` under the dump (its
EventLogger, miles/utils/audit_utils/event_logger/: one pydantic record a line, `timestamp` in
ISO 8601, `source` naming the process: main, rollout_manager, actor_cell<c>_rank<r>,
critic_cell<c>_rank<r>). Its `metric` records are what tracking.log() logged (the step key's
own value is among the metrics), the `perf/<timer>_time` sums per rollout included. Those are
read when the dump has no dashboard/metrics.jsonl (both hold the same metrics).

Read-only: nothing is ever written into the dump. A watched dump gets a run directory of its own
under PPO Deck's runs directory (`source.json` names the dump); there the streams are translated,
incrementally and exactly once, into our events (`events.jsonl`), so every reader (tail, health,
compare, plot, the monitor, runs ls) takes it like any run. `miles_sync.json` keeps the byte
offset reached in each stream file and the translation's state; a lock file serializes syncs.

Mapping (stated here because a reader of the events should know what was inferred):
- metrics: kept as they are (miles' names and steps). `rollout_id` is the step for
  `rollout/step` and `eval/step`; a `train/step` record belongs to the last rollout whose
  `rollout/step` metrics came before it (miles logs a rollout's metrics before training on it),
  or to `step // steps per rollout` when the run's config is known (a run PPO Deck launched).
- phases: every closed interval is a start and an end `phase` event carrying miles' rank, node,
  GPUs and role; names that mean the same as ours are renamed (rollout -> generate ...), the
  rest keep miles' name. The rollout id of a phase is the number of `rollout` intervals begun
  by then (miles' phases carry none).
- gpu: at most one `gpu` event per GPU_EVENT_S seconds of dump time (per 8 GPUs), with each
  GPU's last sample (memory used, utilization, power); NVML does not split memory by owner.
- samples: each `rollout_data/<id>.pt` becomes `samples/rollout_<id>.jsonl` (engine/run/samples.py),
  read with torch.load(weights_only=True) and the parquet column mirror (`map_samples`).
- events/ records (no dashboard): each `metric` record as a metrics event of the step key its
  metrics carry (rollout/step, train/step, eval/step); each `perf/<timer>_time` of a train
  process (and the rollout manager's perf/rollout_time) also as a phase that ends at the
  record's time and lasts the timer's sum for that rollout (`inferred_start`: miles logs the
  sum, not the start), with the process as its role.
Not mapped: engine_series (SGLang scrapes), topology, trajectories, train_data, eval rollouts.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host.files import atomic_write
from ..run.events import SCHEMA_VERSION, encode_event
from ..run.rundir import (
    RunDir,
    create_run_dir,
    pid_alive,
    read_status,
    runs_root,
    write_status,
)
from ..run.source import ENGINE, SOURCE_FILE, dump_of, is_driven, read_meta, source_record
from ..vocabulary import ACTIVE_STATES, FINAL_STATES, Kind, Phase, State, StepKey

SYNC_FILE = "miles_sync.json"  # offsets reached and the translation's state
LOCK_FILE = "miles_sync.lock"
DUMP_SUBDIR = "miles"  # a run PPO Deck launches on miles: --dump-details <run dir>/miles
IDLE_ENV = "PPODECK_MILES_IDLE_S"
IDLE_S = 600.0  # a dump unwritten this long is taken as ended (miles records no end state)
POLL_S = 1.0
GPU_EVENT_S = 10.0
OPEN_T1 = -1.0  # miles' PhaseEvent.OPEN_T1: the interval is still running

# miles' timer names that mean one of our phases under another name; the others keep miles'
# name (actor_train, critic_train and update_weights are the same words on both sides)
PHASE_NAMES = {"rollout": Phase.GENERATE, "save_model": Phase.SAVE, "eval_rollout": Phase.EVAL}
EVENTS_SUBDIR = "events"  # miles' EventLogger files: <dump>/events/<process>.jsonl
# perf/<name>_time values that are not one timer's sum: log_perf_data_raw derives step_time
DERIVED_TIMES = {"step"}


class MilesDumpError(Exception):
    """str() is the user-facing message, with a fix."""


def is_miles_dump(path: Path) -> bool:
    """What miles' --dump-details writes: a dashboard/ with metrics or meta, event records
    (events/*.jsonl), or rollout_data/."""
    path = Path(path)
    dashboard = path / "dashboard"
    return ((dashboard / "meta.json").is_file() or (dashboard / "metrics.jsonl").is_file()
            or any(_event_files(path)) or (path / "rollout_data").is_dir())


def _event_files(dump: Path) -> list[Path]:
    folder = Path(dump) / EVENTS_SUBDIR
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


LOOKED_FOR = ("dashboard/metrics.jsonl", "dashboard/meta.json", "events/*.jsonl",
              "rollout_data/")





# ------------------------------------------------------------------------------ registration


def find_registered(dump: Path, root: Path | None = None) -> RunDir | None:
    """The run directory already watching `dump` under the runs root, if any."""
    root = Path(root) if root is not None else runs_root()
    target = Path(dump).resolve()
    if not root.is_dir():
        return None
    for path in sorted(root.iterdir()):
        source = source_record(RunDir(path))
        if source and Path(source["dump"]).resolve() == target:
            return RunDir(path)
    return None


def register(dump: Path, root: Path | None = None, *, driven: bool = False,
             rundir: RunDir | None = None) -> RunDir:
    """A run directory of PPO Deck's own that watches `dump` (created unless given)."""
    dump = Path(dump).resolve()
    meta = read_meta(dump)
    name = str(meta.get("run_name") or dump.name)
    rundir = rundir or create_run_dir(f"miles-{name}", root)
    atomic_write(rundir.path / SOURCE_FILE, json.dumps(
        {"engine": ENGINE, "dump": str(dump), "driven": driven, "registered": time.time()},
        indent=2) + "\n")
    if not driven:
        start = meta.get("start_ts")
        started = start if isinstance(start, (int, float)) else None
        write_status(rundir, state=State.CREATED, detail=f"miles dump {dump} (read-only)",
                     preset=f"miles:{name}", created=time.time(), started=started, pid=None,
                     pgid=None, rollout_id=None, num_rollout=None, ended=None)
    return rundir


def open_dump(dump: Path, root: Path | None = None) -> tuple[RunDir, bool]:
    """The run directory watching `dump` (registered now if new), synced; and whether new."""
    if not is_miles_dump(dump):
        raise MilesDumpError(f"{dump} is not a miles --dump-details directory: it has none of "
                             f"{', '.join(LOOKED_FOR)}. Fix: pass the directory miles' "
                             "--dump-details named")
    found = find_registered(dump, root)
    rundir = found or register(dump, root)
    watch(rundir)
    return rundir, found is None


def find_or_open(name_or_path: str) -> RunDir:
    """A run by id, prefix or path (kept current when it watches a dump), or a miles dump
    opened as a run. Raises RunNotFound or MilesDumpError (str() is the message)."""
    from ..run.rundir import RunNotFound, find_run

    try:
        rundir = find_run(name_or_path)
    except RunNotFound:
        if not is_miles_dump(Path(name_or_path).expanduser()):
            raise
        return open_dump(Path(name_or_path).expanduser())[0]
    watch(rundir)
    return rundir


# ----------------------------------------------------------------------------------- liveness


def idle_seconds() -> float:
    try:
        return float(os.environ.get(IDLE_ENV) or IDLE_S)
    except ValueError:
        return IDLE_S


def last_write(dump: Path) -> float | None:
    """When the dump was last written, by its own records: the newest time stamp on the last
    line of each stream file (a copied or touched dump keeps them); the files' mtimes only
    when no stream holds a stamped record (a dump of rollout files alone)."""
    dump = Path(dump)
    streams = [p for p in _watched_files(dump) if p.suffix == ".jsonl" and p.is_file()]
    stamps = [s for s in (_last_stamp(p) for p in streams) if s is not None]
    if stamps:
        return max(stamps)
    mtimes = [p.stat().st_mtime for p in _watched_files(dump) if p.exists()]
    return max(mtimes) if mtimes else None


def _last_stamp(path: Path, tail_bytes: int = 65536) -> float | None:
    """The time stamp of a stream file's last complete record (ts, t1/t0 or timestamp)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - tail_bytes))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        stamp = record_time(record) if isinstance(record, dict) else None
        if stamp is not None:
            return stamp
    return None


def record_time(record: dict[str, Any]) -> float | None:
    """A record's time in seconds since the epoch: the dashboard's `ts` (or a phase's end,
    else start), or the EventLogger's ISO 8601 `timestamp`."""
    for key in ("ts", "t1", "t0"):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return float(value)
    stamp = record.get("timestamp")
    if isinstance(stamp, str):
        from datetime import UTC, datetime

        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            return None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return None


def _watched_files(dump: Path) -> Iterator[Path]:
    dashboard = dump / "dashboard"
    yield dashboard / "metrics.jsonl"
    for stream in ("phases", "gpu_util", "engine_series"):
        yield from (dashboard / stream).glob("*.jsonl")
    yield from _event_files(dump)
    yield from (dump / "rollout_data").glob("*.pt")


def is_live(dump: Path, now: float | None = None) -> bool:
    written = last_write(dump)
    return written is not None and (now or time.time()) - written < idle_seconds()


def watch(rundir: RunDir) -> None:
    """Bring the run up to date with its dump; keep a follower on it while the dump grows.

    A launched (driven) run is kept current by its supervisor; this only syncs it.
    """
    dump = dump_of(rundir)
    if dump is None:
        return
    sync(rundir)
    if is_driven(rundir):
        return
    status = read_status(rundir)
    if is_live(dump):
        if not _follower_alive(rundir, status):
            start_follower(rundir)
    elif status.get("state") != State.ENDED:
        _mark_ended(rundir, dump)


def _follower_alive(rundir: RunDir, status: dict[str, Any]) -> bool:
    pid = status.get("pid")
    return isinstance(pid, int) and status.get("host") == socket.gethostname() and \
        pid_alive(pid) and status.get("state") in ACTIVE_STATES


def _mark_ended(rundir: RunDir, dump: Path) -> None:
    written = last_write(dump)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(written)) if written else "never"
    write_status(rundir, state=State.ENDED, ended=written, pid=None, pgid=None,
                 detail=f"miles dump {dump} last written {when} (read-only; miles records no "
                        "final state). `ppodeck attach` follows it again if it grows")


def start_follower(rundir: RunDir) -> subprocess.Popen[bytes]:
    """A detached process that syncs the run while its dump grows (`runs ls` shows it running)."""
    repo = Path(__file__).resolve().parents[2]
    with open(rundir.path / "follower.log", "ab") as log:
        popen = subprocess.Popen(  # an argv list; its own session: closing a terminal is fine
            [sys.executable, "-m", "ppodeck.engine.miles.watch", "follow", "--run-dir",
             str(rundir.path.resolve())], cwd=repo, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    write_status(rundir, state=State.RUNNING, pid=popen.pid, pgid=popen.pid,
                 host=socket.gethostname(), ended=None,
                 detail=f"following miles dump {dump_of(rundir)} (read-only)")
    return popen


def stop_follower(rundir: RunDir, grace_s: float = 5.0) -> str:
    """`ppodeck stop` on a watched dump: end the follower that keeps the run current (miles
    itself is not PPO Deck's to stop), mark the run ended, and say what was done. The dump is
    left as it is; `ppodeck attach` or `tail --follow` follow it again."""
    import signal

    dump = dump_of(rundir)
    status = read_status(rundir)
    if not _follower_alive(rundir, status):
        return (f"run {rundir.id} watches the miles dump {dump} (read-only) and no follower is "
                "running; PPO Deck did not launch miles and does not stop it")
    pid = int(status["pid"])
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, signum)  # its own session (start_follower): the whole group
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pid_alive(pid):
            break
    write_status(rundir, state=State.ENDED, ended=time.time(), pid=None, pgid=None,
                 detail=f"follower of miles dump {dump} stopped at the user's request "
                        "(read-only; miles itself was not touched). `ppodeck attach` follows "
                        "it again")
    return (f"stopped the follower of run {rundir.id} (pid {pid}); the miles dump {dump} is "
            "left as it is, and miles, if it still writes there, is not PPO Deck's to stop")


def follow(rundir: RunDir, poll_s: float = POLL_S) -> str:
    """The follower's loop: sync until the dump has been idle for idle_seconds()."""
    dump = dump_of(rundir)
    if dump is None:
        raise MilesDumpError(f"{rundir.path} does not watch a miles dump ({SOURCE_FILE})")
    while True:
        sync(rundir)
        if read_status(rundir).get("state") in FINAL_STATES:
            return str(read_status(rundir).get("state"))  # ended by someone else (stop)
        if not is_live(dump):
            sync(rundir)
            _mark_ended(rundir, dump)
            return State.ENDED
        time.sleep(poll_s)


# ---------------------------------------------------------------------------------- translation


@dataclass
class _TranslationState:
    offsets: dict[str, int] = field(default_factory=dict)  # dump-relative path -> bytes read
    last_rollout: int | None = None
    rollout_starts: list[float] = field(default_factory=list)
    open_marks: list[str] = field(default_factory=list)  # phase keys already started
    lanes: dict[str, int] = field(default_factory=dict)  # "node:gpu" -> device index
    gpu_last: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpu_emitted_ts: float | None = None
    gpu_pending_ts: float | None = None
    meta_logged: bool = False
    samples_done: list[int] = field(default_factory=list)  # rollouts mapped into samples/

    @classmethod
    def load(cls, path: Path) -> _TranslationState:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def save(self, path: Path) -> None:
        atomic_write(path, json.dumps(self.__dict__) + "\n")


def sync(rundir: RunDir, steps_per_rollout: int | None = None, final: bool = False) -> int:
    """Append the events for what the dump gained since the last sync; returns how many.

    Only complete lines are read (a line miles is still writing waits for the next sync).
    `final`: miles has exited, so the last rollout's samples are complete too.
    """
    dump = dump_of(rundir)
    if dump is None:
        return 0
    if steps_per_rollout is None:
        steps_per_rollout = _steps_per_rollout(rundir)
    with locked(rundir.path / LOCK_FILE):
        state = _TranslationState.load(rundir.path / SYNC_FILE)
        known_rollout = state.last_rollout
        translator = _Translator(dump, state, steps_per_rollout)
        events = translator.run()
        events += map_samples(dump, rundir, state, final or not is_live(dump))
        if events:
            with open(rundir.events_jsonl, "ab") as out:
                out.write(b"".join(encode_event(e) for e in events))
        state.save(rundir.path / SYNC_FILE)
    if state.last_rollout is not None and state.last_rollout != known_rollout:
        write_status(rundir, rollout_id=state.last_rollout)
    return len(events)


def _steps_per_rollout(rundir: RunDir) -> int | None:
    """Optimizer steps per rollout from the run's config.toml, when PPO Deck launched it."""
    if not rundir.config_toml.is_file():
        return None
    try:
        from ..config import derive
        from ..host.machine import environment
        from ..presets import config_from_toml

        config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
        if config.get("use_dynamic_global_batch_size"):
            return None  # the steps per rollout vary: the order of the records decides
        return derive(config, environment()).actor_steps_per_rollout
    except Exception:  # noqa: BLE001 - any unreadable config: the record order decides
        return None


@contextmanager
def locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Translator:
    """One sync's pass over the dump's streams, from the offsets in `state` on."""

    def __init__(self, dump: Path, state: _TranslationState, steps_per_rollout: int | None
                 ) -> None:
        self.dump = dump
        self.state = state
        self.steps_per_rollout = steps_per_rollout
        self.events: list[dict[str, Any]] = []

    def run(self) -> list[dict[str, Any]]:
        if not self.state.meta_logged:
            self._meta()
        dashboard = self.dump / "dashboard"
        for record in self._records(dashboard / "metrics.jsonl"):
            self._metrics(record)
        if not (dashboard / "metrics.jsonl").is_file():  # the same metrics: read them once
            for path in _event_files(self.dump):
                for record in self._records(path):
                    self._event_record(record, path.stem)
        for path in _partitions(dashboard / "phases"):
            for record in self._records(path):
                self._phase(record)
        for path in _partitions(dashboard / "gpu_util"):
            for record in self._records(path):
                self._gpu(record)
        self.events.sort(key=lambda e: e["ts"])  # one time order across the streams
        return self.events

    def _emit(self, kind: str, ts: Any, **fields: Any) -> None:
        stamp = float(ts) if isinstance(ts, (int, float)) else time.time()
        self.events.append({"v": SCHEMA_VERSION, "ts": stamp, "kind": kind, "source": ENGINE,
                            **fields})

    def _records(self, path: Path) -> Iterator[dict[str, Any]]:
        """The complete new lines of a stream file as objects; a bad line becomes a log event."""
        key = str(path.relative_to(self.dump))
        offset = self.state.offsets.get(key, 0)
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self.state.offsets[key] = offset + end + 1
        for line in chunk[: end + 1].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                yield record
            elif line.strip():
                self._emit(Kind.LOG, None, level="warning",
                           msg=f"{self.dump / key}: skipped a line that is not a JSON object: "
                               f"{line[:120]!r}")

    def _meta(self) -> None:
        meta = read_meta(self.dump)
        self.state.meta_logged = True
        if not meta:
            return
        args = meta.get("args") if isinstance(meta.get("args"), dict) else {}
        shown = ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
        self._emit(Kind.LOG, meta.get("start_ts"), level="info",
                   msg=f"miles run {meta.get('run_name')!s} (dump {self.dump}); args: {shown}",
                   miles_args=args)

    # ---- metrics -------------------------------------------------------------------------

    def _metrics(self, record: dict[str, Any]) -> None:
        metrics, step_key, step = record.get("metrics"), record.get("step_key"), record.get("step")
        if not isinstance(metrics, dict):
            return
        rollout_id = self._rollout_of(step_key, step)
        self._emit(Kind.METRICS, record.get("ts"), step_key=step_key, step=step,
                   rollout_id=rollout_id, metrics=metrics)

    def _rollout_of(self, step_key: Any, step: Any) -> int | None:
        if not isinstance(step, int) or isinstance(step, bool):
            return self.state.last_rollout
        if step_key in (StepKey.ROLLOUT, StepKey.EVAL):
            self.state.last_rollout = max(self.state.last_rollout or 0, step)
            return step
        if step_key == StepKey.TRAIN and self.steps_per_rollout:
            rollout_id = step // self.steps_per_rollout
            self.state.last_rollout = max(self.state.last_rollout or 0, rollout_id)
            return rollout_id
        return self.state.last_rollout

    # ---- events/ (miles' EventLogger) ----------------------------------------------------

    def _event_record(self, record: dict[str, Any], process: str) -> None:
        """A `metric` record as metrics (and its perf timers as phases); other record types
        (weight checksums, witness ids, advantages) are not PPO Deck's to show."""
        metrics = record.get("metrics")
        if record.get("type") != "metric" or not isinstance(metrics, dict):
            return
        ts = record_time(record)
        step_key = _step_key_of(metrics)
        step = metrics.get(step_key) if step_key else None
        # the record's own rollout_id (the train processes' event context) is authoritative;
        # the rollout manager's records carry none, and their rollout/step says it
        own = record.get("rollout_id")
        if isinstance(own, int) and not isinstance(own, bool):
            self.state.last_rollout = max(self.state.last_rollout or 0, own)
            rollout_id = own
        else:
            rollout_id = self._rollout_of(step_key, step)
        self._emit(Kind.METRICS, ts, step_key=step_key, step=step, rollout_id=rollout_id,
                   metrics=metrics, process=process)
        if step_key == StepKey.ROLLOUT and ts is not None:
            self._timer_phases(metrics, ts, rollout_id, process, _role_of(record, process))

    def _timer_phases(self, metrics: dict[str, Any], end: float, rollout_id: Any,
                      process: str, role: str) -> None:
        for key, value in metrics.items():
            name = _timer_name(key, role)
            if name is None or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            where = {"role": role, "process": process, "miles_name": name,
                     "inferred_start": True}
            ours = PHASE_NAMES.get(name, name)
            self._emit(Kind.PHASE, end - float(value), name=ours, state="start",
                       rollout_id=rollout_id, **where)
            self._emit(Kind.PHASE, end, name=ours, state="end", rollout_id=rollout_id,
                       seconds=float(value), **where)

    # ---- phases --------------------------------------------------------------------------

    def _phase(self, record: dict[str, Any]) -> None:
        name, t0, t1 = record.get("name"), record.get("t0"), record.get("t1")
        if not isinstance(name, str) or not isinstance(t0, (int, float)) or \
                not isinstance(t1, (int, float)):
            return
        key = f"{name}|{record.get('node')}|{record.get('rank')}|{t0}"
        where = {"rank": record.get("rank"), "node": record.get("node"),
                 "gpus": record.get("gpus"), "role": record.get("role"), "miles_name": name}
        ours = PHASE_NAMES.get(name, name)
        if name == "rollout" and t0 not in self.state.rollout_starts:
            self.state.rollout_starts.append(t0)
            self.state.rollout_starts.sort()
        rollout_id = self._rollout_at(t0)
        if key not in self.state.open_marks:
            self._emit(Kind.PHASE, t0, name=ours, state="start", rollout_id=rollout_id, **where)
            if t1 == OPEN_T1:
                self.state.open_marks.append(key)
                return
        elif t1 == OPEN_T1:
            return  # the open marker again (a rewritten line): already started
        else:
            self.state.open_marks.remove(key)
        self._emit(Kind.PHASE, t1, name=ours, state="end", rollout_id=rollout_id,
                   seconds=t1 - t0, **where)

    def _rollout_at(self, ts: float) -> int | None:
        begun = sum(1 for start in self.state.rollout_starts if start <= ts)
        return begun - 1 if begun else None

    # ---- gpu -----------------------------------------------------------------------------

    def _gpu(self, record: dict[str, Any]) -> None:
        ts, node, gpu = record.get("ts"), record.get("node"), record.get("gpu")
        if not isinstance(ts, (int, float)) or not isinstance(gpu, int):
            return
        pending, last = self.state.gpu_pending_ts, self.state.gpu_emitted_ts
        # an event lists every GPU: on a large cluster they come less often (bounded file)
        every = GPU_EVENT_S * max(1, len(self.state.lanes) // 8)
        # a sample of a later instant closes the previous one: every GPU of it is in by now
        due = pending is not None and (last is None or pending - last >= every)
        if due and ts != pending:
            self._gpu_event(pending)
        lane = f"{node}:{gpu}"
        index = self.state.lanes.setdefault(lane, len(self.state.lanes))
        self.state.gpu_last[lane] = {
            "index": index, "node": node, "gpu": gpu,
            "used_bytes": int(record.get("mem_mb") or 0) << 20, "total_bytes": 0,
            "torch_reserved_bytes": 0, "non_torch_bytes": 0,
            "util": record.get("util"), "power_w": record.get("power_w")}
        self.state.gpu_pending_ts = float(ts)

    def _gpu_event(self, ts: float) -> None:
        self.state.gpu_emitted_ts = ts
        devices = sorted(self.state.gpu_last.values(), key=lambda d: d["index"])
        utils = " ".join(f"gpu{d['index']} {d['util']}%" for d in devices)
        self._emit(Kind.GPU, ts, devices=devices,
                   label=f"miles NVML sampler: memory used (not split by torch); util {utils}")


def _step_key_of(metrics: dict[str, Any]) -> str | None:
    """tracking.log() keeps its step key's value among the metrics: rollout/step, train/step
    or eval/step (a train record may carry rollout/step too: train/step is its axis)."""
    for key in (StepKey.TRAIN, StepKey.EVAL, StepKey.ROLLOUT):
        if key in metrics:
            return key
    return next((k for k in metrics if k.endswith("/step")), None)


def _role_of(record: dict[str, Any], process: str) -> str:
    source = record.get("source")
    component = source.get("component") if isinstance(source, dict) else None
    return str(component or process)


def _timer_name(key: str, role: str) -> str | None:
    """The miles Timer a perf metric sums, or None: every perf/<name>_time of a train process
    is one (log_perf_data_raw) but step_time; the rollout manager's timer is rollout_time."""
    if not (key.startswith("perf/") and key.endswith("_time")):
        return None
    name = key[len("perf/"):-len("_time")]
    if role == "rollout_manager":
        return name if name == "rollout" else None
    return None if name in DERIVED_TIMES else name


# ---------------------------------------------------------------------------------- samples

SETTLE_S = 2.0  # miles' torch.save is not atomic: a rollout file this fresh may be half written


def map_samples(dump: Path, rundir: RunDir, state: _TranslationState, ended: bool
                ) -> list[dict[str, Any]]:
    """Each trained rollout's `rollout_data/<id>.pt` (joined with `train_data/<id>_<rank>.pt`)
    as `<run>/samples/rollout_<id>.jsonl` (engine/run/samples.py).

    The text (prompt, response, label, score, status) comes from the rollout file, the
    per-token columns (token ids, rollout log-probs) from the `dashboard_columns` parquet
    mirror when there is one; what training used (the reward as trained, log-probs, values,
    returns, advantages, entropy, loss mask) from the train data of each rank, joined by
    miles' sample index. Every .pt is read with torch.load(weights_only=True), which unpickles
    no code. A rollout is mapped once it is trained: when the next rollout's file exists, or
    the run has `ended`. Returns log events for what could not be read.
    """
    files = _rollout_files(dump)
    latest = files[-1][0] if files else None
    fresh = [(rid, path) for rid, path in files
             if rid not in state.samples_done and (ended or rid != latest)
             and time.time() - path.stat().st_mtime >= SETTLE_S]
    logs: list[dict[str, Any]] = []
    for rollout_id, path in fresh:
        try:
            records = _sample_records(dump, rollout_id, path)
        except Exception as exc:  # noqa: BLE001 - one unreadable rollout must not stop the rest
            logs.append({"v": SCHEMA_VERSION, "ts": time.time(), "kind": Kind.LOG,
                         "source": ENGINE, "level": "warning",
                         "msg": f"samples of rollout {rollout_id} not shown: {path} could not "
                                f"be read safely ({type(exc).__name__}: {exc})"})
        else:
            from ..run.samples import write_rollout

            write_rollout(rundir.path, rollout_id, records)
        state.samples_done.append(rollout_id)
    return logs


def _rollout_files(dump: Path) -> list[tuple[int, Path]]:
    found = []
    for path in (dump / "rollout_data").glob("*.pt"):
        if path.stem.isdigit():  # eval_<id>.pt: evaluation samples, not a training rollout
            found.append((int(path.stem), path))
    return sorted(found)


def _sample_records(dump: Path, rollout_id: int, path: Path) -> list[Any]:
    import torch  # only here: a rollout file to read

    from ..run.samples import STATUSES, SampleRecord

    payload = torch.load(path, weights_only=True, map_location="cpu")
    columns = _token_columns(dump / "dashboard_columns" / f"rollout_{rollout_id}.parquet")
    trained = _train_rows(dump, rollout_id)
    records = []
    for position, sample in enumerate(payload.get("samples") or []):
        length = int(sample.get("response_length") or 0)
        tokens = columns.get(sample.get("index"), {})
        train = trained.get(sample.get("index"), {})
        token_ids = tokens.get("tokens") or sample.get("tokens") or []
        status = str(sample.get("status") or "completed")
        records.append(SampleRecord(
            rollout_id=rollout_id, index=position, group_index=sample.get("group_index"),
            prompt=_prompt_text(sample.get("prompt")), response=str(sample.get("response") or ""),
            label=sample.get("label"), reward=_number(train.get("rewards")),
            raw_reward=_number(sample.get("reward")),
            status=status if status in STATUSES else "completed", response_length=length,
            token_ids=list(token_ids[len(token_ids) - length:]) if length and token_ids
            else None,
            rollout_log_probs=_per_token(tokens.get("rollout_log_probs")
                                         or sample.get("rollout_log_probs"), length),
            **{ours: _per_token(train.get(theirs), length) for ours, theirs in _TRAIN_COLUMNS}))
    return records


# SampleRecord field <- miles' train-data column (per token, one tensor per sample)
_TRAIN_COLUMNS = (("log_probs", "log_probs"), ("values", "values"), ("returns", "returns"),
                  ("advantages", "advantages"), ("entropy", "entropy"),
                  ("loss_mask", "loss_masks"))


def _train_rows(dump: Path, rollout_id: int) -> dict[int, dict[str, Any]]:
    """miles' sample index -> what training saw of it, from every rank's train data (ranks
    holding the same samples, tensor-parallel peers, agree: the first one read is kept).
    Context-parallel slices (cp_size > 1) hold parts of each sample: not joined."""
    import torch

    rows: dict[int, dict[str, Any]] = {}
    for path in sorted((dump / "train_data").glob(f"{rollout_id}_*.pt")):
        shard = torch.load(path, weights_only=True, map_location="cpu")
        data = shard.get("rollout_data") or {}
        if shard.get("cp_size", 1) != 1 or "sample_indices" not in data:
            continue
        for i, index in enumerate(data["sample_indices"]):
            if index in rows:
                continue
            rows[index] = {key: _plain(values[i]) for key, values in data.items()
                           if isinstance(values, list) and len(values) > i}
    return rows


def _plain(value: Any) -> Any:  # noqa: ANN401
    """A tensor as a list (or a number); anything else as it is."""
    return value.tolist() if hasattr(value, "tolist") else value


def _token_columns(path: Path) -> dict[Any, dict[str, Any]]:
    """sample_index -> its per-token columns, from miles' parquet mirror ({} without one)."""
    if not path.is_file():
        return {}
    try:
        import pyarrow.parquet as pq
    except ImportError:  # the .pt holds the same columns
        return {}

    return {row["sample_index"]: row for row in pq.read_table(path).to_pylist()}


def _per_token(series: Any, length: int) -> list[Any] | None:  # noqa: ANN401
    values = list(series) if series is not None else None
    return values if values is not None and len(values) == length else None


def _number(value: Any) -> float | None:  # noqa: ANN401
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _prompt_text(prompt: Any) -> str:  # noqa: ANN401
    """A chat prompt (miles keeps the messages) as role-tagged lines."""
    if isinstance(prompt, list):
        return "\n".join(f"[{m.get('role')}] {m.get('content')}" if isinstance(m, dict)
                         else str(m) for m in prompt)
    return str(prompt or "")


def _partitions(directory: Path) -> list[Path]:
    """A partitioned stream's hourly files in time order, after a legacy flat file."""
    flat = directory.with_suffix(".jsonl")
    hourly = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    return ([flat] if flat.is_file() else []) + hourly


# ---------------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.miles.watch")
    sub = parser.add_subparsers(dest="command", required=True)
    follow_cmd = sub.add_parser("follow", help="sync a watched miles dump while it grows")
    follow_cmd.add_argument("--run-dir", required=True)
    ns = parser.parse_args(argv)
    state = follow(RunDir(Path(ns.run_dir)))
    print(f"miles dump followed into {ns.run_dir}: {state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
