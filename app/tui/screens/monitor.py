"""Run monitor: reads a run directory (events.jsonl + status.json) or replays a recording.

It only reads, so closing it never stops the run. A thread worker tails the events file with
engine.run.events.follow and posts batches at most four times a second; the handler folds them
into RunState and hands the results down to the widgets.
"""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import get_current_worker

from ....engine.run.bounds import SpeedWatch, speed_context
from ....engine.run.pace import PaceWatch
from ....engine.run.state import RunState
from ....engine.vocabulary import FINAL_STATES, INIT_PHASE, INIT_STEP_LABEL, Kind, Metric, State
from ..errors import guard
from ..messages import EventsArrived, RunStatusRead, TailEnded
from ..widgets.footer import DeckFooter
from ..widgets.health import HealthPanel, HealthStrip
from ..widgets.log_tail import LogTail
from ..widgets.metric_chart import Line, MetricChart
from ..widgets.offload_panel import OffloadPanel
from ..widgets.phase_timeline import PhaseTimeline
from ..widgets.run_header import HeaderData, RunHeader
from ..widgets.speed_panel import SpeedPanel
from ..widgets.view_tabs import ViewTabs

FLUSH_S = 0.2  # at most five UI updates a second (bench: p95 lag 0.275 s at 0.25, 0.221 s at 0.2)
POLL_S = 0.05
MAX_PENDING = 20_000  # events held by the reader while the UI applies the previous batch
STATUS_EVERY_S = 1.0
REPLAY_SECONDS = 30.0  # a recording replays in about this long, whatever its real length

REWARD_CHART = "chart-reward"
EVAL_COLORS = ("cyan", "yellow", "orange", "magenta", "blue")
CHARTS = (
    (REWARD_CHART, "reward by rollout: mean, min, max (+ eval sets)", (
        Line(Metric.REWARD, "mean", "green"),
        Line(Metric.REWARD_MIN, "min", "gray"),
        Line(Metric.REWARD_MAX, "max", "gray"))),
    ("chart-value-loss", "critic value loss by critic step", (
        Line(Metric.VALUE_LOSS, "value loss", "orange"),)),
    ("chart-policy", "KL, clipfrac, kl_loss | entropy, expl. var (right)", (
        Line(Metric.PPO_KL, "ppo_kl", "red"),
        Line(Metric.PG_CLIPFRAC, "clipfrac", "magenta"),
        Line(Metric.KL_LOSS, "kl_loss", "blue"),  # logged only with --use-kl-loss
        Line(Metric.ENTROPY, "entropy", "cyan", right=True),
        Line(Metric.EXPLAINED_VARIANCE, "expl var", "yellow", right=True))),
    ("chart-response-len", "mean response length by rollout", (
        Line(Metric.RESPONSE_LEN, "mean len", "blue"),)),
)

CRITIC_CHARTS = ("chart-value-loss",)
CRITIC_KEYS = (Metric.EXPLAINED_VARIANCE,)


def run_uses_critic(run_dir: Path | None) -> bool:
    """From the run's resolved config.toml: GRPO builds no critic. True when unknown (a
    replay, an unreadable config): the critic charts then simply stay empty."""
    from ....engine.config import resolve
    from ....engine.host.machine import environment
    from ....engine.presets import PresetError, config_from_toml

    path = run_dir / "config.toml" if run_dir is not None else None
    if path is None or not path.is_file():
        return True
    try:
        config = config_from_toml(path.read_text(), path)
        return bool(resolve(config, environment())["use_critic"])
    except (OSError, PresetError, ValueError):
        return True


def charts_for(uses_critic: bool) -> tuple:
    """CHARTS, without the critic's charts and lines for a run without a critic (GRPO)."""
    if uses_critic:
        return CHARTS
    return tuple((chart_id, title, tuple(line for line in lines if line.key not in CRITIC_KEYS))
                 for chart_id, title, lines in CHARTS if chart_id not in CRITIC_CHARTS)


VIEWS = (("charts", "Charts"), ("gpu", "GPU / offload"), ("timeline", "Timeline / log"))

