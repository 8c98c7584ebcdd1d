"""Faults are health findings while they happen: a failed run is unhealthy and says why; reward
requests pending with none answered past the threshold are a warning in `health`, `runs ls`
and tail's judge, and clear once an answer comes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli import health as cli_health
from ppodeck.engine.run.health import HealthJudge, judge_run, run_level
from ppodeck.engine.run.reward_progress import RewardProgress, read_progress, write_progress
from ppodeck.engine.run.rundir import write_status
from tests.health.streams import stream
from tests.health.test_run_health import make_run

URL = "remote reward model http://127.0.0.1:9/score"


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_health.register(app)
    app.command("noop")(lambda: None)
    return app


def test_health_on_a_failed_run_exits_non_zero_naming_the_failure(app, runs_dir) -> None:
    runs_dir.mkdir()
    rundir = make_run(runs_dir, stream(2), state="failed")
    write_status(rundir, detail="custom reward function my_rm.score on sample 5 raised "
                                "ZeroDivisionError: division by zero (traceback in driver.log)")
    result = CliRunner().invoke(app, ["health", str(rundir.path)])
    assert result.exit_code == 4, result.output
    assert "ERROR" in result.output and "OK" not in result.output.split("\n")[0]
    assert "the run failed: custom reward function my_rm.score on sample 5 raised " \
           "ZeroDivisionError" in result.output
    assert "health.run_failed" in result.output


def test_a_succeeded_run_has_no_failure_finding(runs_dir) -> None:
    runs_dir.mkdir()
    report = judge_run(make_run(runs_dir, stream(2)).path, write=False)
    assert "health.run_failed" not in {f.code for f in report.findings}


def _pending(run_dir: Path, stalled_s: float, pending: int = 3) -> None:
    now = time.time()
    write_progress(run_dir, RewardProgress(0, URL, 16, 16 - pending, pending, stalled_s,
                                           now - stalled_s, now))


def test_a_reward_stall_is_a_warning_in_health_and_runs_ls(runs_dir, monkeypatch) -> None:
    runs_dir.mkdir()
    rundir = make_run(runs_dir, stream(1), state="running")
    monkeypatch.setattr("ppodeck.engine.run.rundir.driver_alive", lambda *a, **k: True)
    _pending(rundir.path, stalled_s=5)
    assert "health.reward_stall" not in {f.code for f in judge_run(rundir.path).findings}
    _pending(rundir.path, stalled_s=75)
    report = judge_run(rundir.path)
    stall = next(f for f in report.findings if f.code == "health.reward_stall")
    assert stall.level == "warning"
    assert stall.message.startswith(f"reward {URL}: 16 sent, 13 answered, 3 pending, "
                                    "slowest 75 s; none answered for 75 s")
    assert run_level(rundir.path) == "1 warn"


def test_tails_judge_fires_on_a_stall_and_clears_when_answers_come(tmp_path: Path) -> None:
    judge = HealthJudge(run_dir=tmp_path)
    _pending(tmp_path, stalled_s=61)
    assert [f.code for f in judge.check_hang(time.time(), True)] == ["health.reward_stall"]
    assert judge.check_hang(time.time(), True) == []  # fires once
    _pending(tmp_path, stalled_s=0, pending=0)
    judge.check_hang(time.time(), True)
    assert "health.reward_stall:reward" not in judge.active


def test_the_scorer_writes_progress_while_it_scores(tmp_path: Path) -> None:
    """The seam: a reward function that waits; the progress file shows it pending."""
    import asyncio
    import threading

    from ppodeck.engine.rollout.reward_tracker import RewardTracker

    release = threading.Event()
    seen: list[RewardProgress | None] = []

    async def scoring() -> None:
        tracker = RewardTracker(tmp_path, 3, URL)
        async with tracker.writing():
            slow = asyncio.get_running_loop().run_in_executor(None, release.wait)
            fast = asyncio.sleep(0)
            task = asyncio.gather(tracker.track(slow), tracker.track(fast))
            await asyncio.sleep(1.2)  # one write after the fast answer
            seen.append(read_progress(tmp_path))
            release.set()
            await task

    asyncio.run(scoring())
    during, after = seen[0], read_progress(tmp_path)
    assert during is not None and (during.sent, during.answered, during.pending) == (2, 1, 1)
    assert during.slowest_s >= 1.0 and during.rollout_id == 3
    assert after is not None and (after.answered, after.pending) == (2, 0)


def test_tail_shows_the_reward_progress_while_requests_are_pending(runs_dir) -> None:
    from ppodeck.app.cli.health import TailJudge
    from ppodeck.app.cli.tail import format_event

    runs_dir.mkdir()
    rundir = make_run(runs_dir, stream(1), state="running")
    judge = TailJudge(rundir)
    _pending(rundir.path, stalled_s=5)
    (line,) = judge.idle(driver_alive=True)
    assert "reward " + URL + ": 16 sent, 13 answered, 3 pending, slowest 5 s" in \
        format_event(line)
    assert judge.idle(driver_alive=True) == []  # unchanged: not repeated at once
    _pending(rundir.path, stalled_s=0, pending=0)
    assert judge.idle(driver_alive=True) == []  # nothing pending: nothing to show
