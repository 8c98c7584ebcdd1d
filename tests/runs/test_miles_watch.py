"""A miles --dump-details directory (tests/data/miles_dump, written by miles' own code) is a run
for runs add/ls, tail, health, compare and plot; it is only read, and a growing one is followed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.miles.watch import dump_of, find_registered, sync
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status
from ppodeck.engine.run.state import RunState

DUMP = Path(__file__).resolve().parents[1] / "data" / "miles_dump"
REPO = Path(__file__).resolve().parents[2]
HOUR = 3600.0


def miles_metrics() -> list[dict]:
    return [json.loads(line) for line in
            (DUMP / "dashboard" / "metrics.jsonl").read_text().splitlines()]


def copy_dump(dest: Path, age_s: float = HOUR) -> Path:
    shutil.copytree(DUMP, dest)
    stamp = time.time() - age_s
    for path in dest.rglob("*"):
        os.utime(path, (stamp, stamp))
    return dest


def digest(root: Path) -> dict[str, str]:
    """Every file's bytes and mtime: what 'read-only' must leave as it was."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            + f"@{p.stat().st_mtime_ns}" for p in sorted(root.rglob("*")) if p.is_file()}


def invoke(*args: str) -> object:
    result = CliRunner().invoke(app, list(args))
    return result