HELP = """\
## Run monitor
Reads the run directory only: closing this screen never stops the run.

- Charts: mean reward with min/max and each eval set's reward (--eval-interval), critic
  value loss, policy KL / clip fraction / KL loss (--use-kl-loss) against entropy / critic
  explained variance (right axis), mean response length.
- GPU / offload: where actor, critic and rollout weights live now, the last offload and
  onload (bytes, seconds, GB/s), memory per GPU including what torch does not see.
- Timeline: one bar per rollout in miles order (gen, rollout offload, critic, actor, save,
  weight sync, rollout onload).

Keys: `1` `2` `3` switch views on small terminals, `x` stops the run, `a` opens the run's
samples (each rollout's responses with per-token advantage, value, return, log-probs), `f` the
samples behind the latest health finding, `r` lists runs, `s` saves a screenshot (SVG) into
the run directory (the current directory for a replay).
"""


class MonitorScreen(Screen[None]):
    BINDINGS = [
        Binding("1", "view('charts')", "Charts", show=False),
        Binding("2", "view('gpu')", "GPU", show=False),
        Binding("3", "view('timeline')", "Timeline", show=False),
        Binding("x", "stop_run", "Stop run"),
        Binding("a", "samples", "Samples"),
        Binding("f", "finding_samples", "Finding's samples"),
        Binding("s", "screenshot", "Screenshot"),
        Binding("r", "app.open_runs", "Runs"),
        Binding("escape", "app.back", "Back"),
    ]
    HELP = HELP

    def __init__(self, run_dir: Path | None = None, replay: Path | None = None,
                 replay_speed: float | None = None, now: float | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.replay = replay
        self.replay_speed = replay_speed
        self.fixed_now = now  # tests freeze the clock of live runs
        self.state = RunState()
        self.pace = PaceWatch(None)  # its forecast arrives with status.json
        self.speed = SpeedWatch(speed_context(run_dir)) if run_dir is not None else None
        self.tail_ended: str | None = None  # why the tail worker stopped (None while reading)
        self.stop_reading = threading.Event()
        self.batch_applied = threading.Event()
        self.batch_applied.set()

    @property
    def title_text(self) -> str:
        if self.replay is not None:
            return f"replay of {self.replay}"
        return self.run_dir.name + self._engine_note if self.run_dir is not None else ""

    @functools.cached_property
    def _engine_note(self) -> str:
        """Which engine the run is: miles' own (a dump PPO Deck watches or launched)."""
        from ....engine.run.rundir import RunDir
        from ....engine.run.source import dump_of, is_driven

        rundir = RunDir(self.run_dir) if self.run_dir is not None else None
        dump = dump_of(rundir) if rundir is not None else None
        if dump is None:
            return ""
        how = "launched by PPO Deck" if is_driven(rundir) else "watched, read-only"
        return f"  ·  engine: miles ({how}; dump {dump})"

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield HealthStrip(id="health-strip")
        yield ViewTabs(*VIEWS, id="view-tabs")
        with Grid(id="monitor-body"):
            with Grid(id="pane-charts", classes="pane -active"):
                for chart_id, title, lines in charts_for(run_uses_critic(self.run_dir)):
                    yield MetricChart(title, lines, id=chart_id, classes="chart")
            with Vertical(id="pane-gpu", classes="pane"):
                yield OffloadPanel(id="offload-panel")
                yield SpeedPanel(id="speed-panel")
            with Vertical(id="pane-timeline", classes="pane"):
                yield Static("phase timeline", classes="panel-title")
                yield PhaseTimeline(id="phase-timeline")
                yield Static("health", classes="panel-title")
                yield HealthPanel(id="health-panel")
                yield Static("log", classes="panel-title")
                yield LogTail(id="log-tail")
        yield DeckFooter()

    def on_mount(self) -> None:
        if not self.query(OffloadPanel):
            # the app is closing under it: a quit typed ahead of the launch's own screen
            # removes the composed panels before this runs, and there is nothing to show
            return
        self._refresh_all({Kind.STATUS})
        self._refresh_speed()
        if self.replay is not None:
            self.replay_worker(self.replay)
        elif self.run_dir is not None:
            self.tail_worker(self.run_dir)
        self.set_interval(1.0, self._tick)

    def on_resize(self) -> None:
        compact = self.size.width < 140 or self.size.height < 40
        self.set_class(compact, "-compact")

    def on_unmount(self) -> None:
        self.stop_reading.set()
        self.batch_applied.set()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`x` only while there is a process to stop: not for a replay or a finished run."""
        if action == "stop_run":
            return self.run_dir is not None and not self.state.finished
        return True

    def action_stop_run(self) -> None:
        if self.run_dir is None:
            self.notify("a replay has no process to stop", severity="warning")
            return
        from .confirm import ConfirmDialog

        body = (f"Send SIGINT to the driver of {self.run_dir.name}? It stops after the "
                "current rollout; checkpoints already written are kept.")
        self.app.push_screen(ConfirmDialog("Stop run", body, "Stop run", "error",
                                           dialog_id="confirm-stop"), self._stop_confirmed)

    def _stop_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed or self.run_dir is None:
            return
        from ....engine.launch.local import stop_run
        from ....engine.run.rundir import RunDir

        try:
            self.notify(stop_run(RunDir(self.run_dir)), title="stop run")
        except OSError as exc:
            self.notify(f"could not stop {self.run_dir.name}: {exc}", severity="error")

    def action_screenshot(self) -> None:
        """The screen as SVG (Textual's export), for a report or an issue thread."""
        where = self.run_dir if self.run_dir is not None else Path.cwd()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        try:
            path = self.app.save_screenshot(f"screenshot-{stamp}.svg", str(where))
        except OSError as exc:
            self.notify(f"could not save a screenshot in {where}: {exc}", severity="error")
            return
        self.notify(f"saved {path}", title="screenshot")

    def action_samples(self) -> None:
        if self.run_dir is None:
            self.notify("a replay has no samples: attach a run directory", severity="warning")
            return
        from .samples import SamplesScreen

        self.app.push_screen(SamplesScreen(self.run_dir))

    def action_finding_samples(self) -> None:
        """The samples behind the latest health finding that has some."""
        from ....engine.run.samples import FINDING_VIEWS

        findings = [f for f in self.state.health if f.get("code") in FINDING_VIEWS
                    and f.get("rollout_id") is not None]
        if self.run_dir is None or not findings:
            why = "a replay has no samples" if self.run_dir is None else (
                "no health finding with samples behind it (see the health strip)")
            self.notify(why, severity="warning")
            return
        from .samples import SamplesScreen

        finding = findings[-1]
        sort, strip, why = FINDING_VIEWS[finding["code"]]
        rid = int(finding["rollout_id"])
        self.app.push_screen(SamplesScreen(self.run_dir, rid, sort, strip,
                                           note=f"{finding['code']} at rollout {rid}: {why}"))

    def action_view(self, view_id: str) -> None:
        tabs = self.query_one(ViewTabs)
        tabs.active = view_id

    # ---- workers: read only, post messages --------------------------------------------------

    @work(thread=True, exclusive=True, group="tail", exit_on_error=False)
    def tail_worker(self, run_dir: Path) -> None:
        try:
            self._tail(run_dir)
        except Exception as exc:  # unreadable file, permissions...: a sentence, not a traceback
            self.post_message(TailEnded(f"stopped reading {run_dir}: {exc}", failed=True))

    def _tail(self, run_dir: Path) -> None:
        from ....engine.run.events import follow
        from ....engine.run.rundir import RunDir, read_status

        rundir = RunDir(run_dir)
        worker = get_current_worker()
        batcher = _Batcher(self, _run_judge(run_dir), run_dir)
        last_status = 0.0
        final = False
        for batch in follow(rundir.events_jsonl, self.stop_reading, poll_s=POLL_S,
                            idle_batches=True, on_warning=batcher.warnings.append):
            if worker.is_cancelled:
                return
            batcher.add(batch)
            if time.monotonic() - last_status >= STATUS_EVERY_S:
                last_status = time.monotonic()
                status = read_status(rundir)
                self.post_message(RunStatusRead(status))
                final = status.get("state") in FINAL_STATES
                batcher.check_hang(rundir, status, final)
            batcher.flush_if_due()
            if final and not batch:  # finished and fully read: nothing more will come
                batcher.judge_last_rollout()
                batcher.flush(force=True)
                self.post_message(TailEnded(f"run {status.get('state')}"))
                return
        batcher.flush(force=True)

    @work(thread=True, exclusive=True, group="tail", exit_on_error=False)
    def replay_worker(self, path: Path) -> None:
        try:
            self._replay(path)
        except Exception as exc:
            self.post_message(TailEnded(f"cannot replay {path}: {exc}", failed=True))

    def _replay(self, path: Path) -> None:
        from ....engine.run.events import read_events
        from ....engine.run.health import HealthJudge

        events, warnings = read_events(path)
        batcher = _Batcher(self, HealthJudge(), None)  # a recording: default thresholds
        batcher.warnings.extend(warnings)
        speed = self.replay_speed
        if speed is None:
            span = (events[-1].get("ts", 0) - events[0].get("ts", 0)) if events else 0
            speed = max(10.0, span / REPLAY_SECONDS)
        start_wall, t0 = time.monotonic(), (events[0].get("ts", 0) if events else 0)
        for event in events:
            if self.stop_reading.is_set():
                return
            due = (event.get("ts", t0) - t0) / speed if speed > 0 else 0.0
            while (wait := due - (time.monotonic() - start_wall)) > 0:
                batcher.flush_if_due()  # what is due so far shows while we wait
                if self.stop_reading.wait(min(wait, FLUSH_S)):
                    return
            batcher.add([event])
        batcher.judge_last_rollout()
        batcher.flush(force=True)
        self.post_message(TailEnded("replay finished"))

    # ---- handlers: own all state changes ----------------------------------------------------

    @on(EventsArrived)
    def _events_arrived(self, message: EventsArrived) -> None:
        try:
            with guard(self, "showing new run events"):
                changed = self.state.apply(message.events)
                for event in message.events:
                    self.pace.after(event)
                    if self.speed is not None:
                        self.speed.after(event)
                self._refresh_speed()
                for warning in message.warnings:
                    self.notify(warning, severity="warning", timeout=6)
                self._refresh_all(changed)
        finally:
            self.batch_applied.set()  # the worker may post the next batch (bounded memory)

    @on(RunStatusRead)
    def _status_read(self, message: RunStatusRead) -> None:
        with guard(self, "reading status.json"):
            self.state.apply_status(message.status)
            if self.pace.forecast is None and message.status.get("forecast"):
                self.pace.forecast = message.status["forecast"]
            self._refresh_all({Kind.STATUS})

    @on(TailEnded)
    def _tail_ended(self, message: TailEnded) -> None:
        self.tail_ended = message.reason
        if message.failed:
            self.notify(message.reason, severity="error", title="monitor")

    def _tick(self) -> None:
        if not self.state.finished and self.replay is None and self.run_dir is not None:
            self._refresh_header()  # elapsed/ETA move with the wall clock while live

    def _now(self) -> float | None:
        if self.replay is not None or self.state.finished:
            return None  # event time: deterministic for finished runs and replays
        return self.fixed_now if self.fixed_now is not None else time.time()

    def _refresh_all(self, changed: set[str]) -> None:
        self._refresh_header()
        if Kind.METRICS in changed:
            self._add_eval_lines()
            for chart in self.query(MetricChart):
                chart.set_points({key: self.state.points(key) for key in chart.keys})
        panel = self.query_one(OffloadPanel)
        if changed & {Kind.OFFLOAD, Kind.GPU} or panel.move_plan != self.state.move_plan:
            s = self.state
            panel.show(s.where, s.last_offload, s.last_onload, s.devices, s.gpu_label,
                       s.rss_bytes, s.move_plan)
        if Kind.PHASE in changed:
            self.query_one(PhaseTimeline).show(self.state.phases, self.state.phase_means(),
                                               self.state.clock(self._now()),
                                               self.state.init_steps)
        if changed & {Kind.HEALTH, Kind.STATUS}:
            self.query_one(HealthStrip).show(self.state.health)
            self.query_one(HealthPanel).show(self.state.health)
        if Kind.LOG in changed:
            log_tail = self.query_one(LogTail)
            log_tail.append(self.state.new_logs(log_tail.shown_total), self.state.first_ts,
                            self.state.logs_total)

    def _refresh_speed(self) -> None:
        """The verdict (engine/run/bounds.py); a finished run's last rollout counts too."""
        if self.speed is None:
            return
        if self.state.finished:
            self.speed.end()
        self.query_one(SpeedPanel).show(self.speed.last or self.speed.fold.verdict(
            self.speed.ctx))

    def _add_eval_lines(self) -> None:
        """Each eval dataset's reward joins the reward chart once its first eval arrived."""
        if not self.state.eval_reward_keys:
            return
        base = next(lines for chart_id, _, lines in CHARTS if chart_id == REWARD_CHART)
        evals = tuple(Line(key, key, EVAL_COLORS[i % len(EVAL_COLORS)])
                      for i, key in enumerate(self.state.eval_reward_keys))
        self.query_one(f"#{REWARD_CHART}", MetricChart).set_lines(base + evals)

    def _refresh_header(self) -> None:
        s, now = self.state, self._now()
        if s.finished != getattr(self, "_finished_shown", None):
            self._finished_shown = s.finished
            self.refresh_bindings()  # `x` (stop) goes once the run has ended
        _, total = s.rollout_progress()
        state = s.state if s.state != State.UNKNOWN or self.replay is None else "replay"
        self.query_one(RunHeader).show(HeaderData(
            title=self.title_text, state=state, detail=s.detail, rollout_id=s.rollout_id,
            num_rollout=total, phase=_phase_shown(s), elapsed=s.elapsed(now), eta=s.eta(now),
            pace=self.pace.shown or ""))


def _phase_shown(s: RunState) -> str | None:
    """The current phase; during init, the step under way ("init: Ray start")."""
    step = s.current_init_step
    if s.current_phase == INIT_PHASE and step:
        return f"{INIT_PHASE}: {INIT_STEP_LABEL.get(step, step)}"
    return s.current_phase


def _run_judge(run_dir: Path):  # noqa: ANN202 - engine.run.health.HealthJudge, imported late
    """A judge with the run's thresholds ([health] of its preset) and config facts."""
    from ....engine.run.health import HealthJudge, run_facts, run_thresholds
    from ....engine.run.rundir import RunDir, read_status

    thresholds, _ = run_thresholds(run_dir, read_status(RunDir(run_dir)).get("preset"))
    return HealthJudge(thresholds, run_facts(run_dir)[0], run_dir)  # run_dir: reward stalls


class _Batcher:
    """Worker-side: collects events and posts them at most every FLUSH_S seconds.

    The worker waits until the previous batch was applied before posting the next one (and
    stops reading while MAX_PENDING events wait), so a million-event history streams through
    in bounded memory instead of piling up in the message queue.
    """

    def __init__(self, screen: MonitorScreen, judge=None, run_dir: Path | None = None  # noqa: ANN001
                 ) -> None:
        self.screen = screen
        self.judge = judge  # engine.run.health.HealthJudge: the monitor's reader judges health
        self.run_dir = run_dir  # findings are recorded there (health.jsonl, each once)
        self.batch_applied, self.stop_reading = screen.batch_applied, screen.stop_reading
        self.pending: list[dict] = []
        self.warnings: list[str] = []
        self.last_flush = 0.0

    def add(self, events: list[dict]) -> None:
        self.pending.extend(events)
        if self.judge is not None:
            self._findings(self.judge.feed(events))
        if len(self.pending) >= MAX_PENDING:
            self.flush(force=True)

    def judge_last_rollout(self) -> None:
        if self.judge is not None:
            self._findings(self.judge.finish())

    def check_hang(self, rundir, status: dict, final: bool) -> None:  # noqa: ANN001
        from ....engine.run.rundir import driver_alive

        if self.judge is not None and not final:
            self._findings(self.judge.check_hang(time.time(), driver_alive(rundir, status)))

    def _findings(self, findings: list) -> None:
        """Health findings join the batch as `health` events, at the time of the event that
        fired them; a run directory records them."""
        if not findings:
            return
        ts = self.judge.last_event_ts
        self.pending.extend(f.to_event(ts) for f in findings)
        if self.run_dir is not None:
            from ....engine.run.health import record_or_note

            self.warnings.extend(record_or_note(self.run_dir, findings))

    def flush_if_due(self) -> None:
        if time.monotonic() - self.last_flush >= FLUSH_S:
            self.flush()

    def flush(self, force: bool = False) -> None:
        if not self.pending and not self.warnings:
            return
        if not force and not self.batch_applied.is_set():
            return  # the UI is still applying the last batch: keep collecting
        while not self.batch_applied.wait(0.1):
            if self.stop_reading.is_set():
                return
        self.batch_applied.clear()
        self.screen.post_message(EventsArrived(self.pending, self.warnings))
        self.pending, self.warnings = [], []
        self.last_flush = time.monotonic()
