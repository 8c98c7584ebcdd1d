"""The forecast (engine/config/forecast.py) on calibrations built from event streams, the pace
verdict and its health rule (engine/run/pace.py), and `validate --json`'s forecast keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.config import check, resolve
from ppodeck.engine.config.forecast import (
    Calibration,
    Load,
    Work,
    forecast,
    kept_calibrations,
    work_of,
)
from ppodeck.engine.launch.local import prepare_run
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.health import HealthJudge, RunFacts
from ppodeck.engine.run.pace import (
    PaceWatch,
    calibration_of,
    judge_pace,
    local_calibrations,
    phase_times,
    save_badge,
)
from ppodeck.engine.run.rundir import write_status
from tests.conftest import CPU_MACHINE

KIND = "cpu: test CPU x2"
# seconds per rollout of a made-up run: generate, critic and actor train, sync
STEADY = {"generate": 0.4, "critic_train": 0.2, "actor_train": 0.3, "update_weights": 0.05}


def _events(rollouts: int, scale: dict[str, float] | None = None, t0: float = 1000.0,
            init_s: float = 40.0, warmup: int = 1) -> list[dict]:
    """A driver's phase events: init, then each rollout's phases back to back; the first
    time of each phase takes 1 s more (the compile)."""
    events = [{"kind": "phase", "name": "init", "state": "start", "rollout_id": None, "ts": t0},
              {"kind": "phase", "name": "init", "state": "end", "rollout_id": None,
               "ts": t0 + init_s, "seconds": init_s}]
    ts, seen = t0 + init_s, set()
    for rid in range(rollouts):
        for name, seconds in STEADY.items():
            if name == "actor_train" and rid < warmup:
                continue
            seconds *= (scale or {}).get(name, 1.0)
            seconds += 1.0 if name not in seen else 0.0
            seen.add(name)
            events.append({"kind": "phase", "name": name, "state": "start", "rollout_id": rid,
                           "ts": ts})
            ts += seconds
            events.append({"kind": "phase", "name": name, "state": "end", "rollout_id": rid,
                           "ts": ts, "seconds": seconds})
        events.append({"kind": "metrics", "step_key": "rollout/step", "step": rid,
                       "rollout_id": rid, "metrics": {"rollout/raw_reward": 0.1}, "ts": ts})
    return events


def _finished_run(runs_dir: Path, rollouts: int) -> Path:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=rollouts)
    rundir = prepare_run(config, "tiny-cpu")
    events = _events(rollouts, t0=2000.0)
    rundir.events_jsonl.write_text("".join(json.dumps(e) + "\n" for e in events))
    write_status(rundir, state="succeeded", machine=KIND, created=1998.0,
                 ended=events[-1]["ts"] + 1.0)
    return rundir.path


def test_a_finished_run_is_a_calibration_and_forecasts_its_own_wall_time(runs_dir) -> None:
    path = _finished_run(runs_dir, 10)
    (cal,) = local_calibrations(KIND)
    assert cal.source == f"run {path.name}" and cal.init_s == 40.0
    assert cal.phase_s == pytest.approx(STEADY)
    assert cal.first_extra_s == pytest.approx(4.0)  # four phases, one extra second each
    assert cal.launch_s == pytest.approx(3.0)
    r = resolve(resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=10), os.environ)
    report = check(resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=10),
                   replace(CPU_MACHINE, kind=KIND, calibrations=(cal,)))
    assert report.forecast.seconds == pytest.approx(cal.wall_s, rel=1e-6)
    assert report.forecast.gpu_hours == 0 and f"run {path.name}" in report.forecast.basis
    assert r["num_rollout"] == 10


def test_a_cli_launch_counts_from_the_command_start_not_the_run_directory(runs_dir) -> None:
    """`ppodeck run` records when its process started (`launched`): the imports and check()
    before the run directory are part of the wait the forecast is for."""
    path = _finished_run(runs_dir, 10)
    (plain,) = local_calibrations(KIND)
    status = json.loads((path / "status.json").read_text())
    (path / "status.json").write_text(json.dumps({**status, "launched": 1995.5}))
    (cal,) = local_calibrations(KIND)
    assert cal.launch_s == pytest.approx(plain.launch_s + 2.5)
    assert cal.wall_s == pytest.approx(plain.wall_s + 2.5)


def test_the_cli_run_hands_its_command_start_to_the_run_directory(monkeypatch) -> None:
    from ppodeck.app.cli import launch
    from ppodeck.engine.launch import local

    seen: dict = {}
    monkeypatch.setattr(local, "prepare_run", lambda *a, **kw: seen.update(kw) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        launch._launch(resolve_preset(load_preset("tiny-cpu")), "tiny-cpu", None)
    started = seen["launched"]
    assert started is not None and started <= time.time()
    assert time.time() - started < 24 * 3600  # this process's own start, not the machine's


def test_the_forecast_scales_with_rollouts_and_work() -> None:
    work = Work(params=1000, samples=100, response_tokens=10, seq_tokens=20)
    cal = Calibration(KIND, "run x", work, launch_s=2.0, init_s=40.0, first_extra_s=4.0,
                      phase_s=STEADY)
    r = resolve(resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=30), os.environ)
    base = forecast(r, work, 0, KIND, [cal])
    expected = 46.0 + 30 * (0.4 + 0.2 + 0.05) + 29 * 0.3  # the actor sits out the warmup
    assert base.seconds == pytest.approx(expected)
    double = forecast(r, replace(work, samples=200), 0, KIND, [cal])
    assert double.seconds == pytest.approx(expected + 30 * 0.6 + 29 * 0.3)
    assert "scaled by each phase's work" in double.basis
    assert forecast(r, work, 1, KIND, [cal]).gpu_hours == 0  # a CPU kind holds no GPU
    gpu = replace(cal, machine="gpu: NVIDIA H200 x2")
    assert forecast(r, work, 2, gpu.machine, [gpu]).gpu_hours == pytest.approx(
        2 * expected / 3600)


def test_a_busier_cpu_machine_gets_a_longer_forecast_and_says_why() -> None:
    work = Work(params=1000, samples=100, response_tokens=10, seq_tokens=20)
    cal = Calibration(KIND, "run x", work, launch_s=2.0, init_s=40.0, first_extra_s=4.0,
                      phase_s=STEADY, load=3.0)  # slowdown (3 + 1) / 2 = 2
    r = resolve(resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=30), os.environ)
    base = forecast(r, work, 0, KIND, [cal])
    busy = forecast(r, work, 0, KIND, [cal], Load(average=7.0, cpus=2))  # slowdown 4
    assert busy.seconds == pytest.approx(2 * base.seconds)
    assert "x2.00 for this machine's load (7.0 now, 3.0 at the calibration's launch" in busy.basis
    idle = forecast(r, work, 0, KIND, [cal], Load(average=0.2, cpus=2))  # slowdown 1
    assert idle.seconds == pytest.approx(base.seconds / 2)
    same = forecast(r, work, 0, KIND, [cal], Load(average=3.0, cpus=2))
    assert same.seconds == pytest.approx(base.seconds) and same.basis == base.basis


def test_no_calibration_of_this_kind_says_how_to_get_one() -> None:
    r = resolve(resolve_preset(load_preset("tiny-cpu")), os.environ)
    work = Work(1000, 100, 10, 20)
    other = Calibration("cpu: other x64", "run y", work, 1.0, 1.0, 0.0, STEADY)
    out = forecast(r, work, 0, KIND, [other])
    assert out.seconds is None and "no kept run on this machine kind" in out.basis


def test_a_gpu_without_its_own_runs_is_scaled_from_kept_evidence_by_machine_facts() -> None:
    kept = kept_calibrations()
    assert any(c.machine == "gpu: NVIDIA H200 x1" for c in kept)
    config = resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")).with_values(
        rollout_backend="hf", num_rollout=3)
    r = resolve(config, os.environ)
    assert not any("A100" in c.machine for c in kept)
    report = check(config, replace(CPU_MACHINE, gpus=1, kind="gpu: NVIDIA A100-SXM4-80GB x1",
                                   calibrations=kept))
    assert report.forecast.basis.startswith("machine facts")
    for kind in ("gpu: NVIDIA H200 x1", "gpu: NVIDIA H100 80GB HBM3 x1"):  # the kept GPUs
        own = check(config, replace(CPU_MACHINE, gpus=1, kind=kind, calibrations=kept)).forecast
        assert "scaled" not in own.basis
        for phase in ("generate", "actor_train", "critic_train"):  # slower decode and matmuls
            assert report.forecast.phase_s[phase] > own.phase_s[phase]
    assert report.forecast.gpu_hours == pytest.approx(report.forecast.seconds / 3600)
    assert r["num_rollout"] == 3


def test_the_forecast_of_the_kept_h200_run_is_within_20_percent_of_another_kept_run() -> None:
    """The kept calibration (dddab8d, 6 rollouts) against bench/results/e2e-qwen3-0.6b-369204e
    (3 rollouts, 87.0 s from its first event to its last)."""
    config = resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")).with_values(
        rollout_backend="hf", num_rollout=3)
    out = check(config, replace(CPU_MACHINE, gpus=1, kind="gpu: NVIDIA H200 x1",
                                calibrations=kept_calibrations())).forecast
    assert abs(out.seconds / 87.03 - 1) <= 0.20


def test_validate_json_carries_the_forecast(runs_dir) -> None:
    result = CliRunner().invoke(app, ["validate", "tiny-cpu", "--json"])
    forecast_out = json.loads(result.stdout)["forecast"]
    assert set(forecast_out) >= {"seconds", "gpu_hours", "basis"}
    assert forecast_out["basis"]  # says what it is calibrated from, or why there is none


def test_pace_names_the_phase_that_costs_the_most_over_its_forecast() -> None:
    expected = {"phase_s": STEADY}
    assert judge_pace(phase_times(_events(6)), expected).text == "on pace"
    slow = judge_pace(phase_times(_events(6, {"generate": 2.1})), expected)
    assert slow.text.endswith("slower: generate 2.1x its forecast")
    assert slow.text.startswith(f"{(slow.ratio - 1) * 100:.0f}%")
    assert judge_pace(phase_times(_events(6)), None).ratio is None


def test_the_follower_prints_pace_when_it_changes() -> None:
    watch = PaceWatch({"phase_s": STEADY})
    lines = [line for e in _events(5, {"actor_train": 4.0}) if (line := watch.after(e))]
    assert lines[-1] == "pace: 95% slower: actor train 4.0x its forecast"
    assert all(a != b for a, b in zip(lines, lines[1:], strict=False))  # only changes


def test_health_warns_when_a_run_is_far_off_its_pace() -> None:
    facts = RunFacts(forecast={"phase_s": STEADY})
    judge = HealthJudge(facts=facts)
    judge.feed(_events(8, {"generate": 6.0}))
    judge.finish()
    (finding,) = [f for f in judge.findings if f.code == "health.pace_far_off"]
    assert finding.metric == "generate" and "generate" in finding.message
    calm = HealthJudge(facts=facts)
    calm.feed(_events(8))
    calm.finish()
    assert not [f for f in calm.findings if f.code == "health.pace_far_off"]


def test_the_save_badge() -> None:
    ok = {"kind": "log", "save_check": {"rollout_id": 4, "ok": True, "damage": []}}
    bad = {"kind": "log", "save_check": {"rollout_id": 9, "ok": False, "damage": ["x"]}}
    assert save_badge([]) == "-" and save_badge([ok, ok]) == "ok x2"
    assert save_badge([ok, bad]) == "DAMAGED r9"


def test_check_with_local_runs_stays_fast(runs_dir) -> None:
    _finished_run(runs_dir, 5)
    config = resolve_preset(load_preset("tiny-cpu"))
    machine = replace(CPU_MACHINE, kind=KIND, calibrations=tuple(local_calibrations(KIND)))
    start = time.perf_counter()
    for _ in range(20):
        check(config, machine)
    assert (time.perf_counter() - start) / 20 < 0.05
    assert calibration_of is not None and work_of is not None


def test_pace_reads_a_watched_miles_run_from_its_own_timers(runs_dir) -> None:
    """tests/data/miles_dump's timers (rollout, actor_train, update_weights per rank), read by
    the watch adapter, judged against a forecast of the same per-rollout seconds."""
    from ppodeck.engine.miles.watch import open_dump

    rundir, _ = open_dump(Path(__file__).parents[1] / "data" / "miles_dump", runs_dir)
    events, _ = read_events(rundir.events_jsonl)
    times = phase_times(events)
    observed = times.median_per_phase()
    assert observed["generate"] == pytest.approx(40.0)  # the rollout manager's interval
    assert observed["actor_train"] == pytest.approx(39.3, abs=0.05)  # the slower rank
    assert judge_pace(times, {"phase_s": observed}).text == "on pace"
    slow = judge_pace(times, {"phase_s": {**observed, "generate": 20.0}})
    assert "generate 2.0x its forecast" in slow.text


def test_the_kept_calibrations_match_their_evidence() -> None:
    """engine/config/data/forecast_kept.json is what bench/forecast_kept.py makes of the kept
    bench/results files (one home per fact: the file is derived, never edited by hand)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "bench" / "forecast_kept.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_a_gpu_with_its_own_kept_run_is_forecast_from_it_not_scaled() -> None:
    """The H100 run kept from the GPU session (bench/results/forecast-qwen3-0.6b-h100) is this
    GPU kind's calibration: no machine-facts scaling."""
    config = resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")).with_values(
        rollout_backend="hf", num_rollout=12)
    out = check(config, replace(CPU_MACHINE, gpus=1, kind="gpu: NVIDIA H100 80GB HBM3 x1",
                                calibrations=kept_calibrations())).forecast
    assert out.basis.startswith("kept evidence bench/results/forecast-qwen3-0.6b-h100")
    assert "scaled" not in out.basis
