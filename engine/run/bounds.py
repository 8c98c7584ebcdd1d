"""The speed verdict: each phase of a rollout step held against what this machine can do.

For the newest 20 steady rollouts of a run (those after each phase's first time, with its
warm-ups), each phase's share of the step and its rate against a bound measured on the machine
(engine/host/probe.py):

- generate: tokens/s against the memory-bound decode rate, samples x read bandwidth x the
  engine's tensor-parallel GPUs / weight bytes (every decode step reads the weights once and
  yields one token per sample; KV reads and prefill left out, so it is an upper bound);
- critic train, actor train: FLOP/s (the `perf/<role>_train_tflops` the driver or miles logs)
  against the dense matmul peak (bf16 on GPU, fp32 on CPU) of the GPUs that train: the MFU;
- offload, onload: bytes moved over seconds (`offload` events) against a pinned
  device->host / host->device copy (a memcpy on CPU); memory SGLang releases rather than copies
  (no rate in its event) is left out. A move's share of the step is the time the driver waited
  for it (`waited_seconds`): a move that ran beside other work costs the step nothing. Moves
  happen inside other phases (a critic wakes inside critic train), so these shares overlap
  theirs;
- weight sync: the update_weights phase's bytes (the driver's sync record, else parameters x
  bytes per parameter) against a pinned host->device copy, or a device copy when every sync
  took the cuda_ipc path.

The verdict names the phase that loses the most seconds against its bound (seconds x (1 -
rate / bound)): "offload: 62% of the step at 2.6 GB/s; a pinned copy here does 55 GB/s".
A step lasts from one rollout's generate start to the next one's (a miles run's per-rank timers
overlap, and their starts are inferred). A miles run's phases come from its own timers
(engine/miles/watch.py): sleep and wake_up are its offload and onload, with no bytes recorded.
LIGHT: stdlib only.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host.kind import gpu_count
from ..host.probe import MachineFacts, read_facts
from ..vocabulary import PHASE_LABEL, Kind, Metric, Phase, StepKey

OFFLOAD, ONLOAD = "offload", "onload"  # pseudo-phases: the moves, wherever they happen
MILES_MOVES = {"sleep": OFFLOAD, "wake_up": ONLOAD}  # miles' timers of the same moves
TRAIN_ROLES = {Phase.CRITIC_TRAIN: "critic", Phase.ACTOR_TRAIN: "actor"}
LABEL = {**PHASE_LABEL, OFFLOAD: "offload", ONLOAD: "onload"}
ORDER = (Phase.GENERATE, OFFLOAD, Phase.CRITIC_TRAIN, Phase.ACTOR_TRAIN, ONLOAD,
         Phase.UPDATE_WEIGHTS)
WINDOW = 20  # the newest steady rollouts a verdict covers: the run's speed now


@dataclass(frozen=True)
class SpeedContext:
    """What the bounds need beside the events: the machine's facts and the run's shape."""

    kind: str | None
    facts: MachineFacts | None
    params: int | None = None
    bytes_per_param: int = 2  # bf16 on CUDA, float32 on CPU (the engine's dtypes)
    samples: int | None = None  # samples per rollout: the largest decode batch
    decode_gpus: int = 1  # the GPUs one rollout engine spreads its weights over (TP)
    train_gpus: int = 1

    @property
    def weight_bytes(self) -> int | None:
        return self.params * self.bytes_per_param if self.params else None

    @property
    def on_gpu(self) -> bool:
        return self.facts is not None and self.facts.on_gpu


@dataclass(frozen=True)
class PhaseSpeed:
    phase: str
    seconds: float  # per steady rollout
    share: float  # of the step
    rate: float | None = None
    bound: float | None = None
    unit: str = ""
    bound_text: str = ""  # "a pinned copy here does 55 GB/s"
    note: str = ""  # why there is no rate or bound

    @property
    def label(self) -> str:
        return LABEL.get(self.phase, self.phase)

    @property
    def fraction(self) -> float | None:
        return None if self.rate is None or not self.bound else self.rate / self.bound

    @property
    def lost_s(self) -> float:
        """Seconds per rollout beyond what the phase would take at its bound."""
        fraction = self.fraction
        return 0.0 if fraction is None else self.seconds * max(0.0, 1.0 - fraction)

    def text(self) -> str:
        head = f"{self.label}: {self.share:.0%} of the step"
        if self.rate is None:
            return f"{head} ({self.note or 'no rate recorded'})"
        rate = f"{_number(self.rate)} {self.unit}"
        if self.unit == "TFLOP/s" and self.fraction is not None:
            rate += f" ({percent(self.fraction)} MFU)"
        if not self.bound_text:
            return f"{head} at {rate}"
        above = ABOVE if self.fraction is not None and self.fraction > 1 else ""
        return f"{head} at {rate}; {self.bound_text}{above}"


@dataclass(frozen=True)
class Speed:
    text: str  # the verdict
    phases: tuple[PhaseSpeed, ...] = ()
    worst: PhaseSpeed | None = None
    step_s: float | None = None
    rollouts: int = 0  # steady rollouts judged
    basis: str = ""  # the machine facts line

    @property
    def mfu(self) -> dict[str, float]:
        """MFU per train phase (role -> fraction of the peak)."""
        return {TRAIN_ROLES[p.phase]: p.fraction for p in self.phases
                if p.phase in TRAIN_ROLES and p.fraction is not None}

    def short(self) -> str:
        """For a table column: "offload 4.7% of bound, 62% of step", or "-"."""
        worst = self.worst
        if worst is None or worst.fraction is None:
            return "-"
        return f"{worst.label} {percent(worst.fraction)} of bound, {worst.share:.0%} of step"

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.text, "step_s": self.step_s, "rollouts": self.rollouts,
                "basis": self.basis, "mfu": self.mfu,
                "worst": self.worst.phase if self.worst else None,
                "phases": [{"phase": p.phase, "seconds": round(p.seconds, 4),
                            "share": round(p.share, 4), "rate": p.rate, "bound": p.bound,
                            "unit": p.unit, "fraction": p.fraction, "lost_s": round(p.lost_s, 4),
                            "text": p.text()} for p in self.phases]}


ABOVE = (" (above it: the probe may have measured a busy machine; `python -m "
         "ppodeck.engine.host.probe` measures it again)")


def percent(fraction: float) -> str:
    """"4.7%", "0.043%": two significant digits below 1%."""
    return f"{fraction:.1%}" if fraction >= 0.01 else f"{fraction * 100:.2g}%"


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


# ------------------------------------------------------------------------------------ fold
@dataclass
class _Rollout:
    start: float | None = None  # its generate's start (else its first phase's)
    end: float | None = None  # its last phase's end
    # phase -> role -> rank -> seconds: a miles timer runs on each rank of each role
    phases: dict[str, dict[Any, dict[Any, float]]] = field(default_factory=dict)
    # direction -> [bytes, seconds copying, seconds the driver waited for the copies]
    moved: dict[str, list[float]] = field(default_factory=dict)
    response_len: float | None = None
    tflops: dict[str, list[float]] = field(default_factory=dict)  # role -> values
    sync_bytes: float = 0.0
    sync_paths: set[str] = field(default_factory=set)  # cuda_ipc, packed_host

    def seconds(self, phase: str) -> float | None:
        """The slowest rank's, summed over roles (the actor and critic sleep in turn)."""
        roles = self.phases.get(phase)
        return sum(max(ranks.values()) for ranks in roles.values()) if roles else None


