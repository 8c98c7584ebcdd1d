"""Run directories: unique ids, atomic status, lost-driver detection, listing and lookup."""

from __future__ import annotations

import itertools
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ppodeck.engine.run import rundir as rundir_module
from ppodeck.engine.run.rundir import (
    RunDir,
    RunNotFound,
    create_run_dir,
    find_run,
    list_runs,
    read_status,
    runs_root,
    write_status,
)


def test_runs_root_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PPODECK_RUNS_DIR", raising=False)
    assert runs_root() == Path("runs")
    monkeypatch.setenv("PPODECK_RUNS_DIR", "/data/runs")
    assert runs_root() == Path("/data/runs")


def test_run_id_is_time_preset_and_random_hex(runs_dir: Path) -> None:
    rundir = create_run_dir("qwen-ppo-smoke")
    assert rundir.path.parent == runs_dir and rundir.path.is_dir()
    assert re.fullmatch(r"\d{6}-\d{6}-qwen-ppo-smoke-[0-9a-f]{4}", rundir.id)
    assert rundir.events_jsonl == rundir.path / "events.jsonl"
    assert rundir.checkpoints_critic == rundir.path / "checkpoints_critic"


def test_preset_names_become_safe_path_parts(runs_dir: Path) -> None:
    rundir = create_run_dir("team/my preset$(touch x).toml")
    assert rundir.path.parent == runs_dir
    assert re.fullmatch(r"\d{6}-\d{6}-my-preset-touch-x-[0-9a-f]{4}", rundir.id)


def test_two_runs_started_at_the_same_instant_get_distinct_dirs(runs_dir, monkeypatch) -> None:
    # Same second and the same random draw for both: one mkdir must lose and draw again.
    draws = itertools.chain(["aaaa", "aaaa"], (f"{i:04x}" for i in range(1, 100)))
    lock = threading.Lock()

    def token_hex(nbytes: int) -> str:
        with lock:
            return next(draws)

    monkeypatch.setattr(rundir_module.secrets, "token_hex", token_hex)
    monkeypatch.setattr(rundir_module.time, "strftime", lambda fmt: "250101-120000")
    barrier = threading.Barrier(2)
    made: list[RunDir] = []

    def start() -> None:
        barrier.wait()
        made.append(create_run_dir("smoke"))

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.path for r in made}) == 2
    assert {r.id for r in made} == {"250101-120000-smoke-aaaa", "250101-120000-smoke-0001"}


def test_many_concurrent_creations_never_collide(runs_dir: Path) -> None:
    made: list[RunDir] = []
    threads = [threading.Thread(target=lambda: made.append(create_run_dir("smoke")))
               for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.path for r in made}) == 32


def test_run_dir_and_status_follow_the_users_umask(runs_dir: Path) -> None:
    old = os.umask(0o027)
    try:
        rundir = create_run_dir("smoke")
        write_status(rundir, state="created")
    finally:
        os.umask(old)
    assert stat.S_IMODE(rundir.path.stat().st_mode) == 0o750
    assert stat.S_IMODE(rundir.status_json.stat().st_mode) == 0o640


def test_write_status_merges_and_leaves_no_temp_files(created_run: RunDir) -> None:
    write_status(created_run, state="succeeded", rollout_id=3)
    status = read_status(created_run)
    assert status["state"] == "succeeded" and status["rollout_id"] == 3
    assert status["preset"] == "smoke" and status["num_rollout"] == 2
    assert sorted(p.name for p in created_run.path.iterdir()) == ["status.json"]


def test_concurrent_status_writers_merge_instead_of_clobbering(created_run: RunDir) -> None:
    def write_many(key: str) -> None:
        for i in range(50):
            write_status(created_run, **{key: i})

    threads = [threading.Thread(target=write_many, args=(f"k{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = read_status(created_run)
    assert all(status[f"k{t}"] == 49 for t in range(4))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_running_run_whose_driver_is_gone_reads_as_lost(created_run: RunDir) -> None:
    write_status(created_run, state="running", pid=_dead_pid())
    status = read_status(created_run)
    assert status["state"] == "lost"
    assert "died without recording a final state" in status["detail"]
    assert "driver.log" in status["detail"]
    assert read_status(created_run)["state"] == "lost"
    assert '"running"' in created_run.status_json.read_text()  # not rewritten unless asked
    read_status(created_run, record_lost=True)
    assert '"lost"' in created_run.status_json.read_text()


def test_a_running_run_without_a_pid_is_lost_but_a_starting_one_is_not(created_run) -> None:
    write_status(created_run, state="starting")
    assert read_status(created_run)["state"] == "starting"
    write_status(created_run, state="running")
    assert read_status(created_run)["state"] == "lost"


def test_a_zombie_driver_counts_as_gone(created_run: RunDir) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass", created_run.id])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    write_status(created_run, state="running", pid=proc.pid)
    assert read_status(created_run)["state"] == "lost"
    proc.wait()


def test_a_reused_pid_is_not_mistaken_for_the_driver(created_run: RunDir) -> None:
    write_status(created_run, state="running", pid=os.getpid())  # alive, but not this run's
    assert read_status(created_run)["state"] == "lost"


def test_a_live_driver_keeps_its_state(created_run: RunDir) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(10)", "--run-dir", str(created_run.path)])
    try:
        # until the child has exec'd, its command line is still pytest's (a loaded machine)
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 30
        while created_run.path.name.encode() not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the stand-in driver never started"
            time.sleep(0.01)
        write_status(created_run, state="running", pid=proc.pid)
        assert read_status(created_run)["state"] == "running"
    finally:
        proc.kill()
        proc.wait()


def test_list_runs_newest_first_with_their_progress(runs_dir: Path) -> None:
    old, new = create_run_dir("a"), create_run_dir("b")
    write_status(old, state="succeeded", preset="a", started=100.0, rollout_id=9, num_rollout=10)
    write_status(new, state="failed", preset="b", started=200.0, detail="boom")
    (runs_dir / "not-a-run").mkdir()
    infos = list_runs()
    assert [i.id for i in infos] == [new.id, old.id]
    assert infos[0].state == "failed" and infos[0].detail == "boom"
    assert (infos[1].rollout_id, infos[1].num_rollout, infos[1].preset) == (9, 10, "a")


def test_list_runs_of_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert list_runs(tmp_path / "nowhere") == []


def test_find_run_by_id_prefix_or_path(runs_dir: Path) -> None:
    rundir = create_run_dir("smoke")
    write_status(rundir, state="created")
    assert find_run(rundir.id) == RunDir(runs_dir / rundir.id)
    assert find_run(rundir.id[:15]) == RunDir(runs_dir / rundir.id)
    assert find_run(str(rundir.path)) == rundir


def test_find_run_explains_ambiguous_and_missing_runs(runs_dir, monkeypatch) -> None:
    monkeypatch.setattr(rundir_module.time, "strftime", lambda fmt: "250101-120000")
    for _ in range(2):
        write_status(create_run_dir("smoke"), state="created")
    with pytest.raises(RunNotFound, match="ambiguous.*matches 2 runs.*Type more"):
        find_run("250101")
    with pytest.raises(RunNotFound, match="no run 'nope'.*ppodeck runs ls.*PPODECK_RUNS_DIR"):
        find_run("nope")
    with pytest.raises(RunNotFound, match="not a run directory"):
        find_run(str(runs_dir))
