"""The monitor on a watched miles dump (tests/data/miles_dump, written by miles' own code)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.messages import TailEnded
from ppodeck.app.tui.screens.confirm import LaunchChoice
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.widgets.metric_chart import MetricChart
from ppodeck.app.tui.widgets.offload_panel import OffloadPanel
from ppodeck.app.tui.widgets.phase_timeline import PhaseTimeline
from ppodeck.app.tui.widgets.run_header import RunHeader
from ppodeck.engine.miles.watch import find_registered
from tests.runs.test_miles_watch import copy_dump, digest, miles_metrics
from tests.tui.conftest import wait_until


async def test_attach_shows_a_miles_dump_with_miles_values(tui_env: Path) -> None:
    dump = copy_dump(tui_env / "dump")
    before = digest(dump)
    messages: list = []
    app = PPODeckApp(attach=str(dump))  # the dump's own path, as `ppodeck attach DIR` takes
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        screen = app.screen
        charts = {chart.id: chart for chart in screen.query(MetricChart)}
        rows = [m for m in miles_metrics() if "rollout/raw_reward" in m["metrics"]]
        assert charts["chart-reward"].plotted["rollout/raw_reward"] == (
            [float(m["step"]) for m in rows], [m["metrics"]["rollout/raw_reward"] for m in rows])
        header = screen.query_one(RunHeader).data
        assert (header.state, header.rollout_id) == ("ended", 2)
        assert "engine: miles (watched, read-only" in header.title
        assert sorted(screen.query_one(PhaseTimeline).rollouts) == [0, 1, 2]
        panel = screen.query_one(OffloadPanel)
        assert [d.index for d in panel.devices] == [0, 1] and "miles NVML" in panel.gpu_label
    assert find_registered(dump) is not None  # PPO Deck's files: under the runs root
    assert digest(dump) == before


async def test_the_launch_dialog_takes_a_miles_checkout() -> None:
    from tests.tui.test_dialogs import DialogHost

    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.screen.query_one("#miles-root", Input).value = "~/miles"
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result == LaunchChoice(submit="", miles_root="~/miles")
