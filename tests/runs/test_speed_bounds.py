"""The speed verdict (engine/run/bounds.py): each phase of a step against this machine's bounds
(engine/host/probe.py), on generated event files of our driver and on miles' own dump, its
health rule, and the lines `tail`, `runs ls` and bench/phase_bounds.py print."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.driver.mfu import mfu_metrics, phase_flops
from ppodeck.engine.host.probe import (
    MachineFacts,
    cpu_memcpy_gbps,
    read_facts,
    start_probe,
    write_facts,
)
from ppodeck.engine.run.bounds import SpeedContext, SpeedWatch, judge_speed, run_speed
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.health import HealthJudge, RunFacts
from ppodeck.engine.run.rundir import RunDir, write_status

ROOT = Path(__file__).resolve().parents[2]
GPU = "gpu: NVIDIA H100 80GB HBM3 x1"
CPU = "cpu: test CPU x2"
# bench/results/gpu-bounds-h100: what a lent H100 did
H100 = MachineFacts(GPU, 0.0, cpu_memcpy_GBps=10.0, h2d_pinned_GBps=54.9, d2h_pinned_GBps=55.0,
                    hbm_read_write_GBps=3003.3, bf16_matmul_TFLOPs=779.8)
CPU_FACTS = MachineFacts(CPU, 0.0, cpu_memcpy_GBps=10.0, cpu_fp32_matmul_TFLOPs=0.05)
# one steady step of 10 s: the rollout's offload moves 16.12 GB in 6.2 s (2.6 GB/s)
STEP = {"generate": 1.0, "rollout_offload": 6.2, "critic_train": 1.0, "actor_train": 1.0,
        "rollout_onload": 0.5, "update_weights": 0.3}
MOVES = {"rollout_offload": ("offload", 16.12e9, 6.2), "rollout_onload": ("onload", 20e9, 0.5)}


def driver_events(rollouts: int, step: dict[str, float] | None = None,
                  offload_gbps: float | None = None) -> list[dict]:
    """Our driver's events: each rollout's phases back to back, the rollout's moves inside
    their phases, the weight sync's record, the rollout metrics with the train phases' FLOP/s;
    the first rollout takes 5 s more (warm-ups)."""
    step = step or STEP
    events, ts = [], 1000.0
    for rid in range(rollouts):
        for name, seconds in step.items():
            seconds += 5.0 if rid == 0 and name == "generate" else 0.0
            events.append({"kind": "phase", "name": name, "state": "start",
                           "rollout_id": rid, "ts": ts})
            if name in MOVES:
                direction, nbytes, took = MOVES[name]
                if offload_gbps is not None and direction == "offload":
                    nbytes = offload_gbps * 1e9 * took
                events.append({"kind": "offload", "model": "rollout", "direction": direction,
                               "bytes": nbytes, "seconds": took, "noop": False,
                               "ts": ts + took})
            if name == "update_weights":
                events.append({"kind": "log", "level": "info", "source": "driver",
                               "msg": "weight sync", "sync_path": "packed_host",
                               "sync_bytes": 1.2e9, "ts": ts + seconds})
            ts += seconds
            events.append({"kind": "phase", "name": name, "state": "end", "rollout_id": rid,
                           "ts": ts, "seconds": seconds})
        events.append({"kind": "metrics", "step_key": "rollout/step", "step": rid,
                       "rollout_id": rid, "ts": ts, "metrics": {
                           "rollout/response_len/mean": 100.0,
                           "perf/critic_train_tflops": 40.0, "perf/actor_train_tflops": 60.0}})
    return events


def test_the_verdict_names_the_phase_that_loses_most_against_its_bound() -> None:
    ctx = SpeedContext(GPU, H100, params=600_000_000, samples=64)
    speed = judge_speed(driver_events(6), ctx, ended=True)
    assert speed.text == "offload: 62% of the step at 2.6 GB/s; a pinned copy here does 55 GB/s"
    assert speed.rollouts == 5 and speed.step_s == pytest.approx(10.0)  # rollout 0 left out
    phases = {p.phase: p for p in speed.phases}
    assert phases["onload"].rate == pytest.approx(40.0)
    assert phases["onload"].bound == pytest.approx(54.9)
    # 64 samples x 100 tokens in 1 s against 64 x 3003.3 GB/s / 1.2 GB of bf16 weights
    assert phases["generate"].rate == pytest.approx(6400.0)
    assert phases["generate"].bound == pytest.approx(64 * 3003.3e9 / 1.2e9)
    assert phases["update_weights"].rate == pytest.approx(1.2 / 0.3)  # the recorded bytes
    assert speed.mfu == pytest.approx({"critic": 40.0 / 779.8, "actor": 60.0 / 779.8})
    assert "(7.7% MFU)" in phases["actor_train"].text()
    fast = judge_speed(driver_events(6, offload_gbps=50.0), ctx, ended=True)
    assert fast.worst is not None and fast.worst.phase != "offload"


def test_a_live_run_judges_only_finished_steady_rollouts() -> None:
    ctx = SpeedContext(GPU, H100, params=600_000_000, samples=64)
    assert judge_speed(driver_events(3), ctx).rollouts == 1  # rollout 2 may be under way
    assert judge_speed(driver_events(3), ctx, ended=True).rollouts == 2
    assert judge_speed(driver_events(2), ctx).text == "no steady rollout yet"
    watch = SpeedWatch(ctx)
    lines = [line for line in map(watch.after, driver_events(4)) if line]
    assert lines == ["speed: offload: 62% of the step at 2.6 GB/s; a pinned copy here does "
                     "55 GB/s"]  # shown once: the verdict did not change
    assert watch.end() is None


def test_a_move_beside_other_work_costs_the_step_only_what_was_waited() -> None:
    """The driver overlaps moves with other work (a prefetch during generate): `waited_seconds`
    is what the step paid; the copy's rate is still its bytes over its own seconds."""
    events = driver_events(6)
    for event in events:
        if event["kind"] == "offload" and event["direction"] == "offload":
            event["waited_seconds"] = 0.1
    ctx = SpeedContext(GPU, H100, params=600_000_000, samples=64)
    phases = {p.phase: p for p in judge_speed(events, ctx, ended=True).phases}
    assert phases["offload"].share == pytest.approx(0.01)
    assert phases["offload"].rate == pytest.approx(2.6)
    assert phases["offload"].lost_s < 0.1


