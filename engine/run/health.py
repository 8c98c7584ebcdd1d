"""PPO health: rules judged from a run's event stream by a reader, never by the driver.

miles documents what to watch (docs/user-guide/monitoring.md, "What to watch") and enforces
none of it. Here each rule reads the metrics the engine already emits, per rollout, and fires a
`Finding` (a stable code, the value, the threshold, the rollout, a fix) once when its condition
starts to hold; it re-arms when the condition clears. Past runs can be judged the same way.

Where findings go: `<run_dir>/health.jsonl`, one `health` event per finding, never into
events.jsonl (the driver alone appends there). Several readers may judge the same run at once
(`ppodeck health`, `tail`, `runs ls`, the TUI monitor): each finding has an id
(`code[:metric]@rollout`) that is the same for every reader, and `record()` appends under an
exclusive lock only the ids the file does not hold yet, so nothing is written twice.

Thresholds default to miles' documented ones where it gives a number (clip fraction 0.5) and to
PPO Deck's otherwise; a preset's `[health]` table overrides them (engine/config/health.py).
LIGHT: stdlib only (plus engine.config / engine.presets, imported where needed).
"""

from __future__ import annotations

import fcntl
import json
import math
import statistics
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..config.health import (
    BY_CODE,
    HealthConfigError,
    Thresholds,
    health_toml,
    parse_health_table,
)
from ..vocabulary import Kind, Metric, Phase, State
from .bounds import OFFLOAD, ONLOAD, SpeedContext, SpeedFold
from .events import SCHEMA_VERSION, encode_event, read_events
from .pace import PhaseTimes, judge_pace

HEALTH_FILE = "health.jsonl"
HEALTH_SNAPSHOT = "health.toml"  # the [health] table of the preset a run was launched from
LEVELS = ("ok", "warning", "error")

# the metrics the rules judge (declared in engine/vocabulary.py, emitted by the engine)
CLIPFRAC = Metric.PG_CLIPFRAC
KL_KEYS = (Metric.KL_LOSS, Metric.PPO_KL)
ENTROPY = Metric.ENTROPY
GRAD_NORM = Metric.GRAD_NORM
EXPLAINED_VAR = Metric.EXPLAINED_VARIANCE
VALUE_LOSS = Metric.VALUE_LOSS
TRUNCATED = Metric.TRUNCATED
RESPONSE_LEN = Metric.RESPONSE_LEN
REWARD = Metric.REWARD
LOGPROB_GAP = Metric.LOGPROB_GAP
LOSSES = (Metric.LOSS, VALUE_LOSS)


@dataclass(frozen=True)
class RunFacts:
    """What the rules need from the run's resolved config."""

    clip_grad: float | None = 1.0
    num_critic_only_steps: int = 0
    rollout_max_response_len: int | None = None
    use_critic: bool = True
    forecast: Mapping[str, Any] | None = None  # status.json's, from launch (engine/run/pace.py)
    speed: SpeedContext | None = None  # machine facts and shape (engine/run/bounds.py)

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> RunFacts:
        return cls(clip_grad=args["clip_grad"],
                   num_critic_only_steps=int(args["num_critic_only_steps"] or 0),
                   rollout_max_response_len=args["rollout_max_response_len"],
                   use_critic=bool(args["use_critic"]))


@dataclass(frozen=True)
class Finding:
    code: str
    level: str  # warning | error
    metric: str
    value: float
    threshold: float
    rollout_id: int | None
    message: str
    fix: str

    @property
    def id(self) -> str:
        return f"{self.code}:{self.metric}@{self.rollout_id}"

    def to_event(self, ts: float | None = None) -> dict[str, Any]:
        return {"v": SCHEMA_VERSION, "ts": time.time() if ts is None else ts, "kind": Kind.HEALTH,
                "id": self.id, **asdict(self)}

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Finding:
        return cls(**{f.name: event[f.name] for f in fields(cls)})

    def line(self) -> str:
        where = "" if self.rollout_id is None else f" rollout {self.rollout_id}:"
        return f"{self.level} {self.code}{where} {self.message}. Fix: {self.fix}"




@dataclass
class _Rollout:
    """The metric values of one rollout (every step of it), by name."""

    rollout_id: int
    values: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: set[str] = field(default_factory=set)

    def add(self, metrics: Mapping[str, Any]) -> None:
        for key, value in metrics.items():
            if isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.values.setdefault(key, []).append(float(value))
            elif value is None and key in LOSSES:
                self.nonfinite.add(key)  # the writer turns NaN/inf into null

    def mean(self, key: str) -> float | None:
        values = self.values.get(key)
        return statistics.fmean(values) if values else None