class SpeedFold:
    """Feed it a run's events in order; `verdict(ctx)` judges the steady rollouts so far."""

    WAITS = frozenset({"train_wait", "train"})  # miles' timers that span other timers

    def __init__(self) -> None:
        self.rollouts: dict[int, _Rollout] = {}
        self.order: list[int] = []  # rollout ids, ascending
        self.first_seen: dict[str, int] = {}  # judged phase -> the rollout it first ran in
        self.current: int | None = None  # the rollout of the latest phase start

    def add(self, event: Mapping[str, Any]) -> None:
        kind = event.get("kind")
        if kind == Kind.PHASE:
            self._phase(event)
        elif kind == Kind.OFFLOAD:
            self._move(event)
        elif kind == Kind.METRICS:
            self._metrics(event)
        elif kind == Kind.LOG and event.get("sync_path") and self.current is not None:
            r = self._of(self.current)
            r.sync_paths.add(str(event["sync_path"]))
            if isinstance(event.get("sync_bytes"), (int, float)):
                r.sync_bytes += float(event["sync_bytes"])

    def _of(self, rid: int) -> _Rollout:
        r = self.rollouts.get(rid)
        if r is None:
            r = self.rollouts[rid] = _Rollout()
            bisect.insort(self.order, rid)
        return r

    def _seen(self, phase: str, rid: int) -> None:
        if phase in ORDER and (phase not in self.first_seen or rid < self.first_seen[phase]):
            self.first_seen[phase] = rid

    def _phase(self, event: Mapping[str, Any]) -> None:
        rid, name = event.get("rollout_id"), event.get("name")
        if event.get("parent") or not isinstance(rid, int) or rid < 0 or name in self.WAITS:
            return
        r, ts = self._of(rid), float(event.get("ts") or 0.0)
        if event.get("state") == "start":
            self.current = rid if self.current is None else max(self.current, rid)
            if name == Phase.GENERATE or r.start is None:  # a step starts with its generate
                r.start = ts
            return
        if event.get("state") != "end":
            return
        r.end = ts if r.end is None else max(r.end, ts)
        phase = MILES_MOVES.get(str(name), str(name))
        self._seen(phase, rid)
        ranks = r.phases.setdefault(phase, {}).setdefault(event.get("role"), {})
        rank = event.get("rank", event.get("process"))
        ranks[rank] = ranks.get(rank, 0.0) + float(event.get("seconds") or 0.0)

    def _move(self, event: Mapping[str, Any]) -> None:
        seconds, moved = event.get("seconds"), event.get("bytes")
        direction = event.get("direction")
        if (self.current is None or event.get("noop") or direction not in (OFFLOAD, ONLOAD)
                or not isinstance(seconds, (int, float)) or not isinstance(moved, (int, float))
                or seconds <= 0 or moved <= 0
                or ("gbps" in event and event["gbps"] is None)):  # released, not copied
            return
        waited = event.get("waited_seconds")
        self._seen(str(direction), self.current)
        total = self._of(self.current).moved.setdefault(str(direction), [0.0, 0.0, 0.0])
        total[0] += float(moved)
        total[1] += float(seconds)
        total[2] += float(waited) if isinstance(waited, (int, float)) else float(seconds)

    def _metrics(self, event: Mapping[str, Any]) -> None:
        rid, metrics = event.get("rollout_id"), event.get("metrics")
        if not isinstance(rid, int) or rid < 0 or not isinstance(metrics, dict):
            return
        r = self._of(rid)
        length = metrics.get(Metric.RESPONSE_LEN)
        if event.get("step_key") == StepKey.ROLLOUT and isinstance(length, (int, float)):
            r.response_len = float(length)
        for role in TRAIN_ROLES.values():
            value = metrics.get(f"perf/{role}_train_tflops")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                r.tflops.setdefault(role, []).append(float(value))

    # ---- judging ---------------------------------------------------------------------------

    def steady(self, ended: bool = False, window: int = WINDOW) -> list[tuple[int, float]]:
        """The newest `window` finished steady rollouts with their step seconds, oldest first.
        Finished: its next rollout began (or any once `ended`). Steady: after every judged
        phase has run once, since a phase's first time carries its compiles and warm-ups (the
        actor's first train comes after the critic-only warmup, not in the first rollout).
        Newest first and bounded, so a follower's verdict after each rollout stays cheap."""
        warm = max(self.first_seen.values(), default=-1)
        out: list[tuple[int, float]] = []
        later: float | None = None  # the start of the next rollout that began
        for rid in reversed(self.order):
            r = self.rollouts[rid]
            if rid <= warm or len(out) >= window:
                break
            if r.start is None:
                continue
            end = later if later is not None else (r.end if ended else None)
            later = r.start
            if end is not None and end > r.start:
                out.append((rid, end - r.start))
        return out[::-1]

    def verdict(self, ctx: SpeedContext, ended: bool = False) -> Speed:
        if ctx.facts is None:
            return Speed(f"no machine facts for {ctx.kind or 'this run (no machine kind)'} "
                         "(`python -m ppodeck.engine.host.probe` on that machine measures "
                         "them)")
        steady = self.steady(ended)
        if not steady:
            return Speed("no steady rollout yet", basis=ctx.facts.line())
        step = sum(seconds for _, seconds in steady) / len(steady)
        rollouts = [self.rollouts[rid] for rid, _ in steady]
        phases = tuple(p for p in (_judge(name, rollouts, step, ctx) for name in ORDER)
                       if p is not None)
        judged = [p for p in phases if p.fraction is not None]
        if not judged:
            return Speed("no phase with a rate and a bound", phases, None, step, len(steady),
                         ctx.facts.line())
        worst = max(judged, key=lambda p: p.lost_s)
        return Speed(worst.text(), phases, worst, step, len(steady), ctx.facts.line())


