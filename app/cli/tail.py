"""`ppodeck tail`: a run's events as lines (or JSON), followed while the run is live, with the
health judge's findings between them.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ...engine.run.bounds import SpeedWatch, speed_context
from ...engine.run.events import follow, read_events
from ...engine.run.pace import PaceWatch
from ...engine.run.rundir import (
    RunDir,
    driver_alive,
    read_status,
)
from ...engine.vocabulary import (
    EVENT_KINDS,
    FINAL_STATES,
    INIT_STEP_LABEL,
    Kind,
)
from .common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    RunArg,
    did_you_mean,
    find_run_or_fail,
    revive_follower_of,
)
from .common import err as _err
from .common import fail as _fail

if TYPE_CHECKING:
    from collections.abc import Callable

    from .health import TailJudge



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
            _fail(f"--kind {kind}: unknown event kind{did_you_mean(kind, EVENT_KINDS)} "
                  f"(kinds: {', '.join(EVENT_KINDS)})", EXIT_USAGE)
    rundir = find_run_or_fail(run_name)
    revive_follower_of(rundir)
    from .health import TailJudge

    judge = TailJudge(rundir)  # health findings are shown after the event that fired them
    lines = not (as_json or kinds)  # a filter asked for events only
    pace = _pace_watch(rundir) if lines else None
    speed = SpeedWatch(speed_context(rundir.path)) if lines else None
    show = _printer(as_json, set(kinds or ()), judge, pace, speed)
    if follow_:
        raise typer.Exit(_tail_follow(rundir, show, judge, speed))
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
        _show_speed_end(speed)


def _show_speed_end(speed: SpeedWatch | None) -> None:
    """The run ended: the verdict with its last rollout (engine/run/bounds.py)."""
    line = speed.end() if speed is not None else None
    if line is not None:
        typer.echo(line)


def _pace_watch(rundir: RunDir) -> PaceWatch:
    """The pace line against the forecast made at launch (engine/run/pace.py)."""
    return PaceWatch(read_status(rundir).get("forecast"))


def _printer(as_json: bool, kinds: set[str], judge: TailJudge | None = None,
             pace: PaceWatch | None = None, speed: SpeedWatch | None = None
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
        for watch in (pace, speed):
            line = watch.after(event) if watch is not None else None
            if line is not None:
                typer.echo(line)

    return show


def _tail_follow(rundir: RunDir, show: Callable[[dict[str, Any]], None],
                 judge: TailJudge, speed: SpeedWatch | None = None) -> int:
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
    _show_speed_end(speed)
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
    values = "  ".join(f"{k}={number_text(v)}" for k, v in (e.get("metrics") or {}).items())
    return f"{e.get('step_key', 'step')}={e.get('step')}  {values}"


def _format_phase(e: dict[str, Any]) -> str:
    took = f" ({e['seconds']:.2f} s)" if isinstance(e.get("seconds"), (int, float)) else ""
    parts = e.get("parts")
    if isinstance(parts, dict) and parts:  # a trainer's init: where its seconds went
        took += ": " + ", ".join(f"{k} {number_text(v)} s" for k, v in parts.items())
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
            f"{_gib(e.get('bytes'))} in {number_text(e.get('seconds'))} s{speed}")


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


def number_text(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"