class HealthJudge:
    """Feed it event batches in order; it returns the findings each batch made fire.

    A rollout is judged once an event of a later rollout arrives (its metrics come from
    several processes, in any order), or at `finish()` when the run has ended.
    """

    def __init__(self, thresholds: Thresholds | None = None, facts: RunFacts | None = None,
                 run_dir: Path | None = None) -> None:
        self.t = thresholds or Thresholds()
        self.facts = facts or RunFacts()
        self.run_dir = run_dir  # where the reward phase's progress is (a live run)
        self.findings: list[Finding] = []
        self.active: dict[str, Finding] = {}  # id prefix (code:metric) -> the finding, live
        self._judged: set[int] = set()  # a rollout whose records arrive late is judged again
        self.last_event_ts: float | None = None
        self.last_rollout_id: int | None = None
        self._open: dict[int, _Rollout] = {}
        self._history: dict[str, deque[float]] = {}  # per-rollout means, newest last
        self._grad_at_clip = 0
        self._entropy_first: tuple[int, float] | None = None
        self._ev_below = 0
        self._value_loss_best: float | None = None
        self._value_loss_above = 0
        self._seen_ids: set[str] = set()
        self._phases = PhaseTimes()
        self._speed = SpeedFold()

    # ---- ingest -----------------------------------------------------------------------------

    def feed(self, events: Iterable[Mapping[str, Any]]) -> list[Finding]:
        fired: list[Finding] = []
        for event in events:
            try:
                fired += self._feed_one(event)
            except (AttributeError, TypeError, ValueError, KeyError):
                continue  # a malformed event is tail's to report, not a health problem
        return fired

    def _feed_one(self, event: Mapping[str, Any]) -> list[Finding]:
        ts = event.get("ts")
        if isinstance(ts, (int, float)):
            self.last_event_ts = float(ts)
        self._speed.add(event)  # offload moves carry no rollout id: the fold places them
        rollout_id = event.get("rollout_id")
        if not isinstance(rollout_id, int) or isinstance(rollout_id, bool) or rollout_id < 0:
            return []
        self.last_rollout_id = max(self.last_rollout_id or 0, rollout_id)
        fired = self._close_before(rollout_id)
        self._phases.add(event)
        if event.get("kind") == Kind.METRICS and isinstance(event.get("metrics"), dict):
            metrics = event["metrics"]
            self._open.setdefault(rollout_id, _Rollout(rollout_id)).add(metrics)
            if GRAD_NORM in metrics:
                fired += self._grad_norm_step(metrics[GRAD_NORM], rollout_id)
        return fired

    def finish(self) -> list[Finding]:
        """The run ended: judge the rollouts still open."""
        return self._close_before(None)

    def _close_before(self, rollout_id: int | None) -> list[Finding]:
        fired: list[Finding] = []
        for rid in sorted(self._open):
            if rollout_id is not None and rid >= rollout_id:
                break
            fired += self._judge_rollout(self._open.pop(rid))
        return fired

    # ---- per-rollout rules -------------------------------------------------------------------

    def _judge_rollout(self, r: _Rollout) -> list[Finding]:
        self._judged.add(r.rollout_id)
        means = {key: r.mean(key) for key in r.values}
        checks = [
            self._nonfinite(r),
            self._clipfrac(r.rollout_id, means.get(CLIPFRAC)),
            *(self._kl_jump(r.rollout_id, key, means.get(key)) for key in KL_KEYS),
            self._entropy(r.rollout_id, means.get(ENTROPY)),
            self._explained_variance(r.rollout_id, r.values.get(EXPLAINED_VAR)),
            self._value_loss(r.rollout_id, means.get(VALUE_LOSS)),
            self._truncation(r.rollout_id, means.get(TRUNCATED), means.get(RESPONSE_LEN)),
            self._reward_flat(r.rollout_id, means.get(REWARD)),
            self._logprob_gap(r.rollout_id, means.get(LOGPROB_GAP)),
            self._pace(r.rollout_id),
            self._speed_below_bound(r.rollout_id),
        ]
        return [f for group in checks for f in group]

    def _nonfinite(self, r: _Rollout) -> list[Finding]:
        out = []
        for key in sorted(r.nonfinite):
            out += self._set("health.nonfinite_loss", key, r.rollout_id, True, math.nan, 0.0,
                             f"{key} was NaN or infinite",
                             "lower --lr (and --critic-lr), check --clip-grad, look for "
                             "empty responses or rewards out of range")
        return out

    def _clipfrac(self, rid: int, value: float | None) -> list[Finding]:
        if value is None:
            return []
        limit = self.t.clipfrac_max
        return self._set("health.clipfrac_high", CLIPFRAC, rid, value > limit, value, limit,
                         f"{CLIPFRAC} {value:.3g} > {limit:g}: the policy moves too fast",
                         "lower --lr, or take fewer optimizer steps per rollout "
                         "(a larger --global-batch-size)")

    def _kl_jump(self, rid: int, key: str, value: float | None) -> list[Finding]:
        if value is None:
            return []
        history = self._history.setdefault(key, deque(maxlen=self.t.kl_jump_window))
        level = abs(value)
        fired: list[Finding] = []
        if len(history) >= min(3, self.t.kl_jump_window):
            recent = statistics.median(history)
            limit = max(self.t.kl_jump_factor * recent, self.t.kl_jump_floor)
            fired = self._set("health.kl_jump", key, rid, level > limit, level, limit,
                              f"|{key}| {level:.3g} jumped above {self.t.kl_jump_factor:g}x "
                              f"its recent median {recent:.3g}",
                              "lower --lr; with --use-kl-loss raise --kl-loss-coef; check "
                              "that the rollout weights were updated (weight sync log)")
        history.append(level)
        return fired

    def _entropy(self, rid: int, value: float | None) -> list[Finding]:
        if value is None or (self._entropy_first is None and value <= 0.0):
            return []  # 0 from the start: the entropy is not computed (miles logs 0)
        if self._entropy_first is None:
            self._entropy_first = (rid, value)
            return []
        first_rid, first = self._entropy_first
        limit = self.t.entropy_collapse_ratio * first
        too_fast = rid - first_rid <= self.t.entropy_collapse_rollouts
        return self._set("health.entropy_collapse", ENTROPY, rid, too_fast and value < limit,
                         value, limit,
                         f"{ENTROPY} {value:.3g} fell below {self.t.entropy_collapse_ratio:g}x "
                         f"its first value {first:.3g} within {rid - first_rid} rollouts",
                         "raise --entropy-coef, lower --lr, or raise --rollout-temperature")

    def _grad_norm_step(self, value: Any, rid: int) -> list[Finding]:
        clip = self.facts.clip_grad
        if not clip or not isinstance(value, (int, float)) or not math.isfinite(value):
            return []
        at_clip = value >= clip
        self._grad_at_clip = self._grad_at_clip + 1 if at_clip else 0
        n = self.t.grad_norm_clip_steps
        return self._set("health.grad_norm_at_clip", GRAD_NORM, rid, self._grad_at_clip >= n,
                         float(value), clip,
                         f"{GRAD_NORM} >= --clip-grad {clip:g} for {self._grad_at_clip} "
                         "steps in a row",
                         "lower --lr, or raise --lr-warmup-iters; a larger --clip-grad only "
                         "hides it", keep_active=at_clip)

    def _explained_variance(self, rid: int, values: list[float] | None) -> list[Finding]:
        if not values or not self.facts.use_critic or rid < self.facts.num_critic_only_steps:
            return []  # null (undefined) neither counts nor resets
        value = values[-1]
        self._ev_below = self._ev_below + 1 if value < 0 else 0
        n = self.t.explained_variance_rollouts
        return self._set("health.explained_variance_negative", EXPLAINED_VAR, rid,
                         self._ev_below >= n, value, 0.0,
                         f"{EXPLAINED_VAR} {value:.3g} < 0 for {self._ev_below} rollouts after "
                         "the critic-only warmup: the critic predicts worse than a constant",
                         "raise --num-critic-only-steps, raise --critic-lr (or lower it if the "
                         "value loss oscillates), check that --critic-load holds a value head")

    def _value_loss(self, rid: int, value: float | None) -> list[Finding]:
        if value is None:
            return []
        best = self._value_loss_best
        self._value_loss_best = value if best is None else min(best, value)
        if best is None:
            return []
        limit = self.t.value_loss_factor * best
        above = value > limit and value > 0
        self._value_loss_above = self._value_loss_above + 1 if above else 0
        n = self.t.value_loss_rollouts
        return self._set("health.value_loss_diverging", VALUE_LOSS, rid,
                         self._value_loss_above >= n, value, limit,
                         f"{VALUE_LOSS} {value:.3g} above {self.t.value_loss_factor:g}x its best "
                         f"{best:.3g} for {self._value_loss_above} rollouts",
                         "lower --critic-lr, set --value-clip, or check the reward scale")

    @property
    def rollouts_judged(self) -> int:
        return len(self._judged)

    def _truncation(self, rid: int, ratio: float | None, mean_len: float | None
                    ) -> list[Finding]:
        max_len = self.facts.rollout_max_response_len
        if ratio is None and mean_len is not None and max_len:
            ratio = 1.0 if mean_len >= max_len else None  # no ratio logged: pinned means all
        if ratio is None:
            return []
        limit = self.t.truncation_max
        return self._set("health.truncation", TRUNCATED, rid, ratio > limit, ratio, limit,
                         f"{ratio:.0%} of responses were cut at --rollout-max-response-len "
                         f"{max_len if max_len else '(its value is not recorded for this run)'}",
                         "raise --rollout-max-response-len, or reward shorter answers")

    def _reward_flat(self, rid: int, value: float | None) -> list[Finding]:
        if value is None:
            return []
        n = self.t.reward_flat_rollouts
        history = self._history.setdefault(REWARD, deque(maxlen=n))
        history.append(value)
        if len(history) < n:
            return []
        spread = max(history) - min(history)
        return self._set("health.reward_flat", REWARD, rid,
                         spread <= self.t.reward_flat_tolerance, spread,
                         self.t.reward_flat_tolerance,
                         f"{REWARD} stayed at {value:.3g} (spread {spread:.2g}) for {n} rollouts",
                         "check the reward function on a few samples (--debug-rollout-only); "
                         "if the task is solved, stop the run; else raise "
                         "--rollout-temperature or --n-samples-per-prompt")

    def _logprob_gap(self, rid: int, value: float | None) -> list[Finding]:
        if value is None:
            return []
        n = self.t.logprob_gap_rollouts
        history = self._history.setdefault(LOGPROB_GAP, deque(maxlen=n + 1))
        history.append(value)
        if len(history) <= n:
            return []
        values = list(history)
        rising = all(b > a for a, b in zip(values, values[1:], strict=False))
        limit = self.t.logprob_gap_factor * values[0]
        return self._set("health.logprob_gap_climbing", LOGPROB_GAP, rid,
                         rising and value >= limit and value > 0, value, limit,
                         f"{LOGPROB_GAP} rose for {n} rollouts, {values[0]:.3g} -> {value:.3g}",
                         "check the weight sync to the rollout engines; set --use-tis to "
                         "correct the mismatch; compare the rollout and train precisions")

    # ---- time-based rule ----------------------------------------------------------------------

    def _pace(self, rid: int) -> list[Finding]:
        """Steady rollouts against the forecast made at launch, naming the costliest phase."""
        if not self.facts.forecast or len(self._phases.steady()) < self.t.pace_rollouts:
            return []
        pace = judge_pace(self._phases, self.facts.forecast)
        if pace.ratio is None:
            return []
        factor = self.t.pace_factor
        off = pace.ratio >= factor or pace.ratio <= 1 / factor
        return self._set("health.pace_far_off", pace.worst_phase or "pace", rid, off,
                         pace.ratio, factor, f"{pace.text} (steady rollouts take "
                         f"{pace.ratio:.1f}x the forecast made at launch)",
                         "see the phase named: a busy machine, a slower path than the "
                         "calibration's (`ppodeck tail RUN --kind log`), or a config that "
                         "changed the work; `ppodeck validate` shows the forecast's basis",
                         keep_active=True)

    def _speed_below_bound(self, rid: int) -> list[Finding]:
        """On GPU, a phase that takes a large share of the step at a small fraction of what
        the machine does (engine/run/bounds.py); each such phase is named."""
        ctx = self.facts.speed
        if ctx is None or not ctx.on_gpu or len(self._speed.steady()) < self.t.speed_rollouts:
            return []
        fired: list[Finding] = []
        for phase in self._speed.verdict(ctx).phases:
            fraction = phase.fraction
            if fraction is None:
                continue
            slow = phase.share >= self.t.speed_share_min and fraction <= self.t.speed_bound_max
            fired += self._set("health.speed_below_bound", phase.phase, rid, slow, fraction,
                               self.t.speed_bound_max,
                               f"{phase.text()} ({fraction:.1%} of that bound)",
                               SPEED_FIXES.get(phase.phase, SPEED_FIX), keep_active=True)
        return fired

    def check_hang(self, now: float, driver_alive: bool) -> list[Finding]:
        """No new event for hang_minutes while the driver process is alive: a hang. And,
        within it, reward requests pending with none answered: a reward stall."""
        stall = self.check_reward_stall(now, driver_alive)
        if self.last_event_ts is None:
            return stall
        return stall + self._hang(now, driver_alive)

    def check_reward_stall(self, now: float, driver_alive: bool) -> list[Finding]:
        """The reward phase has requests pending and none answered for reward_stall_seconds
        (engine/run/reward_progress.py); it clears once an answer comes."""
        from .reward_progress import read_progress

        progress = read_progress(self.run_dir) if self.run_dir is not None else None
        if progress is None:
            return []
        stalled = progress.stalled_for(now)
        limit = self.t.reward_stall_seconds
        return self._set("health.reward_stall", "reward", progress.rollout_id,
                         driver_alive and stalled > limit, stalled, limit,
                         f"{progress.line()}; none answered for {stalled:.0f} s",
                         "check the reward server or function (its log, its load); the "
                         "rollout waits for every answer. Stop the run with `ppodeck stop "
                         "RUN` and resume it with `ppodeck run --resume RUN` once it answers")

    def _hang(self, now: float, driver_alive: bool) -> list[Finding]:
        silent_min = (now - self.last_event_ts) / 60.0
        limit = self.t.hang_minutes
        return self._set("health.hang", "events", self.last_rollout_id,
                         driver_alive and silent_min > limit, silent_min, limit,
                         f"no new event for {silent_min:.0f} min while the driver is alive",
                         "look at driver.log and `py-spy dump` the driver; stop it with "
                         "`ppodeck stop RUN --force` and resume with `ppodeck run --resume RUN`")

    # ---- bookkeeping -------------------------------------------------------------------------

    def _set(self, code: str, metric: str, rid: int | None, firing: bool, value: float,
             threshold: float, message: str, fix: str, keep_active: bool | None = None
             ) -> list[Finding]:
        """Fire once when `firing` starts; clear when it stops (or when keep_active is False)."""
        key = f"{code}:{metric}"
        if code in self.t.disable:
            return []
        if not firing:
            if not keep_active:
                self.active.pop(key, None)
            return []
        if key in self.active:
            return []
        rule = BY_CODE[code]
        finding = Finding(code, rule.level, metric, _round(value), _round(threshold), rid,
                          message, fix)
        self.active[key] = finding
        if finding.id in self._seen_ids:
            return []
        self._seen_ids.add(finding.id)
        self.findings.append(finding)
        return [finding]

    def level(self) -> str:
        return worst_level(self.findings)