def _judge(phase: str, rollouts: list[_Rollout], step: float,
           ctx: SpeedContext) -> PhaseSpeed | None:
    if phase in (OFFLOAD, ONLOAD):
        return _moves(phase, rollouts, step, ctx)
    seen = [s for s in (r.seconds(phase) for r in rollouts) if s is not None]
    if not seen:
        return None
    seconds = sum(seen) / len(rollouts)
    base = PhaseSpeed(phase, seconds, seconds / step)
    if phase == Phase.GENERATE:
        return _generate(base, rollouts, ctx)
    if phase in TRAIN_ROLES:
        return _train(base, rollouts, ctx)
    return _sync(base, rollouts, ctx)


def _copy_bound(ctx: SpeedContext, pinned: float | None) -> tuple[float | None, str]:
    facts = ctx.facts
    assert facts is not None
    if ctx.on_gpu and pinned:
        return pinned, f"a pinned copy here does {_number(pinned)} GB/s"
    if facts.cpu_memcpy_GBps:
        return facts.cpu_memcpy_GBps, f"a memcpy here does {_number(facts.cpu_memcpy_GBps)} GB/s"
    return None, ""


def _moves(direction: str, rollouts: list[_Rollout], step: float,
           ctx: SpeedContext) -> PhaseSpeed | None:
    moved = [r.moved[direction] for r in rollouts if direction in r.moved]
    timers = [s for s in (r.seconds(direction) for r in rollouts) if s is not None]
    assert ctx.facts is not None
    if moved:
        nbytes, seconds = sum(m[0] for m in moved), sum(m[1] for m in moved)
        pinned = ctx.facts.d2h_pinned_GBps if direction == OFFLOAD else ctx.facts.h2d_pinned_GBps
        bound, text = _copy_bound(ctx, pinned)
        per = sum(m[2] for m in moved) / len(rollouts)  # what the step waited, not what overlapped
        return PhaseSpeed(direction, per, per / step, nbytes / seconds / 1e9, bound, "GB/s", text)
    if timers:  # miles' sleep / wake_up timers: seconds, no bytes
        per = sum(timers) / len(rollouts)
        return PhaseSpeed(direction, per, per / step, note="the run records no bytes moved")
    return None