def test_a_phase_first_run_after_the_first_rollout_waits_for_its_second_time() -> None:
    """With a critic-only warmup the actor first trains (and compiles) in rollout 1: steady
    rollouts start after it."""
    events = [e for e in driver_events(5) if not (e.get("name") == "actor_train"
                                                  and e.get("rollout_id") == 0)]
    ctx = SpeedContext(GPU, H100, params=600_000_000, samples=64)
    assert judge_speed(events, ctx, ended=True).rollouts == 3  # rollouts 2, 3, 4


def test_without_machine_facts_the_verdict_says_how_to_get_them() -> None:
    speed = judge_speed(driver_events(4), SpeedContext(GPU, None), ended=True)
    assert speed.worst is None
    assert speed.text.startswith(f"no machine facts for {GPU}")
    assert "python -m ppodeck.engine.host.probe" in speed.text


def test_on_cpu_train_is_held_against_the_cpu_matmul_and_moves_against_memcpy() -> None:
    ctx = SpeedContext(CPU, CPU_FACTS, params=100_000, bytes_per_param=4, samples=128)
    speed = judge_speed(driver_events(4), ctx, ended=True)
    phases = {p.phase: p for p in speed.phases}
    assert phases["offload"].bound == 10.0
    assert phases["offload"].bound_text == "a memcpy here does 10 GB/s"
    assert phases["actor_train"].bound == 0.05
    assert "fp32 CPU matmul" in phases["actor_train"].bound_text