SPEED_FIX = ("`python bench/phase_bounds.py RUN` shows every phase against its bound; "
             "`ppodeck tail RUN --kind log` says which path each move and sync took")
TRAIN_FIX = ("larger micro-batches (--micro-batch-size, or --use-dynamic-batch-size with a "
             "larger --max-tokens-per-gpu) so the matmuls fill the GPU; " + SPEED_FIX)
PINNED_FIX = "pinned host buffers (the offload log says whether they were pinned)"
SPEED_FIXES = {
    Phase.GENERATE: "a larger decode batch (more --n-samples-per-prompt or --rollout-batch-size) "
                    "or the sglang backend; " + SPEED_FIX,
    OFFLOAD: f"{PINNED_FIX}, or keep the model on the GPU when it fits; {SPEED_FIX}",
    ONLOAD: f"{PINNED_FIX}; {SPEED_FIX}",
    Phase.UPDATE_WEIGHTS: "the cuda_ipc sync path (colocated) instead of packed host copies; "
                          + SPEED_FIX,
    Phase.ACTOR_TRAIN: TRAIN_FIX,
    Phase.CRITIC_TRAIN: TRAIN_FIX,
}


def _round(value: float) -> float:
    return value if not math.isfinite(value) else float(f"{value:.6g}")


def worst_level(findings: Iterable[Finding]) -> str:
    levels = {f.level for f in findings}
    return "error" if "error" in levels else "warning" if "warning" in levels else "ok"


