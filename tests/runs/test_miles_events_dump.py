"""A miles dump written with --dump-details but without --use-miles-dashboard: no dashboard/,
only miles' EventLogger records, events/<process>.jsonl (miles/utils/logging_utils.py
configure_logger; tracking.log() writes each metric record). tests/data/miles_events_dump/events
is what miles' own train.py wrote on a GPU (radixark/miles 31f1ca961, PPO with a critic, 5
rollouts; bench/results/miles-vs-ours-qwen3-0.6b-h100), copied as it is."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.miles.watch import (
    MilesDumpError,
    find_registered,
    is_live,
    last_write,
    open_dump,
    record_time,
    stop_follower,
)
from ppodeck.engine.run.rundir import RunDir, pid_alive, read_status

DUMP = Path(__file__).resolve().parents[1] / "data" / "miles_events_dump"
ROLLOUTS = [0, 1, 2, 3, 4]


def records(process: str) -> list[dict]:
    return [json.loads(line) for line in
            (DUMP / "events" / f"{process}.jsonl").read_text().splitlines()]


def invoke(*args: str):  # noqa: ANN201
    return CliRunner().invoke(app, list(args))


def test_an_events_only_dump_is_a_finished_run_with_every_rollout(runs_dir, tmp_path) -> None:
    dump = shutil.copytree(DUMP, tmp_path / "dump")  # fresh mtimes: its records are old
    added = invoke("runs", "add", str(dump))
    assert added.exit_code == 0, added.output
    rundir = RunDir(runs_dir / added.stdout.strip())

    [listed] = json.loads(invoke("runs", "ls", "--json").stdout)
    # no writer: finished by its own records' time stamps, whatever the files' mtimes say
    assert listed["state"] == "ended" and listed["rollout_id"] == 4
    assert not read_status(rundir).get("pid")

    tailed = invoke("tail", str(dump), "--json", "--kind", "metrics")
    assert tailed.exit_code == 0, tailed.output
    got = [json.loads(line) for line in tailed.stdout.splitlines()]
    expected = sum(len(records(p)) for p in ("actor_cell0_rank0", "critic_cell0_rank0",
                                             "rollout_manager"))
    assert len(got) == expected  # every metric record, once
    raw = {e["rollout_id"]: e["metrics"]["rollout/raw_reward"] for e in got
           if "rollout/raw_reward" in e["metrics"] and e["process"] == "actor_cell0_rank0"}
    assert sorted(raw) == [1, 2, 3, 4]  # rollout 0 trains the critic alone: no actor record
    manager = [e for e in got if e["process"] == "rollout_manager"]
    assert sorted(e["rollout_id"] for e in manager) == ROLLOUTS  # its rollout/step says which
    critic = {e["rollout_id"] for e in got if "train/critic-value_loss" in e["metrics"]}
    assert sorted(critic) == ROLLOUTS
    assert all(e["step_key"] in ("rollout/step", "train/step") for e in got)
    stamps = [e["ts"] for e in got]
    assert stamps == sorted(stamps)  # one time order across the three processes' files


def test_miles_perf_timers_become_phases_of_their_rollout(runs_dir, tmp_path) -> None:
    dump = shutil.copytree(DUMP, tmp_path / "dump")
    rundir, created = open_dump(dump)
    assert created
    events = [json.loads(line) for line in rundir.events_jsonl.read_text().splitlines()]
    ends = [e for e in events if e["kind"] == "phase" and e["state"] == "end"]
    perf = [r for r in records("actor_cell0_rank0") if "perf/actor_train_time" in r["metrics"]]
    for record in perf:  # each timer's sum, in its rollout, ending at the record's time
        rollout = record["rollout_id"]
        actor = {e["miles_name"]: e for e in ends if e["rollout_id"] == rollout
                 and e["role"] == "actor"}
        for key, value in record["metrics"].items():
            if key.startswith("perf/") and key.endswith("_time") and key != "perf/step_time":
                assert actor[key[5:-5]]["seconds"] == pytest.approx(value)
                assert actor[key[5:-5]]["ts"] == pytest.approx(record_time(record))
                assert actor[key[5:-5]]["inferred_start"] is True
    generate = [e for e in ends if e["name"] == "generate"]
    assert sorted(e["rollout_id"] for e in generate) == ROLLOUTS
    assert all(e["role"] == "rollout_manager" for e in generate)
    assert not [e for e in ends if e["miles_name"] == "step"]  # step_time is derived, no timer


def test_a_dump_is_live_while_its_own_records_are_recent(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_MILES_IDLE_S", "60")
    dump = shutil.copytree(DUMP, tmp_path / "dump")
    newest = max(record_time(r) for p in ("actor_cell0_rank0", "critic_cell0_rank0",
                                          "rollout_manager") for r in records(p))
    assert last_write(dump) == pytest.approx(newest)
    assert not is_live(dump)  # copied a moment ago, written by miles long before
    with open(dump / "events" / "rollout_manager.jsonl", "a") as out:  # miles writes on
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        out.write(json.dumps({"timestamp": now, "source": {"component": "rollout_manager"},
                              "type": "metric", "rollout_id": None, "attempt": None,
                              "metrics": {"rollout/step": 5}}) + "\n")
    assert is_live(dump)


def test_stop_on_a_watched_dump_ends_its_follower_and_says_so(runs_dir, tmp_path, monkeypatch
                                                               ) -> None:
    monkeypatch.setenv("PPODECK_MILES_IDLE_S", "600")
    dump = shutil.copytree(DUMP, tmp_path / "dump")
    with open(dump / "events" / "rollout_manager.jsonl", "a") as out:  # miles is writing
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        out.write(json.dumps({"timestamp": now, "source": {"component": "rollout_manager"},
                              "type": "metric", "rollout_id": None, "attempt": None,
                              "metrics": {"rollout/step": 5}}) + "\n")
    rundir, _ = open_dump(dump)
    status = read_status(rundir)
    assert status["state"] == "running" and pid_alive(status["pid"])
    before = sorted(p.name for p in (dump / "events").iterdir())

    said = stop_follower(rundir)
    assert f"stopped the follower of run {rundir.id}" in said and "left as it is" in said
    assert not pid_alive(status["pid"])
    after = read_status(rundir)
    assert after["state"] == "ended" and "stopped at the user's request" in after["detail"]
    assert sorted(p.name for p in (dump / "events").iterdir()) == before
    assert "no follower is running" in stop_follower(rundir)  # a second stop says so


def test_a_directory_without_anything_readable_names_what_was_looked_for(tmp_path) -> None:
    empty = tmp_path / "not-a-dump"
    (empty / "events").mkdir(parents=True)  # an events folder with no records is not enough
    with pytest.raises(MilesDumpError) as raised:
        open_dump(empty)
    for looked_for in ("dashboard/metrics.jsonl", "dashboard/meta.json", "events/*.jsonl",
                       "rollout_data/"):
        assert looked_for in str(raised.value)
    assert find_registered(empty) is None


def test_health_and_compare_say_what_an_events_only_dump_does_not_record(runs_dir,
                                                                           tmp_path) -> None:
    """No meta.json: no flag to compare and no --rollout-max-response-len, said as such (not
    "(same resolved config)" or "None"); each of its 5 rollouts judged once."""
    dump = shutil.copytree(DUMP, tmp_path / "dump")
    run_id = invoke("runs", "add", str(dump)).stdout.strip()
    health = invoke("health", run_id)
    assert "5 rollouts judged" in health.stdout and "None" not in health.stdout
    compared = invoke("compare", run_id, run_id)
    assert compared.exit_code == 0, compared.output
    assert "records none" in compared.stdout and "same resolved config" not in compared.stdout