def test_a_miles_dump_is_judged_from_its_own_timers(runs_dir, tmp_path) -> None:
    """tests/data/miles_events_dump: what miles' train.py wrote on an H100 (5 rollouts, PPO with
    a critic): its rollout, actor_train, sleep and wake_up timers and its perf/ metrics."""
    from ppodeck.engine.miles.watch import open_dump

    dump = shutil.copytree(ROOT / "tests" / "data" / "miles_events_dump", tmp_path / "dump")
    rundir, _ = open_dump(dump, runs_dir)
    events, _ = read_events(rundir.events_jsonl)
    ctx = SpeedContext(GPU, H100, params=600_000_000, samples=64)
    speed = judge_speed(events, ctx, ended=True)
    # rollout 0 trains the critic alone; the actor's first train (rollout 1) compiles: both out
    assert speed.rollouts == 3
    phases = {p.phase: p for p in speed.phases}
    actor = [e["metrics"]["perf/actor_train_tflops"] for e in events
             if e["kind"] == "metrics" and "perf/actor_train_tflops" in e["metrics"]
             and e["rollout_id"] >= 2]
    assert speed.mfu["actor"] == pytest.approx(statistics.fmean(actor) / 779.8)
    assert phases["offload"].rate is None  # miles' sleep timer: seconds, no bytes
    assert "records no bytes moved" in phases["offload"].text()
    generate = [e["seconds"] for e in events if e["kind"] == "phase" and e["state"] == "end"
                and e["name"] == "generate" and e["rollout_id"] >= 2]
    assert phases["generate"].seconds == pytest.approx(statistics.fmean(generate))
    assert speed.worst is not None and speed.worst.phase == "actor_train"
    assert speed.text.startswith("actor train: ") and "MFU); a bf16 matmul here" in speed.text


def test_health_names_a_phase_far_below_its_bound_on_gpu_only() -> None:
    gpu = RunFacts(speed=SpeedContext(GPU, H100, params=600_000_000, samples=64))
    judge = HealthJudge(facts=gpu)
    judge.feed(driver_events(6, offload_gbps=2.0))  # 2 / 55 = 3.6% of a pinned copy
    judge.finish()
    (finding,) = [f for f in judge.findings if f.code == "health.speed_below_bound"]
    assert finding.metric == "offload" and finding.message.startswith("offload: 62% of the step")
    assert finding.value == pytest.approx(2.0 / 55.0, rel=1e-3) and finding.threshold == 0.05
    assert "pinned host buffers" in finding.fix
    at_five = HealthJudge(facts=gpu)  # 2.6 / 55 = 4.7%: still below 5%
    at_five.feed(driver_events(6))
    at_five.finish()
    assert [f.metric for f in at_five.findings if f.code == "health.speed_below_bound"] == [
        "offload"]
    fast = HealthJudge(facts=gpu)
    fast.feed(driver_events(6, offload_gbps=20.0))
    fast.finish()
    assert not [f for f in fast.findings if f.code == "health.speed_below_bound"]
    cpu = HealthJudge(facts=RunFacts(speed=SpeedContext(CPU, CPU_FACTS)))
    cpu.feed(driver_events(6, offload_gbps=0.1))
    cpu.finish()
    assert not [f for f in cpu.findings if f.code == "health.speed_below_bound"]


def test_the_probe_caches_facts_per_machine_kind(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path))
    write_facts(H100)
    write_facts(CPU_FACTS)
    assert read_facts(GPU) == H100 and read_facts(CPU) == CPU_FACTS
    assert read_facts("gpu: other x8") is None
    cached = start_probe(GPU)
    assert cached.facts == H100 and cached.process is None
    assert "pinned H2D 54.9 GB/s" in cached.line() and "bf16 matmul 779.8 TFLOP/s" in cached.line()
    assert cpu_memcpy_gbps(4 * 2**20, repeats=2) > 0
    older = {GPU: {"kind": GPU, "measured_at": 1.0, "memory_gbps": 23.2}}  # another probe's
    (tmp_path / "machine-facts.json").write_text(json.dumps(older))
    assert read_facts(GPU) is None  # probed again, not taken as a machine with no bounds
    (tmp_path / "machine-facts.json").write_text("{not json")
    assert read_facts(GPU) is None  # unreadable: probed again, never a traceback


def test_a_first_probe_measures_this_machine_in_its_own_process(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path))
    probe = start_probe("cpu: a kind never probed x1", wait_s=0.0)
    assert probe.facts is None and probe.process is not None  # the launch does not wait
    assert "probing cpu: a kind never probed x1 for the first time" in probe.line()
    probe.process.wait(timeout=300)  # torch imports slowly on a loaded machine
    facts = probe.poll()
    assert facts is not None and facts.cpu_memcpy_GBps and facts.cpu_memcpy_GBps > 0
    assert not facts.on_gpu and read_facts("cpu: a kind never probed x1") == facts