# --------------------------------------------------------------------------------------------
# a run directory: thresholds, facts, judging, recording
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthReport:
    run_id: str
    state: str
    level: str
    findings: list[Finding]
    active: list[Finding]
    rollouts_judged: int
    thresholds: Thresholds
    thresholds_from: str
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "state": self.state, "level": self.level,
                "rollouts_judged": self.rollouts_judged,
                "findings": [{"id": f.id, **asdict(f), "active": f in self.active}
                             for f in self.findings],
                "thresholds": asdict(self.thresholds), "thresholds_from": self.thresholds_from,
                "notes": self.notes}


def run_thresholds(run_path: Path, preset_name: str | None) -> tuple[Thresholds, str]:
    """The run's thresholds and where they came from (shown to the user).

    The [health] table snapshot taken at launch (health.toml) wins; without one the table of
    the preset the run names is used when that preset still loads; else the defaults.
    """
    import tomllib

    snapshot = run_path / HEALTH_SNAPSHOT
    if snapshot.is_file():
        try:
            table = tomllib.loads(snapshot.read_text()).get("health", {})
            return replace(Thresholds(), **parse_health_table(table, str(snapshot))), \
                str(snapshot)
        except (OSError, tomllib.TOMLDecodeError, HealthConfigError) as exc:
            return Thresholds(), f"defaults ({snapshot} unreadable: {exc})"
    if preset_name:
        table = preset_health_table(preset_name)
        if table:
            return replace(Thresholds(), **table), f"preset {preset_name} [health]"
    return Thresholds(), "defaults"