def test_a_finished_dump_is_a_run_everywhere_and_stays_byte_for_byte(runs_dir, tmp_path
                                                                      ) -> None:
    dump = copy_dump(tmp_path / "dump")
    before = digest(dump)

    added = invoke("runs", "add", str(dump))
    assert added.exit_code == 0, added.output
    run_id = added.stdout.strip()
    rundir = RunDir(runs_dir / run_id)
    assert dump_of(rundir) == dump.resolve() and find_registered(dump) == rundir

    [listed] = json.loads(invoke("runs", "ls", "--json").stdout)
    assert (listed["id"], listed["state"], listed["preset"]) == (run_id, "ended",
                                                                 "miles:dummy-telemetry")
    assert listed["rollout_id"] == 2 and listed["health"] == "1 warn"

    # tail --json: miles' records with miles' values and steps, in miles' order
    tailed = invoke("tail", str(dump), "--json", "--kind", "metrics")
    assert tailed.exit_code == 0, tailed.output
    got = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert [(e["step_key"], e["step"], e["metrics"]) for e in got] == [
        (m["step_key"], m["step"], m["metrics"]) for m in miles_metrics()]
    # a train step belongs to the rollout whose rollout/step came before it
    train = [(e["step"], e["rollout_id"]) for e in got if e["step_key"] == "train/step"]
    assert train == [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)]

    health = invoke("health", str(dump), "--json")
    assert health.exit_code == 0, health.output
    report = json.loads(health.stdout)
    assert report["state"] == "ended" and report["rollouts_judged"] == 3
    assert [(f["code"], f["rollout_id"], f["value"]) for f in report["findings"]] == [
        ("health.clipfrac_high", 2, 0.62)]
    assert (rundir.path / "health.jsonl").is_file()  # PPO Deck's own file, in its run dir
    assert any("meta.json records no --clip-grad" in note for note in report["notes"])

    own = _own_run(runs_dir)
    compared = invoke("compare", str(dump), str(own.path), "--json")
    assert compared.exit_code == 0, compared.output
    data = json.loads(compared.stdout)
    rewards = [m["metrics"]["rollout/raw_reward"] for m in miles_metrics()
               if "rollout/raw_reward" in m["metrics"]]
    assert data["diagnostics"]["rollout/raw_reward"][0] == {
        "final": rewards[-1], "best": {"rollout": rewards.index(max(rewards)),
                                       "value": max(rewards)}, "rollouts": 3}
    assert data["phase_mean_seconds"]["generate"][0] == pytest.approx(40.0)  # miles' rollout
    assert "--colocate" not in data["config_diff"]  # meta.json's colocate=true, as ours

    plotted = invoke("plot", str(dump), str(own.path), "--out", str(tmp_path / "p.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert plotted.exit_code == 2 and "matplotlib" in plotted.stderr
    else:
        assert plotted.exit_code == 0 and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"

    refused = invoke("stop", str(dump))
    assert refused.exit_code == 2 and "only reads it" in refused.stderr
    again = invoke("runs", "add", str(dump))
    assert again.stdout.strip() == run_id and "already watched" in again.stderr
    assert digest(dump) == before
    assert not list(dump.rglob("*.lock")) and not (dump / "events.jsonl").exists()


def _own_run(runs_dir: Path) -> RunDir:
    from ppodeck.engine.launch.local import prepare_run
    from ppodeck.engine.presets import load_preset, resolve_preset
    from ppodeck.engine.run.events import encode_event
    from ppodeck.engine.run.rundir import write_status

    config = resolve_preset(load_preset("tiny-cpu")).with_values(colocate=True)
    rundir = prepare_run(config, "tiny-cpu", run_dir=runs_dir / "own")
    write_status(rundir, state="succeeded")
    rundir.events_jsonl.write_bytes(b"".join(encode_event(
        {"v": 1, "ts": 1.0 + r, "kind": "metrics", "rollout_id": r, "step_key": "rollout/step",
         "step": r, "metrics": {"rollout/raw_reward": 0.1 * r}}) for r in range(4)))
    return rundir


def test_phases_per_rank_and_gpu_samples_fold_into_the_run_state(runs_dir, tmp_path) -> None:
    dump = copy_dump(tmp_path / "dump")
    assert invoke("runs", "add", str(dump)).exit_code == 0
    [rundir] = [RunDir(p) for p in runs_dir.iterdir()]
    events, warnings = read_events(rundir.events_jsonl)
    assert warnings == []
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    phases = [json.loads(line) for part in sorted((dump / "dashboard" / "phases").glob("*"))
              for line in part.read_text().splitlines()]
    ends = [e for e in events if e["kind"] == "phase" and e["state"] == "end"]
    assert len(ends) == len(phases)
    assert {(e["miles_name"], e["rank"]) for e in ends} == {(p["name"], p["rank"])
                                                            for p in phases}
    assert {e["name"] for e in ends if e["miles_name"] == "rollout"} == {"generate"}
    state = RunState()
    state.apply(events)
    state.apply_status(read_status(rundir))
    assert state.state == "ended" and state.rollout_id == 2
    rewards = [m["metrics"]["rollout/raw_reward"] for m in miles_metrics()
               if "rollout/raw_reward" in m["metrics"]]
    assert state.latest("rollout/raw_reward") == rewards[-1]
    assert sorted(state.phase_totals) == ["actor_train", "generate", "train_wait",
                                          "update_weights"]
    assert state.phase_totals["generate"] == [120.0, 3]  # three 40 s rollouts
    samples = [json.loads(line) for part in (dump / "dashboard" / "gpu_util").glob("*")
               for line in part.read_text().splitlines()]
    assert [d.index for d in state.devices] == [0, 1]
    shown = {d.index: d.used_bytes for d in state.devices}
    ts = max(e["ts"] for e in events if e["kind"] == "gpu")
    assert shown == {s["gpu"]: s["mem_mb"] << 20 for s in samples if s["ts"] == ts}


def test_an_open_phase_is_started_once_and_ended_when_miles_closes_it(runs_dir, tmp_path
                                                                       ) -> None:
    dump = tmp_path / "dump"
    (dump / "dashboard" / "phases").mkdir(parents=True)
    part = dump / "dashboard" / "phases" / "19700112_13.jsonl"
    (dump / "dashboard" / "meta.json").write_text('{"run_name": "x", "start_ts": 5.0}')
    opened = {"name": "actor_train", "t0": 10.0, "t1": -1.0, "node": "n", "gpus": [0],
              "rank": 0, "role": "train"}
    part.write_text(json.dumps(opened) + "\n" + '{"name": "actor_tr')  # a torn last line
    for path in dump.rglob("*"):  # written an hour ago: no follower, this test syncs itself
        os.utime(path, (time.time() - HOUR,) * 2)
    assert invoke("runs", "add", str(dump)).exit_code == 0
    [rundir] = [RunDir(p) for p in runs_dir.iterdir()]
    state = RunState()
    state.apply(read_events(rundir.events_jsonl)[0])
    assert state.open_phases.keys() == {"actor_train"}
    with open(part, "a") as out:  # the torn line completes, then miles closes the interval
        out.write('ain", "t0": 3.0, "t1": 4.0, "node": "n", "gpus": [1], "rank": 1, '
                  '"role": "train"}\n' + json.dumps({**opened, "t1": 12.5}) + "\n")
    sync(rundir)
    phases = [e for e in read_events(rundir.events_jsonl)[0] if e["kind"] == "phase"]
    assert [(e["rank"], e["state"], e.get("seconds")) for e in phases] == [
        (0, "start", None), (1, "start", None), (1, "end", 1.0), (0, "end", 2.5)]


def test_a_growing_dump_is_followed_live_until_it_stops(runs_dir, tmp_path, monkeypatch
                                                         ) -> None:
    """tail --follow on a dump miles is still writing: new records appear as they land; when
    the dump stops growing the run ends and the follower exits. Live means the dump's own
    records are recent (their `ts`), as miles stamps them while it writes. ~4 s (2 s of it:
    the idle time that ends a run)."""
    monkeypatch.setenv("PPODECK_MILES_IDLE_S", "2")
    dump = copy_dump(tmp_path / "dump")
    shutil.rmtree(dump / "rollout_data")  # samples are another test's; torch stays unloaded
    metrics = dump / "dashboard" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(stamped_now(line) for line in lines[:2]))  # two records so far
    before_bytes = metrics.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ppodeck = str(Path(sys.executable).with_name("ppodeck"))
    tail = subprocess.Popen([ppodeck, "tail", str(dump), "--follow",
                             "--json", "--kind", "metrics"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def following() -> RunDir | None:
            rundir = find_registered(dump)
            return rundir if rundir and read_status(rundir).get("state") == "running" else None

        rundir = _wait_for(following)
        follower = read_status(rundir)["pid"]
        for line in lines[2:]:  # miles goes on writing
            with open(metrics, "a") as out:
                out.write(stamped_now(line))
            time.sleep(0.05)
        out, err = tail.communicate(timeout=30)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    got = [json.loads(line)["metrics"] for line in out.splitlines()]
    assert got == [m["metrics"] for m in miles_metrics()]
    status = read_status(rundir)
    assert status["state"] == "ended" and "miles records no final state" in status["detail"]
    _wait_for(lambda: not _alive(follower))
    assert metrics.read_bytes().startswith(before_bytes)


def stamped_now(line: str) -> str:
    """A dashboard record as miles writes it now: its `ts` is the present."""
    return json.dumps({**json.loads(line), "ts": time.time()}) + "\n"


def _alive(pid: int) -> bool:
    from ppodeck.engine.run.rundir import pid_alive

    return pid_alive(pid)


def _wait_for(probe, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := probe():
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_directory_that_is_neither_a_run_nor_a_dump_is_a_usage_error(runs_dir, tmp_path
                                                                        ) -> None:
    result = invoke("tail", str(tmp_path))
    assert result.exit_code == 2 and "not a run directory" in result.stderr
    result = invoke("runs", "add", str(tmp_path))
    assert result.exit_code == 2 and "not a miles --dump-details directory" in result.stderr


def test_rollouts_become_samples_joined_with_what_training_saw(runs_dir, tmp_path) -> None:
    """samples/ from rollout_data (text, score), the parquet mirror (rollout log-probs) and
    train_data (reward as trained, advantages...): the fixture keeps train data for rollout 0
    only, so rollout 1 has the rollout's side and nulls for the trainer's."""
    import torch

    dump = copy_dump(tmp_path / "dump")
    assert invoke("runs", "add", str(dump)).exit_code == 0
    shown = invoke("samples", str(dump), "--rollout", "0", "--json")
    assert shown.exit_code == 0, shown.output
    got = json.loads(shown.stdout)
    dumped = torch.load(dump / "rollout_data" / "0.pt", weights_only=True)["samples"]
    trained = {}
    for rank in (0, 1):
        data = torch.load(dump / "train_data" / f"0_{rank}.pt", weights_only=True)[
            "rollout_data"]
        for i, index in enumerate(data["sample_indices"]):
            trained[index] = {"reward": data["rewards"][i],
                              "advantages": data["advantages"][i].tolist()}
    assert [s["raw_reward"] for s in got] == [d["reward"] for d in dumped]
    assert [s["response"] for s in got] == [d["response"] for d in dumped]
    for sample, source in zip(got, dumped, strict=True):
        assert sample["rollout_log_probs"] == pytest.approx(source["rollout_log_probs"],
                                                            abs=1e-6)
        assert sample["reward"] == pytest.approx(trained[source["index"]]["reward"], abs=1e-6)
        assert sample["advantages"] == pytest.approx(trained[source["index"]]["advantages"],
                                                     abs=1e-6)
    later = json.loads(invoke("samples", str(dump), "--rollout", "1", "--json").stdout)
    assert later[0]["advantages"] is None and later[0]["raw_reward"] is not None
