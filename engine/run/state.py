"""The one fold of a run's events: event batches in, bounded series and run state out.

Pure (stdlib only), so every reader shares it: the TUI monitor hands its results down to the
widgets, `ppodeck run`'s live progress renders it. `RunState.apply(batch)` is the only writer.
Memory is bounded whatever the run length: each metric keeps at most `series_capacity` buckets
(min/max/mean per bucket), logs and phase spans live in fixed-size deques.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..vocabulary import (
    FINAL_STATES,
    PHASE_START,
    Kind,
    State,
    StepKey,
    is_eval_reward,
)


class SeriesPoints(NamedTuple):
    xs: list[float]
    means: list[float]
    mins: list[float]
    maxs: list[float]


class Series:
    """A metric's history in at most `capacity` buckets.

    Each bucket covers `width` raw points and keeps the first x, the sum, min and max of y.
    When the buckets run out, neighbours merge pairwise and `width` doubles, so a spike is
    never averaged away: it survives in the bucket's max (or min).
    """

    __slots__ = ("capacity", "width", "xs", "sums", "mins", "maxs", "counts", "count", "last")

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = max(4, capacity - capacity % 2)
        self.width = 1
        self.xs: list[float] = []
        self.sums: list[float] = []
        self.mins: list[float] = []
        self.maxs: list[float] = []
        self.counts: list[int] = []
        self.count = 0
        self.last: float | None = None

    def __len__(self) -> int:
        return len(self.xs)

    def append(self, x: float, y: float) -> None:
        if not math.isfinite(y):
            return  # a NaN loss is worth a log line, not a broken axis
        self.count += 1
        self.last = y
        if self.counts and self.counts[-1] < self.width:
            self._add_to_open(y)
            return
        if len(self.xs) >= self.capacity:
            self._halve()
            if self.counts[-1] < self.width:
                self._add_to_open(y)
                return
        self.xs.append(x)
        self.sums.append(y)
        self.mins.append(y)
        self.maxs.append(y)
        self.counts.append(1)

    def _add_to_open(self, y: float) -> None:
        self.sums[-1] += y
        self.counts[-1] += 1
        if y < self.mins[-1]:
            self.mins[-1] = y
        elif y > self.maxs[-1]:
            self.maxs[-1] = y

    def _halve(self) -> None:
        pairs = range(0, len(self.xs) - 1, 2)
        odd = len(self.xs) % 2 == 1
        self.xs = [self.xs[i] for i in pairs] + (self.xs[-1:] if odd else [])
        self.sums = [self.sums[i] + self.sums[i + 1] for i in pairs] + (
            self.sums[-1:] if odd else [])
        self.mins = [min(self.mins[i], self.mins[i + 1]) for i in pairs] + (
            self.mins[-1:] if odd else [])
        self.maxs = [max(self.maxs[i], self.maxs[i + 1]) for i in pairs] + (
            self.maxs[-1:] if odd else [])
        self.counts = [self.counts[i] + self.counts[i + 1] for i in pairs] + (
            self.counts[-1:] if odd else [])
        self.width *= 2

    def points(self) -> SeriesPoints:
        means = [s / n for s, n in zip(self.sums, self.counts, strict=True)]
        return SeriesPoints(list(self.xs), means, list(self.mins), list(self.maxs))


@dataclass(frozen=True, slots=True)
class Move:
    """One offload or onload of a model (from an `offload` event)."""

    model: str
    direction: str
    where: str
    bytes: int
    seconds: float
    gbps: float | None
    noop: bool
    ts: float


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    used_bytes: int
    total_bytes: int
    torch_reserved_bytes: int
    non_torch_bytes: int


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    name: str
    rollout_id: int
    start: float
    end: float | None = None
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: float
    level: str
    source: str
    msg: str


def _num(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class RunState:
    """Everything the monitor shows, folded from events (and status.json when there is one)."""

    def __init__(self, series_capacity: int = 512, log_capacity: int = 500,
                 phase_capacity: int = 400, max_series: int = 256) -> None:
        self.series_capacity = series_capacity
        self.max_series = max_series
        self.series: dict[str, Series] = {}
        self.eval_reward_keys: list[str] = []  # eval/<dataset>, in the order first seen
        self.events_seen = 0
        self.events_skipped = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        # status: from `status` events, overridden by status.json (it alone knows "lost")
        self.event_state: str | None = None
        self.event_detail = ""
        self.file_status: dict[str, Any] = {}
        self.num_rollout: int | None = None
        self.rollout_id: int | None = None
        # phases
        self.phases: deque[PhaseSpan] = deque(maxlen=phase_capacity)
        self.open_phases: dict[str, PhaseSpan] = {}
        self.phase_totals: dict[str, list[float]] = {}  # name -> [seconds, count]
        self.last_ended_phase: str | None = None
        # init's steps (phase events with a parent), in the driver's order, apart from phases
        self.init_steps: list[PhaseSpan] = []
        self.init_parts: dict[str, dict[str, float]] = {}  # step -> {part: seconds}
        self._first_rollout: tuple[int, float] | None = None
        self._current_rollout: tuple[int, float] | None = None
        # placement and memory
        self.where: dict[str, str] = {}
        self.last_offload: dict[str, Move] = {}
        self.last_onload: dict[str, Move] = {}
        self.devices: tuple[Device, ...] = ()
        self.gpu_label = ""
        self.rss_bytes: int | None = None
        self.move_plan = ""  # the driver's `moves:` line: which train-state moves overlap
        # logs
        self.logs: deque[LogLine] = deque(maxlen=log_capacity)
        self.logs_total = 0
        # PPO health findings (`health` events the monitor's reader judged, engine/run/health.py)
        self.health: list[dict[str, Any]] = []

    # ---- ingest -----------------------------------------------------------------------------

    def apply(self, events: Iterable[Mapping[str, Any]]) -> set[str]:
        """Fold a batch of events in; return the kinds that changed (for selective redraws)."""
        changed: set[str] = set()
        handlers = self._handlers
        for event in events:
            try:
                kind = str(event.get("kind"))
                if kind == Kind.HEALTH:  # judged by the monitor's reader, not written by the run
                    self._on_health(event)
                    changed.add(kind)
                    continue
                handler = handlers.get(kind)
                if handler is None:
                    self.events_skipped += 1
                    continue
                ts = event.get("ts")
                if isinstance(ts, (int, float)):
                    if self.first_ts is None:
                        self.first_ts = float(ts)
                    self.last_ts = float(ts)
                handler(self, event)
                changed.add(kind)
                self.events_seen += 1
            except (AttributeError, TypeError, ValueError, KeyError):
                # one malformed event must not cost the rest of the batch
                self.events_skipped += 1
        return changed

    def apply_status(self, status: Mapping[str, Any]) -> None:
        """Take status.json (as engine.run.rundir.read_status returns it)."""
        self.file_status = dict(status)
        if status.get("num_rollout") is not None:
            self.num_rollout = _int(status["num_rollout"])
        if status.get("rollout_id") is not None and self.rollout_id is None:
            self.rollout_id = _int(status["rollout_id"])

    def _on_metrics(self, event: Mapping[str, Any]) -> None:
        metrics = event.get("metrics") or {}
        rollout_id = event.get("rollout_id")
        step = event.get("step", rollout_id)
        x = _num(step, float(self.events_seen))
        if isinstance(rollout_id, int) and rollout_id >= 0:
            self.rollout_id = max(self.rollout_id or 0, rollout_id)
        series = self.series
        if event.get("step_key") == StepKey.EVAL:
            self._note_eval_keys(metrics)
        for key, value in metrics.items():
            if not isinstance(value, (int, float)):
                continue
            target = series.get(key)
            if target is None:
                if len(series) >= self.max_series:
                    continue
                target = series[key] = Series(self.series_capacity)
            target.append(x, float(value))

    def _note_eval_keys(self, metrics: Mapping[str, Any]) -> None:
        for key in metrics:
            if is_eval_reward(key) and key not in self.eval_reward_keys:
                self.eval_reward_keys.append(key)

    def _on_phase(self, event: Mapping[str, Any]) -> None:
        if event.get("parent"):
            self._on_init_step(event)
            return
        name = str(event["name"])
        rollout_id = _int(event.get("rollout_id"), -1)
        ts = _num(event.get("ts"))
        if event.get("state") == PHASE_START:
            span = PhaseSpan(name, rollout_id, ts)
            self.open_phases.pop(name, None)
            self.open_phases[name] = span  # re-insert: the newest open phase is "current"
            self.phases.append(span)
            if rollout_id >= 0:
                self._rollout_started(rollout_id, ts)
            return
        opened = self.open_phases.pop(name, None)
        start = opened.start if opened else ts
        seconds = _num(event.get("seconds"), ts - start)
        done = PhaseSpan(name, rollout_id, start, ts, seconds)
        self._close_span(opened, done)
        self.last_ended_phase = name
        totals = self.phase_totals.setdefault(name, [0.0, 0])
        totals[0] += seconds
        totals[1] += 1

    def _on_init_step(self, event: Mapping[str, Any]) -> None:
        name, ts = str(event["name"]), _num(event.get("ts"))
        if event.get("state") == PHASE_START:
            self.init_steps.append(PhaseSpan(name, -1, ts))
            return
        opened = next((i for i in range(len(self.init_steps) - 1, -1, -1)
                       if self.init_steps[i].name == name and self.init_steps[i].end is None),
                      None)
        start = self.init_steps[opened].start if opened is not None else ts
        done = PhaseSpan(name, -1, start, ts, _num(event.get("seconds"), ts - start))
        if opened is None:
            self.init_steps.append(done)
        else:
            self.init_steps[opened] = done
        parts = event.get("parts")
        if isinstance(parts, Mapping):
            self.init_parts[name] = {str(k): _num(v) for k, v in parts.items()}

    def _close_span(self, opened: PhaseSpan | None, done: PhaseSpan) -> None:
        # the open span is nearly always among the last few; search from the end
        for i in range(len(self.phases) - 1, max(len(self.phases) - 16, -1), -1):
            if self.phases[i] is opened:
                self.phases[i] = done
                return
        self.phases.append(done)

    def _rollout_started(self, rollout_id: int, ts: float) -> None:
        if self._current_rollout and self._current_rollout[0] >= rollout_id:
            return
        self._current_rollout = (rollout_id, ts)
        if self._first_rollout is None:
            self._first_rollout = (rollout_id, ts)
        self.rollout_id = rollout_id

    def _on_offload(self, event: Mapping[str, Any]) -> None:
        move = Move(model=str(event["model"]), direction=str(event.get("direction", "")),
                    where=str(event.get("where", "")), bytes=_int(event.get("bytes")),
                    seconds=_num(event.get("seconds")),
                    gbps=None if event.get("gbps") is None else _num(event.get("gbps")),
                    noop=bool(event.get("noop", False)), ts=_num(event.get("ts")))
        self.where[move.model] = move.where
        # a no-op (CPU run) is still shown, as a no-op with the bytes that would have moved
        target = self.last_offload if move.direction == "offload" else self.last_onload
        target[move.model] = move

    def _on_gpu(self, event: Mapping[str, Any]) -> None:
        self.gpu_label = str(event.get("label", ""))
        self.devices = tuple(
            Device(index=_int(d.get("index")), used_bytes=_int(d.get("used_bytes")),
                   total_bytes=_int(d.get("total_bytes")),
                   torch_reserved_bytes=_int(d.get("torch_reserved_bytes")),
                   non_torch_bytes=_int(d.get("non_torch_bytes")))
            for d in event.get("devices") or ())
        if event.get("rss_bytes") is not None:
            self.rss_bytes = _int(event["rss_bytes"])

    def _on_status(self, event: Mapping[str, Any]) -> None:
        self.event_state = str(event.get("state", ""))
        self.event_detail = str(event.get("detail", ""))
        if event.get("num_rollout") is not None:
            self.num_rollout = _int(event["num_rollout"])

    def _on_log(self, event: Mapping[str, Any]) -> None:
        if event.get("move_plan"):
            self.move_plan = str(event.get("msg", ""))
        self.logs.append(LogLine(_num(event.get("ts")), str(event.get("level", "info")),
                                 str(event.get("source", "")), str(event.get("msg", ""))))
        self.logs_total += 1

    def _on_health(self, event: Mapping[str, Any]) -> None:
        if len(self.health) < 500:  # one per episode; a pathological run must stay bounded
            self.health.append(dict(event))

    _handlers = {Kind.METRICS: _on_metrics, Kind.PHASE: _on_phase, Kind.OFFLOAD: _on_offload,
                 Kind.GPU: _on_gpu, Kind.STATUS: _on_status, Kind.LOG: _on_log}

    # ---- read -------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return str(self.file_status.get("state") or self.event_state or State.UNKNOWN)

    @property
    def detail(self) -> str:
        return str(self.file_status.get("detail") or self.event_detail or "")

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def current_phase(self) -> str | None:
        if not self.open_phases or self.finished:
            return None
        return next(reversed(self.open_phases))

    @property
    def current_init_step(self) -> str | None:
        """The init step under way (None once init is over or the run has ended)."""
        if self.finished or not self.init_steps or self.init_steps[-1].end is not None:
            return None
        return self.init_steps[-1].name

    def rollout_progress(self) -> tuple[int, int | None]:
        """(rollouts begun or done, N): 1-based while running, N/N once succeeded."""
        begun = 0 if self.rollout_id is None else self.rollout_id + 1
        if self.state == State.SUCCEEDED and self.num_rollout:
            begun = self.num_rollout
        return begun, self.num_rollout

    def _start_ts(self) -> float | None:
        started = self.file_status.get("started")
        return float(started) if isinstance(started, (int, float)) else self.first_ts

    def clock(self, now: float | None) -> float | None:
        """The run's "now": event time for finished runs and replays, wall time when live."""
        if self.finished:
            ended = self.file_status.get("ended")
            return float(ended) if isinstance(ended, (int, float)) else self.last_ts
        return now if now is not None else self.last_ts

    def elapsed(self, now: float | None = None) -> float | None:
        start, end = self._start_ts(), self.clock(now)
        if start is None or end is None:
            return None
        return max(0.0, end - start)

    def seconds_per_rollout(self) -> float | None:
        first, current = self._first_rollout, self._current_rollout
        if not first or not current or current[0] <= first[0]:
            return None
        return (current[1] - first[1]) / (current[0] - first[0])

    def eta(self, now: float | None = None) -> float | None:
        if self.finished:
            return 0.0
        per, current, clock = self.seconds_per_rollout(), self._current_rollout, self.clock(now)
        if per is None or current is None or clock is None or not self.num_rollout:
            return None
        remaining = (self.num_rollout - current[0]) * per - (clock - current[1])
        return max(0.0, remaining)

    def phase_means(self) -> dict[str, float]:
        return {name: total / count for name, (total, count) in self.phase_totals.items()
                if count}

    def rollout_spans(self, rollout_id: int) -> list[PhaseSpan]:
        return [span for span in self.phases if span.rollout_id == rollout_id]

    def new_logs(self, shown_total: int) -> list[LogLine]:
        """Log lines appended since a reader had seen `shown_total` of them."""
        fresh = min(self.logs_total - shown_total, len(self.logs))
        return list(self.logs)[-fresh:] if fresh > 0 else []

    def latest(self, key: str) -> float | None:
        """The metric's last finite value (null and NaN points are skipped)."""
        series = self.series.get(key)
        return series.last if series is not None else None

    def eval_rewards(self) -> dict[str, float]:
        """Each eval set's latest mean reward, in the order the sets were first seen."""
        return {key: value for key in self.eval_reward_keys
                if (value := self.latest(key)) is not None}

    def points(self, key: str) -> SeriesPoints | None:
        series = self.series.get(key)
        return series.points() if series is not None and len(series) else None


def rollout_text(rollout_id: int | None, num_rollout: int | None) -> str:
    """One numbering for every front end: rollout ids are 0-based, as in events, `samples
    --rollout`, `health` and `compare`; the count done follows. "3 (4/10)": rollout 3 under way
    or done, 4 of 10 begun; "- (0/10)" before the first."""
    begun = 0 if rollout_id is None else rollout_id + 1
    total = "?" if num_rollout is None else str(num_rollout)
    return f"{'-' if rollout_id is None else rollout_id} ({begun}/{total})"