def preset_health_table(preset_name: str) -> dict[str, Any]:
    """The merged [health] table of a preset and its parents; {} when it does not load."""
    from ..presets import PresetError, extends_chain, load_preset

    try:
        chain = extends_chain(load_preset(preset_name))
    except (PresetError, OSError):
        return {}
    merged: dict[str, Any] = {}
    for preset in chain:
        merged.update(getattr(preset, "health", {}) or {})
    return merged


def snapshot_thresholds(run_path: Path, table: Mapping[str, Any]) -> None:
    """Keep the preset's [health] table with the run (health.toml), so judging it later uses
    the thresholds it was launched with."""
    if not table:
        return
    (run_path / HEALTH_SNAPSHOT).write_text(
        "# [health] of the preset this run was launched from (ppodeck health)\n"
        + health_toml(table))


def run_facts(run_path: Path) -> tuple[RunFacts, list[str]]:
    """RunFacts from the run's config.toml, resolved, with the forecast status.json keeps from
    launch; defaults (and a note) if unreadable."""
    from .bounds import speed_context
    from .rundir import RunDir, read_status

    facts, notes = _config_facts(run_path)
    forecast = read_status(RunDir(Path(run_path))).get("forecast") or None
    return replace(facts, forecast=forecast, speed=speed_context(Path(run_path))), notes


