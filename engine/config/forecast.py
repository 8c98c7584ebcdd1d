"""The run's forecast: wall time (launch to done) and GPU-hours, from a per-phase cost model.

README-forecast: how the forecast is computed
---------------------------------------------
A run's wall time is

    launch + init + first-rollout extra + sum over phases of (count x seconds per rollout)
    + saves x seconds per save

`launch` is the time from the run directory's creation to the driver's first phase plus the
time from the last phase to the final status; `init` the driver's init phase (Ray, placement,
the roles, the first push); the first rollout carries the one-off compiles and cache warm-ups.
Per-rollout phases: generate, rollout offload/onload, critic train, actor train (not during
the --num-critic-only-steps warmup), weight sync (every --update-weights-interval rollouts).

Each term comes from a calibration: the median of kept runs on the same machine kind (this
machine's own finished runs, engine/run/pace.py, then the evidence kept in the repository,
data/forecast_kept.json). A calibration of another model shape or batch is scaled by the work
ratio of each phase: generate by samples x response tokens x parameters, the train phases by
samples x sequence tokens x parameters, sync/offload and saves by parameters; init and launch
are not scaled. Without a calibration of this machine kind, a GPU forecast comes from machine
facts (peak bf16 FLOP/s and memory bandwidth of the GPU model, at the efficiencies the kept GPU
runs reached) and says so in its basis; a CPU kind without kept runs gets no forecast, and its
basis says which command to run to calibrate one.

On a CPU machine kind every phase shares the cores with whatever else runs there, so the
forecast is scaled by the load: each run records the 1-minute load average at its launch, and a
forecast multiplies by slowdown(load now) / slowdown(the calibration's load), where
slowdown(L) = max(1, (L + 1) / CPUs) (a runnable process's share of the cores once they are all
taken). It assumes the load at launch holds through the run; a load that changes mid-run is
what the pace verdict then shows.

GPU-hours = wall seconds x the GPUs the run holds / 3600 (0 on CPU).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vocabulary import Phase

KEPT_FILE = Path(__file__).resolve().parent / "data" / "forecast_kept.json"
ROLLOUT_PHASES = (Phase.GENERATE, Phase.ROLLOUT_OFFLOAD, Phase.CRITIC_TRAIN, Phase.ACTOR_TRAIN,
                  Phase.ROLLOUT_ONLOAD, Phase.UPDATE_WEIGHTS)
# which work measure scales each phase between shapes (see the README above)
SCALE_BY = {Phase.GENERATE: "decode", Phase.CRITIC_TRAIN: "train", Phase.ACTOR_TRAIN: "train",
            Phase.ROLLOUT_OFFLOAD: "params", Phase.ROLLOUT_ONLOAD: "params",
            Phase.UPDATE_WEIGHTS: "params", Phase.SAVE: "params"}

# machine facts per GPU model: (dense bf16 peak FLOP/s, memory bandwidth bytes/s), from the
# vendors' datasheets (SXM parts)
GPU_FACTS: dict[str, tuple[float, float]] = {
    "H200": (989e12, 4.8e12),
    "H100": (989e12, 3.35e12),
    "A100": (312e12, 2.0e12),
}


@dataclass(frozen=True)
class Work:
    """The quantities each phase's cost scales with."""

    params: int
    samples: int
    response_tokens: int
    seq_tokens: int

    def of(self, measure: str) -> float:
        if measure == "decode":
            return float(self.samples * self.response_tokens * self.params)
        if measure == "train":
            return float(self.samples * self.seq_tokens * self.params)
        return float(self.params)


@dataclass(frozen=True)
class Calibration:
    """One kept run's timings (or the median of several), on one machine kind."""

    machine: str
    source: str
    work: Work
    launch_s: float
    init_s: float
    first_extra_s: float
    phase_s: Mapping[str, float]  # seconds per steady rollout
    save_s: float | None = None
    wall_s: float | None = None
    load: float | None = None  # the machine's 1-min load average at the run's launch

    def as_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "source": self.source, "work": vars(self.work),
                "launch_s": self.launch_s, "init_s": self.init_s,
                "first_extra_s": self.first_extra_s, "phase_s": dict(self.phase_s),
                "save_s": self.save_s, "wall_s": self.wall_s, "load": self.load}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(machine=data["machine"], source=data["source"], work=Work(**data["work"]),
                   launch_s=float(data["launch_s"]), init_s=float(data["init_s"]),
                   first_extra_s=float(data["first_extra_s"]),
                   phase_s={k: float(v) for k, v in data["phase_s"].items()},
                   save_s=data.get("save_s"), wall_s=data.get("wall_s"),
                   load=data.get("load"))