def _generate(base: PhaseSpeed, rollouts: list[_Rollout], ctx: SpeedContext) -> PhaseSpeed:
    lengths = [r.response_len for r in rollouts if r.response_len is not None]
    if not ctx.samples or not lengths:
        return _with(base, note="samples per rollout or response lengths not recorded")
    rate = ctx.samples * sum(lengths) / len(lengths) / base.seconds
    facts = ctx.facts
    assert facts is not None
    read = facts.hbm_read_write_GBps if ctx.on_gpu else (
        2 * facts.cpu_memcpy_GBps if facts.cpu_memcpy_GBps else None)
    if not read or not ctx.weight_bytes:
        return _with(base, rate=rate, unit="tok/s", note="no weight bytes or bandwidth")
    bound = ctx.samples * ctx.decode_gpus * read * 1e9 / ctx.weight_bytes
    return _with(base, rate=rate, bound=bound, unit="tok/s",
                 bound_text=f"memory-bound decode here does {_number(bound)} tok/s "
                            f"(batch {ctx.samples})")


def _train(base: PhaseSpeed, rollouts: list[_Rollout], ctx: SpeedContext) -> PhaseSpeed:
    role = TRAIN_ROLES[base.phase]
    values = [v for r in rollouts for v in r.tflops.get(role, [])]
    if not values:
        return _with(base, note="the run records no FLOP/s for it")
    facts = ctx.facts
    assert facts is not None
    rate = sum(values) / len(values)
    if ctx.on_gpu and facts.bf16_matmul_TFLOPs:
        peak, what = facts.bf16_matmul_TFLOPs * ctx.train_gpus, "bf16"
    elif facts.cpu_fp32_matmul_TFLOPs:
        peak, what = facts.cpu_fp32_matmul_TFLOPs, "fp32 CPU"
    else:
        return _with(base, rate=rate, unit="TFLOP/s", note="no matmul peak measured")
    gpus = f" on {ctx.train_gpus} GPUs" if ctx.on_gpu and ctx.train_gpus > 1 else ""
    return _with(base, rate=rate, bound=peak, unit="TFLOP/s",
                 bound_text=f"a {what} matmul here does {_number(peak)} TFLOP/s{gpus}")