def _config_facts(run_path: Path) -> tuple[RunFacts, list[str]]:
    from ..config import resolve
    from ..host.machine import environment
    from ..presets import PresetError, config_from_toml

    config_toml = run_path / "config.toml"
    if not config_toml.exists():
        watched = _watched_miles_facts(run_path)
        if watched is not None:
            return watched
    try:
        config = config_from_toml(config_toml.read_text(), config_toml)
        return RunFacts.from_args(resolve(config, environment())), []
    except (OSError, PresetError, KeyError, ValueError) as exc:
        return RunFacts(), [f"{config_toml} unreadable ({exc}); --clip-grad 1.0, no warmup "
                            "and a critic assumed"]


def _watched_miles_facts(run_path: Path) -> tuple[RunFacts, list[str]] | None:
    """A watched miles dump has no config.toml: the args its meta.json keeps (engine/miles_run)."""
    from .rundir import RunDir
    from .source import dump_of, known_values

    dump = dump_of(RunDir(Path(run_path)))
    if dump is None:
        return None
    length = known_values(dump).get("rollout_max_response_len")
    facts = RunFacts(rollout_max_response_len=length if isinstance(length, int) else None)
    return facts, [f"miles dump {dump}: its meta.json records no --clip-grad, warmup or "
                   "estimator; --clip-grad 1.0, no warmup and a critic assumed"]