@dataclass(frozen=True)
class Load:
    """How busy this machine is at launch: its 1-min load average and its CPUs."""

    average: float | None = None
    cpus: int | None = None

    def slowdown(self, average: float | None) -> float:
        """How much slower a CPU-bound run goes at `average` than on an idle machine: each
        runnable process gets cpus / (load + 1) of a core once the cores are all taken."""
        if average is None or not self.cpus:
            return 1.0
        return max(1.0, (average + 1.0) / self.cpus)


@dataclass(frozen=True)
class Forecast:
    seconds: float | None
    gpu_hours: float | None
    basis: str
    init_s: float | None = None
    phase_s: Mapping[str, float] = field(default_factory=dict)  # per rollout, steady

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": _round(self.seconds), "gpu_hours": _round(self.gpu_hours, 4),
                "basis": self.basis, "init_s": _round(self.init_s),
                "phase_s": {k: round(v, 4) for k, v in self.phase_s.items()}}

    def text(self) -> str:
        if self.seconds is None:
            return f"forecast: none ({self.basis})"
        hours = (f", {self.gpu_hours:.3g} GPU-hours" if self.gpu_hours
                 else ", no GPU-hours (a CPU run)")
        return f"forecast: {format_seconds(self.seconds)} launch to done{hours} ({self.basis})"


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


# --------------------------------------------------------------------------- the run's counts
@dataclass(frozen=True)
class Counts:
    rollouts: int
    actor_rollouts: int
    syncs: int
    saves: int
    gpus: int


