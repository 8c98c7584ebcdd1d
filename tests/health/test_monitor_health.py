"""The monitor's reader judges health: a strip under the header, a panel of findings, and
health.jsonl written once even when `ppodeck health` judged the run first."""

from __future__ import annotations

import json
from pathlib import Path

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.messages import TailEnded
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.widgets.health import HealthPanel, HealthStrip
from ppodeck.engine.run.health import HEALTH_FILE, judge_run
from tests.health.streams import stream
from tests.health.test_run_health import EV_NEGATIVE, make_run
from tests.tui.conftest import tui_env as tui_env  # the TUI tests' dirs and env
from tests.tui.conftest import wait_until


async def test_monitor_shows_and_records_health_findings(tui_env: Path) -> None:
    rundir = make_run(tui_env / "runs", stream(12, bend=EV_NEGATIVE))
    judge_run(rundir.path)  # a CLI judged first: the monitor must not write it again
    messages: list = []
    app = PPODeckApp(attach=str(rundir.path))
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        screen = app.screen
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        strip = str(screen.query_one(HealthStrip).render())
        assert "ERROR" in strip and "health.explained_variance_negative" in strip
        (line,) = screen.query_one(HealthPanel).lines_text
        assert line.startswith("r5 erro health.explained_variance_negative:") and "Fix:" in line
        assert screen.state.events_seen == len(rundir.events_jsonl.read_text().splitlines())
    records = (rundir.path / HEALTH_FILE).read_text().splitlines()
    assert [json.loads(r)["code"] for r in records] == ["health.explained_variance_negative"]


async def test_a_healthy_run_says_so(tui_env: Path) -> None:
    rundir = make_run(tui_env / "runs", stream(8))
    messages: list = []
    app = PPODeckApp(attach=str(rundir.path))
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        assert "health OK" in str(app.screen.query_one(HealthStrip).render())


async def test_s_saves_a_screenshot_and_sub_second_phases_read_in_ms(tui_env: Path) -> None:
    from ppodeck.app.tui.widgets.phase_timeline import PhaseTimeline, short_seconds

    assert (short_seconds(0.49), short_seconds(2.54), short_seconds(37.2)) == (
        "490ms", "3s", "37s")
    rundir = make_run(tui_env / "runs", stream(3))
    with open(rundir.events_jsonl, "a") as out:
        for name, seconds in (("generate", 0.42), ("critic_train", 0.31)):
            out.write(json.dumps({"v": 1, "ts": 1.8e9 + 40, "kind": "phase", "name": name,
                                  "state": "end", "rollout_id": 2, "seconds": seconds}) + "\n")
    messages: list = []
    app = PPODeckApp(attach=str(rundir.path))
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        legend = app.screen.query_one(PhaseTimeline)._legend().plain
        assert "420ms" in legend and "310ms" in legend
        await pilot.press("s")
        await pilot.pause()
    shots = list(rundir.path.glob("screenshot-*.svg"))
    assert len(shots) == 1 and "<svg" in shots[0].read_text()[:500]


async def test_runs_list_marks_runs_and_compares_them(tui_env: Path) -> None:
    from ppodeck.app.tui.screens.compare import CompareScreen
    from ppodeck.app.tui.screens.runs import RunsScreen
    from ppodeck.app.tui.widgets.metric_chart import MetricChart

    make_run(tui_env / "runs", stream(6))
    make_run(tui_env / "runs", stream(9, bend={"rollout/raw_reward": lambda r, s: 0.5}))
    app = PPODeckApp()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen))
        runs = app.screen
        await wait_until(pilot, lambda: len(runs.runs) == 2)
        await pilot.press("c")
        assert isinstance(app.screen, RunsScreen)  # fewer than two marked: a notification
        await pilot.press("space", "down", "space", "c")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        await wait_until(pilot, lambda: bool(screen.runs))
        await pilot.pause()
        plotted = screen.query_one("#compare-reward", MetricChart).plotted
        assert sorted(len(xs) for xs, _ in plotted.values()) == [6, 9]
        assert [0.5] * 9 in [ys for _, ys in plotted.values()]
        diff = str(screen.query_one("#compare-diff").render())
        assert "same" in diff