def judge_run(run_path: Path, now: float | None = None, write: bool = True) -> HealthReport:
    """Judge every event of the run; record the findings in health.jsonl (unless write=False)."""
    from ..vocabulary import ACTIVE_STATES
    from .rundir import RunDir, driver_alive, read_status

    rundir = RunDir(Path(run_path))
    status = read_status(rundir)
    thresholds, source = run_thresholds(rundir.path, status.get("preset"))
    facts, notes = run_facts(rundir.path)
    judge = HealthJudge(thresholds, facts, rundir.path)
    try:
        events, warnings = read_events(rundir.events_jsonl)
    except FileNotFoundError:
        events, warnings = [], [f"{rundir.events_jsonl} does not exist yet"]
    judge.feed(events)
    state = str(status.get("state") or State.UNKNOWN)
    if state in ACTIVE_STATES:
        judge.check_hang(time.time() if now is None else now, driver_alive(rundir, status))
    else:
        judge.finish()
        _ended_badly(status, state, judge)  # recorded in judge.findings
    if write:
        notes += record_or_note(rundir.path, judge.findings)
    return HealthReport(rundir.id, state, judge.level(), list(judge.findings),
                        list(judge.active.values()), judge.rollouts_judged, thresholds, source,
                        notes + warnings)


def _ended_badly(status: Mapping[str, Any], state: str, judge: HealthJudge) -> list[Finding]:
    """A run that failed (or was lost) is unhealthy whatever its metrics said: the finding
    names the failure as status.json has it."""
    if state not in (State.FAILED, State.LOST):
        return []
    detail = str(status.get("detail") or "no detail recorded in status.json")
    return judge._set("health.run_failed", "state", judge.last_rollout_id, True, 1.0, 0.0,
                      f"the run {state}: {detail}",
                      "read driver.log for the traceback; fix the cause, then `ppodeck run "
                      "--resume RUN` continues from the last save")


def record_or_note(run_path: Path, findings: list[Finding]) -> list[str]:
    try:
        record(run_path, findings)
    except OSError as exc:
        return [f"findings not recorded in {run_path / HEALTH_FILE}: {exc}"]
    return []


def record(run_path: Path, findings: Iterable[Finding]) -> list[Finding]:
    """Append the findings health.jsonl does not hold yet; returns those written.

    The exclusive lock spans read + append, so two readers judging the same run at once
    (the TUI and `ppodeck health`) never write a finding twice.
    """
    findings = list(findings)
    path = Path(run_path) / HEALTH_FILE
    if not findings:
        path.touch()  # its mtime says when the run was last judged (runs ls reads it)
        return []
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            held = {_event_id(line) for line in handle.read().split(b"\n")}
            new = [f for f in findings if f.id not in held]
            if new:
                handle.write(b"".join(encode_event(f.to_event()) for f in new))
                handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return new


def _event_id(line: bytes) -> str | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event.get("id") if isinstance(event, dict) else None


def recorded(run_path: Path) -> list[Finding]:
    """The findings in health.jsonl (what readers judged so far)."""
    path = Path(run_path) / HEALTH_FILE
    try:
        events, _ = read_events(path)
    except FileNotFoundError:
        return []
    out = []
    for event in events:
        try:
            out.append(Finding.from_event(event))
        except (KeyError, TypeError):
            continue
    return out


def run_level(run_path: Path) -> str:
    """The health column of `runs ls`: judged again only when events.jsonl (or the reward
    phase's progress, rewritten while it scores) is newer than health.jsonl (or there is
    none); "-" when the run has no events."""
    from .reward_progress import PROGRESS_FILE

    run_path = Path(run_path)
    events = run_path / "events.jsonl"
    health = run_path / HEALTH_FILE
    try:
        events_mtime = events.stat().st_mtime
    except FileNotFoundError:
        return "-"
    try:
        events_mtime = max(events_mtime, (run_path / PROGRESS_FILE).stat().st_mtime)
    except FileNotFoundError:
        pass
    try:
        fresh = health.stat().st_mtime >= events_mtime
    except FileNotFoundError:
        fresh = False
    findings = recorded(run_path) if fresh else judge_run(run_path).findings
    return summary(findings)


def summary(findings: Iterable[Finding]) -> str:
    """"ok", "2 warn", "1 error 3 warn"."""
    findings = list(findings)
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    parts = ([f"{errors} error"] if errors else []) + ([f"{warnings} warn"] if warnings else [])
    return " ".join(parts) or "ok"