def counts(r: Mapping[str, Any], gpus: int | None) -> Counts:
    n = int(r["num_rollout"] or 0)
    warmup = int(r["num_critic_only_steps"] or 0) if r["use_critic"] else 0
    interval = int(r["update_weights_interval"] or 1)
    saves = 0
    if r.get("save"):
        every = r.get("save_interval")
        saves = sum(1 for i in range(n) if i + 1 == n or (every and (i + 1) % every == 0))
    return Counts(n, max(0, n - warmup), n // interval, saves, gpus or 0)


def work_of(r: Mapping[str, Any], params: int | None, samples: int | None) -> Work | None:
    if not params or not samples:
        return None
    response = int(r["rollout_max_response_len"] or 0)
    prompt = int(r.get("max_prompt_len") or 0) or max(0, int(r["seq_length"] or 0) - response)
    return Work(params, samples, response, prompt + response)


# ------------------------------------------------------------------------------- forecasting
def forecast(r: Mapping[str, Any], work: Work | None, gpus: int | None, machine: str,
             calibrations: Sequence[Calibration], load: Load | None = None) -> Forecast:
    """The forecast of the resolved config `r` on a machine of kind `machine`; on a CPU kind,
    scaled by `load` (this machine's now) against the calibration runs' at their launch."""
    if work is None:
        return Forecast(None, None, "the model shape or batch is not set")
    if r.get("ray_address"):
        return Forecast(None, None, "the run joins a Ray cluster (--ray-address): its machines "
                                    "are not this one, and no kept run says how fast they are")
    c = counts(r, gpus if machine.startswith("gpu:") else 0)  # a CPU run holds no GPU
    same = [cal for cal in calibrations if cal.machine == machine]
    if same:
        cal = _nearest(same, work)
        out = _from_calibration(r, c, work, cal)
        return _under_load(out, cal, load) if machine.startswith("cpu:") else out
    facts = _gpu_facts(machine)
    if facts is not None and calibrations:
        return _from_facts(r, c, work, facts, machine, calibrations)
    return Forecast(None, None, f"no kept run on this machine kind ({machine or 'unknown'}): "
                                "run one (e.g. `ppodeck run tiny-cpu --set num-rollout=5`) to "
                                "calibrate")


def _under_load(out: Forecast, cal: Calibration, load: Load | None) -> Forecast:
    """Every phase of a CPU run shares the cores: scale the whole forecast by the slowdown at
    this load against the calibration's, and say so."""
    if load is None or load.average is None or cal.load is None or out.seconds is None:
        return out
    factor = load.slowdown(load.average) / load.slowdown(cal.load)
    if abs(factor - 1.0) < 0.01:
        return out
    basis = (f"{out.basis}; x{factor:.2f} for this machine's load ({load.average:.1f} now, "
             f"{cal.load:.1f} at the calibration's launch, {load.cpus} CPUs)")
    return Forecast(out.seconds * factor, out.gpu_hours, basis,
                    (out.init_s or 0.0) * factor, {p: s * factor for p, s in out.phase_s.items()})


def _nearest(calibrations: Sequence[Calibration], work: Work) -> Calibration:
    """The median of the calibrations of the closest shape (parameters, then samples)."""
    def distance(cal: Calibration) -> tuple[float, float]:
        return (abs(math.log(cal.work.params / work.params)),
                abs(math.log(cal.work.samples / work.samples)))

    best = min(distance(cal) for cal in calibrations)
    group = [cal for cal in calibrations if distance(cal) == best]
    return _median(group)


def _median(group: Sequence[Calibration]) -> Calibration:
    if len(group) == 1:
        return group[0]
    phases = {name for cal in group for name in cal.phase_s}
    saves = [cal.save_s for cal in group if cal.save_s is not None]
    loads = [cal.load for cal in group if cal.load is not None]
    return Calibration(
        machine=group[0].machine, source=f"the median of {len(group)} {_kinds(group)}",
        work=group[0].work, launch_s=statistics.median(c.launch_s for c in group),
        init_s=statistics.median(c.init_s for c in group),
        first_extra_s=statistics.median(c.first_extra_s for c in group),
        phase_s={p: statistics.median(c.phase_s.get(p, 0.0) for c in group) for p in phases},
        save_s=statistics.median(saves) if saves else None,
        load=statistics.median(loads) if len(loads) == len(group) else None)


def _kinds(group: Sequence[Calibration]) -> str:
    local = sum(cal.source.startswith("run ") for cal in group)
    if local == len(group):
        return "runs here"
    return "kept runs" if not local else f"runs ({local} here, {len(group) - local} kept)"


def _from_calibration(r: Mapping[str, Any], c: Counts, work: Work,
                      cal: Calibration) -> Forecast:
    ratio = {m: work.of(m) / cal.work.of(m) for m in ("decode", "train", "params")}
    phase_s = {p: s * ratio[SCALE_BY[p]] for p, s in cal.phase_s.items()}
    save_s = (cal.save_s or 0.0) * ratio["params"]
    seconds = _total(c, cal.launch_s, cal.init_s, cal.first_extra_s, phase_s, save_s)
    scaled = "" if cal.work == work else ", scaled by each phase's work"
    basis = f"{cal.source} on {cal.machine}{scaled}"
    return Forecast(seconds, _gpu_hours(seconds, c.gpus), basis, cal.init_s, phase_s)


def _total(c: Counts, launch_s: float, init_s: float, first_extra_s: float,
           phase_s: Mapping[str, float], save_s: float) -> float:
    per_phase_count = {Phase.ACTOR_TRAIN: c.actor_rollouts, Phase.UPDATE_WEIGHTS: c.syncs}
    body = sum(s * per_phase_count.get(p, c.rollouts) for p, s in phase_s.items())
    first = first_extra_s if c.rollouts else 0.0
    return launch_s + init_s + first + body + c.saves * save_s


def _gpu_hours(seconds: float, gpus: int) -> float:
    return seconds * gpus / 3600


def _gpu_facts(machine: str) -> tuple[float, float] | None:
    if not machine.startswith("gpu:"):
        return None
    for model, facts in GPU_FACTS.items():
        if model in machine:
            return facts
    return None


def _from_facts(r: Mapping[str, Any], c: Counts, work: Work, facts: tuple[float, float],
                machine: str, calibrations: Sequence[Calibration]) -> Forecast:
    """No kept run of this GPU: each kept GPU run scaled to this one by the ratio of the two
    GPUs' peaks (decode by bandwidth, train by FLOP/s), then the nearest by work. Each run is
    scaled from its own GPU before any median, so runs of two GPU kinds never mix unscaled."""
    gpu_runs = [cal for cal in calibrations if _gpu_facts(cal.machine) is not None]
    if not gpu_runs:
        return Forecast(None, None, f"no kept GPU run to scale to {machine}")
    cal = _nearest([_scaled_to(cal, facts, machine) for cal in gpu_runs], work)
    out = _from_calibration(r, c, work, cal)
    basis = (f"machine facts: {cal.source}, scaled to {machine} by peak FLOP/s (train) and "
             f"memory bandwidth (decode); no kept run of this GPU")
    return Forecast(out.seconds, out.gpu_hours, basis, out.init_s, out.phase_s)


def _scaled_to(cal: Calibration, facts: tuple[float, float], machine: str) -> Calibration:
    kept = _gpu_facts(cal.machine)
    assert kept is not None
    speed = {"decode": facts[1] / kept[1], "train": facts[0] / kept[0], "params": 1.0}
    return Calibration(
        machine=machine, source=f"{cal.source} on {cal.machine}", work=cal.work,
        launch_s=cal.launch_s, init_s=cal.init_s, first_extra_s=cal.first_extra_s,
        save_s=cal.save_s, phase_s={p: s / speed[SCALE_BY[p]] for p, s in cal.phase_s.items()})


# ---------------------------------------------------------------------------- kept evidence
@functools.cache
def kept_calibrations(path: Path = KEPT_FILE) -> tuple[Calibration, ...]:
    """The calibrations versioned with the code (kept runs' evidence), read once."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return ()
    return tuple(Calibration.from_dict(item) for item in data.get("calibrations", []))