def _sync(base: PhaseSpeed, rollouts: list[_Rollout], ctx: SpeedContext) -> PhaseSpeed:
    recorded = sum(r.sync_bytes for r in rollouts)
    synced = [r for r in rollouts if r.seconds(base.phase) is not None]
    nbytes = recorded or (ctx.weight_bytes or 0) * len(synced)
    if not nbytes:
        return _with(base, note="no bytes recorded and no parameter count")
    assert ctx.facts is not None
    paths = {p for r in rollouts for p in r.sync_paths}
    if paths == {"cuda_ipc"} and ctx.on_gpu and ctx.facts.hbm_copy_GBps:  # device to device
        bound = ctx.facts.hbm_copy_GBps
        text = f"a device copy here does {_number(bound)} GB/s (cuda_ipc)"
    else:
        bound, text = _copy_bound(ctx, ctx.facts.h2d_pinned_GBps)
    rate = nbytes / (base.seconds * len(rollouts)) / 1e9
    estimated = "" if recorded else " (bytes estimated from the parameters)"
    return _with(base, rate=rate, bound=bound, unit="GB/s", bound_text=text + estimated)


def _with(base: PhaseSpeed, **changes: Any) -> PhaseSpeed:
    from dataclasses import replace

    return replace(base, **changes)


def judge_speed(events: Iterable[Mapping[str, Any]], ctx: SpeedContext,
                ended: bool = False) -> Speed:
    fold = SpeedFold()
    for event in events:
        fold.add(event)
    return fold.verdict(ctx, ended)


# -------------------------------------------------------------------------- run directories
def speed_context(run_path: Path, kind: str | None = None) -> SpeedContext:
    """The context of a run directory: its machine kind's cached facts and its config's shape
    (a watched miles dump has no config.toml: no shape, so generate and sync have no bound)."""
    from .rundir import RunDir, read_status

    rundir = RunDir(Path(run_path))
    kind = kind or read_status(rundir).get("machine")
    facts = read_facts(kind) if kind else None
    on_cpu = not str(kind or "").startswith("gpu:")
    shape = {"train_gpus": max(1, gpu_count(kind or "")), **_shape(rundir.config_toml, on_cpu)}
    return SpeedContext(kind, facts, bytes_per_param=4 if on_cpu else 2, **shape)


def _shape(config_toml: Path, on_cpu: bool) -> dict[str, Any]:
    from ..config import resolve
    from ..config.derived import derive_resolved
    from ..host.machine import environment
    from ..presets import PresetError, config_from_toml

    env = environment()
    try:
        r = resolve(config_from_toml(config_toml.read_text(), config_toml), env)
    except (OSError, PresetError, KeyError, ValueError):
        return {}
    derived = derive_resolved(r, env, on_cpu=on_cpu)
    return {"params": derived.params, "samples": derived.samples_per_rollout,
            "decode_gpus": 1 if on_cpu else int(r.get("rollout_num_gpus_per_engine") or 1),
            "train_gpus": int(r.get("world_size") or 1)}


def run_speed(run_path: Path, ctx: SpeedContext | None = None,
              events: list[dict[str, Any]] | None = None) -> Speed:
    """The verdict of a run directory from its events (finished runs: every rollout; `events`:
    read already), against `ctx` (default: its own machine kind's facts and config)."""
    from ..vocabulary import FINAL_STATES
    from .pace import run_events
    from .rundir import RunDir, read_status

    rundir = RunDir(Path(run_path))
    if events is None:
        events = run_events(rundir)
    ended = read_status(rundir).get("state") in FINAL_STATES
    return judge_speed(events, ctx or speed_context(rundir.path), ended)


class SpeedWatch:
    """For a follower: the verdict each time a rollout begins when it names another phase than
    the one shown (its figures move a little every rollout), and the final one at the end."""

    def __init__(self, ctx: SpeedContext) -> None:
        self.ctx = ctx
        self.fold = SpeedFold()
        self.shown: str | None = None
        self.shown_phase: str | None = None
        self.last: Speed | None = None

    def after(self, event: Mapping[str, Any]) -> str | None:
        before = len(self.fold.rollouts)
        self.fold.add(event)
        if len(self.fold.rollouts) == before or self.ctx.facts is None:
            return None
        return self._show(self.fold.verdict(self.ctx))

    def end(self) -> str | None:
        """The run ended: its last rollout counts too; shown unless the same text was."""
        if self.ctx.facts is None:
            return None
        speed = self.fold.verdict(self.ctx, ended=True)
        return self._show(speed, speed.text != self.shown)

    def _show(self, speed: Speed, changed: bool | None = None) -> str | None:
        self.last = speed
        if speed.worst is None:
            return None
        if changed is None:
            changed = speed.worst.phase != self.shown_phase
        if not changed:
            return None
        self.shown, self.shown_phase = speed.text, speed.worst.phase
        return f"speed: {speed.text}"