def test_mfu_uses_the_measured_peak_when_the_probe_has_one() -> None:
    args = {"with_ref": False, "world_size": 2}
    spent = {"actor": 4.0}
    out = mfu_metrics(args, 600_000_000, 64 * 272, spent, "gpu: NVIDIA H100 x2", H100)
    achieved = phase_flops(args, 600_000_000, 64 * 272, "actor") / 4.0
    assert out["perf/actor_train_mfu"] == pytest.approx(achieved / (2 * 779.8e12))
    assert out["perf/mfu_peak_tflops"] == pytest.approx(779.8)
    datasheet = mfu_metrics(args, 600_000_000, 64 * 272, spent, "gpu: NVIDIA H100 x2")
    assert datasheet["perf/mfu_peak_tflops"] == pytest.approx(989.0)
    on_cpu = mfu_metrics(args, 600_000_000, 64 * 272, spent, CPU, CPU_FACTS)
    assert on_cpu["perf/actor_train_mfu"] == pytest.approx(achieved / 0.05e12)


# ---------------------------------------------------------------------------------- the CLI
def _run_with_facts(runs_dir: Path, tmp_path: Path, monkeypatch, offload_gbps: float = 2.6
                    ) -> RunDir:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    write_facts(H100)
    rundir = RunDir(runs_dir / "261206-120000-speed-0001")
    rundir.path.mkdir(parents=True)
    events = driver_events(6, offload_gbps=offload_gbps)
    rundir.events_jsonl.write_text("".join(json.dumps({"v": 1, **e}) + "\n" for e in events))
    write_status(rundir, state="succeeded", machine=GPU, created=990.0, started=990.0,
                 ended=1100.0, rollout_id=5, num_rollout=6, preset="made-up")
    return rundir


def test_tail_prints_the_speed_line(runs_dir, tmp_path, monkeypatch) -> None:
    rundir = _run_with_facts(runs_dir, tmp_path, monkeypatch)
    out = CliRunner().invoke(app, ["tail", rundir.id])
    assert out.exit_code == 0, out.output
    speed = [line for line in out.stdout.splitlines() if line.startswith("speed:")]
    assert speed == ["speed: offload: 62% of the step at 2.6 GB/s; a pinned copy here does "
                     "55 GB/s"]
    events_only = CliRunner().invoke(app, ["tail", rundir.id, "--kind", "offload"])
    assert "speed:" not in events_only.stdout


def test_runs_ls_has_a_speed_column_and_json(runs_dir, tmp_path, monkeypatch) -> None:
    _run_with_facts(runs_dir, tmp_path, monkeypatch)
    table = CliRunner().invoke(app, ["runs", "ls"])
    assert table.exit_code == 0, table.output
    header, row = table.stdout.splitlines()[:2]
    assert "speed" in header.split() and "offload 4.7% of bound, 62% of step" in row
    [listed] = json.loads(CliRunner().invoke(app, ["runs", "ls", "--json"]).stdout)
    assert listed["speed"]["worst"] == "offload"
    assert listed["speed"]["mfu"]["actor"] == pytest.approx(60.0 / 779.8)


def test_bench_phase_bounds_prints_the_verdict(runs_dir, tmp_path, monkeypatch) -> None:
    rundir = _run_with_facts(runs_dir, tmp_path, monkeypatch)
    assert run_speed(rundir.path).worst is not None
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "phase_bounds.py"),
                          str(rundir.path), "--json"], capture_output=True, text=True,
                         check=True, timeout=120)
    verdict = json.loads(out.stdout)
    assert verdict["verdict"].startswith("offload: 62% of the step at 2.6 GB/s")
    assert [p["phase"] for p in verdict["phases"]] == [
        "generate", "offload", "critic_train", "actor_train", "onload", "update_weights"]
    text = subprocess.run([sys.executable, str(ROOT / "bench" / "phase_bounds.py"),
                           str(rundir.path)], capture_output=True, text=True, check=True,
                          timeout=120).stdout
    assert "speed: offload: 62% of the step" in text and "pinned D2H 55 GB/s" in text
