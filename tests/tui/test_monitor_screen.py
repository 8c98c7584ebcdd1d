"""Run monitor, runs list and palette: recorded runs fill the widgets with recorded values."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.messages import EventsArrived, TailEnded
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.screens.runs import RunsScreen
from ppodeck.app.tui.widgets.log_tail import LogTail
from ppodeck.app.tui.widgets.metric_chart import MetricChart
from ppodeck.app.tui.widgets.offload_panel import OffloadPanel
from ppodeck.app.tui.widgets.phase_timeline import PhaseTimeline
from ppodeck.app.tui.widgets.run_header import RunHeader
from tests.tui.conftest import EVENTS_TINY, T0, T_END, wait_until

SIZE = (160, 48)


def recorded(kind: str) -> list[dict]:
    events = [json.loads(line) for line in EVENTS_TINY.read_text().splitlines()]
    return [e for e in events if e["kind"] == kind]


def metric(name: str) -> tuple[list[float], list[float]]:
    rows = [e for e in recorded("metrics") if name in e["metrics"]]
    return [float(e["step"]) for e in rows], [e["metrics"][name] for e in rows]


async def test_attaching_to_a_recorded_run_fills_charts_and_offload_panel(
        recorded_run: Path) -> None:
    messages: list = []
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        screen = app.screen
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        assert screen.state.events_seen == len(EVENTS_TINY.read_text().splitlines())
        # at most four batches a second: a 672-event history arrives in one or two
        batches = {id(m) for m in messages if isinstance(m, EventsArrived)}
        assert 1 <= len(batches) <= 2

        charts = {chart.id: chart for chart in screen.query(MetricChart)}
        for chart_id, key in (("chart-reward", "rollout/raw_reward"),
                              ("chart-reward", "rollout/raw_reward/max"),
                              ("chart-value-loss", "train/critic-value_loss"),
                              ("chart-policy", "train/ppo_kl"),
                              ("chart-policy", "train/kl_loss"),  # the run had --use-kl-loss
                              ("chart-policy", "critic/explained_variance"),
                              ("chart-response-len", "rollout/response_len/mean")):
            assert charts[chart_id].plotted[key] == metric(key), key

        panel = screen.query_one(OffloadPanel)
        assert panel.where == {"actor": "cpu", "critic": "cpu", "rollout": "gpu"}
        moves = [e for e in recorded("offload") if not e["noop"]]
        last_actor_off = [e for e in moves if e["model"] == "actor"
                          and e["direction"] == "offload"][-1]
        got = panel.last_offload["actor"]
        assert (got.bytes, got.seconds, got.gbps) == (
            last_actor_off["bytes"], last_actor_off["seconds"], last_actor_off["gbps"])
        last_rollout_on = [e for e in moves if e["model"] == "rollout"
                           and e["direction"] == "onload"][-1]
        assert panel.last_onload["rollout"].bytes == last_rollout_on["bytes"]
        last_gpu = recorded("gpu")[-1]
        assert panel.gpu_label == last_gpu["label"] and panel.rss_bytes == last_gpu["rss_bytes"]
        assert [(d.index, d.used_bytes, d.torch_reserved_bytes, d.non_torch_bytes)
                for d in panel.devices] == [
            (d["index"], d["used_bytes"], d["torch_reserved_bytes"], d["non_torch_bytes"])
            for d in last_gpu["devices"]]

        header = screen.query_one(RunHeader).data
        assert (header.state, header.rollout_id, header.num_rollout) == ("succeeded", 19, 20)
        assert "rollout 19 (20/20)" in str(RunHeader.render_text(header))
        assert header.elapsed == T_END - T0 and header.eta == 0.0 and header.phase is None

        timeline = screen.query_one(PhaseTimeline)
        assert sorted(timeline.rollouts) == list(range(20))
        assert "actor_train" not in [s.name for s in timeline.rollouts[0]]
        # init's steps under the rollouts, in the driver's order, each with its seconds
        ends = [e for e in recorded("phase") if e.get("parent") and e["state"] == "end"]
        assert [(s.name, s.seconds) for s in timeline.init_steps] == [
            (e["name"], e["seconds"]) for e in ends]
        rows = timeline.render().plain.splitlines()
        assert rows[-2].startswith("init ") and rows[-2].rstrip().endswith("94s")
        assert rows[-1].split() == ["■ray", "6s", "■place", "1s", "■rollout", "52s",
                                    "■critic", "15s", "■actor", "15s", "■push", "4s"]
        assert screen.state.init_parts["critic_init"]["model build"] == 6.9
        logs = screen.query_one(LogTail).lines_text
        assert len(logs) == len(recorded("log")) and "finished 20 rollouts" in logs[-1]


async def test_a_running_run_shows_history_then_live_updates(tui_env: Path) -> None:
    lines = EVENTS_TINY.read_text().splitlines(keepends=True)
    run = tui_env / "runs" / "260101-000000-live-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps(
        # a driver on another host: read_status cannot check it, so "running" stays running
        {"state": "running", "pid": 4242, "host": "elsewhere", "started": T0, "num_rollout": 20,
         "preset": "x"}))
    half = 1 + next(i for i, line in enumerate(lines)  # stop inside rollout 10's critic phase
                    if '"critic_train","state":"start","rollout_id":10' in line)
    (run / "events.jsonl").write_text("".join(lines[:half]))
    app = PPODeckApp(attach=str(run), now=T0 + 1000.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        screen = app.screen
        await wait_until(pilot, lambda: screen.state.events_seen == half)
        first = screen.query_one(RunHeader).data
        assert (first.state, first.elapsed, first.phase) == ("running", 1000.0, "critic_train")
        assert first.rollout_id == 10 and first.eta is not None and first.eta > 0
        with open(run / "events.jsonl", "a") as out:
            out.write("".join(lines[half:]))
        await wait_until(pilot, lambda: screen.state.events_seen == len(lines))
        assert screen.query_one("#chart-reward", MetricChart).plotted[
            "rollout/raw_reward"] == metric("rollout/raw_reward")


async def test_during_init_the_header_names_the_step_under_way(tui_env: Path) -> None:
    lines = EVENTS_TINY.read_text().splitlines(keepends=True)
    run = tui_env / "runs" / "260101-000000-init-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps(
        {"state": "running", "pid": 4242, "host": "elsewhere", "started": T0, "num_rollout": 20,
         "preset": "x"}))
    upto = 1 + next(i for i, line in enumerate(lines)
                    if '"critic_init","state":"start"' in line)
    (run / "events.jsonl").write_text("".join(lines[:upto]))
    app = PPODeckApp(attach=str(run), now=T0 + 70.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        screen = app.screen
        await wait_until(pilot, lambda: screen.state.events_seen == upto)
        assert screen.query_one(RunHeader).data.phase == "init: critic init"
        timeline = screen.query_one(PhaseTimeline)
        assert [s.name for s in timeline.init_steps][-1] == "critic_init"
        assert timeline.init_steps[-1].end is None  # drawn as running, timed by the clock
        assert "■critic 10s" in timeline.render().plain  # 70 s in, critic_init began at 59.8


async def test_replay_plays_a_recording() -> None:
    messages: list = []
    app = PPODeckApp(replay=str(EVENTS_TINY), replay_speed=0)
    async with app.run_test(size=(80, 24), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MonitorScreen) and screen.run_dir is None
        assert screen.state.events_seen == len(EVENTS_TINY.read_text().splitlines())
        assert screen.query_one(RunHeader).data.state == "succeeded"


async def test_eval_sets_join_the_reward_chart(tmp_path: Path) -> None:
    """Each eval dataset's reward (eval/<name>, not its _ratio or /response_len keys) becomes
    a line of the reward chart, on the rollout axis."""
    events = [{"v": 1, "ts": T0 + i, "kind": "metrics", "step_key": key, "step": step,
               "rollout_id": step, "metrics": metrics}
              for i, (key, step, metrics) in enumerate([
                  ("rollout/step", 0, {"rollout/raw_reward": 0.1}),
                  ("eval/step", 0, {"eval/held-out": 0.2, "eval/held-out-truncated_ratio": 0.5,
                                    "eval/held-out/response_len/mean": 4.0}),
                  ("eval/step", 2, {"eval/held-out": 0.6, "eval/aime": 0.0})])]
    recording = tmp_path / "events.jsonl"
    recording.write_text("".join(json.dumps(e) + "\n" for e in events))
    messages: list = []
    app = PPODeckApp(replay=str(recording), replay_speed=0)
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        chart = app.screen.query_one("#chart-reward", MetricChart)
        assert [line.key for line in chart.lines][-2:] == ["eval/held-out", "eval/aime"]
        assert chart.plotted["eval/held-out"] == ([0.0, 2.0], [0.2, 0.6])
        assert "eval/held-out-truncated_ratio" not in chart.keys


async def test_torn_and_bad_lines_become_warnings_not_crashes(tui_env: Path) -> None:
    run = tui_env / "runs" / "260101-000000-bad-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "failed", "detail": "boom"}))
    good = EVENTS_TINY.read_text().splitlines()[:40]
    (run / "events.jsonl").write_text("\n".join(good[:20] + ["{not json", "[1,2]"] + good[20:])
                                      + '\n{"v": 1, "ts": 1.0, "kind": "lo')
    app = PPODeckApp(attach=str(run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await wait_until(pilot, lambda: app.screen.state.events_seen == 40)
        await pilot.pause()
        assert any("not valid JSON" in n.message for n in app._notifications)
        assert app.screen.query_one(RunHeader).data.state == "failed"


async def test_runs_list_attaches_to_the_selected_run(recorded_run: Path) -> None:
    app = PPODeckApp(now=T_END + 60)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen))
        screen = app.screen
        await wait_until(pilot, lambda: len(screen.runs) == 1)
        assert screen.runs[0].state == "succeeded" and screen.runs[0].id == recorded_run.name
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        assert app.screen.run_dir == recorded_run


async def test_stop_run_asks_then_signals_the_driver(tui_env: Path, monkeypatch) -> None:
    import ppodeck.engine.launch.local as launch

    stopped: list[Path] = []
    monkeypatch.setattr(launch, "stop_run",
                        lambda rundir, force=False: stopped.append(rundir.path) or "asked")
    run = tui_env / "runs" / "260101-000000-live-0002"
    run.mkdir()
    (run / "status.json").write_text(json.dumps(
        {"state": "running", "pid": 4242, "host": "elsewhere", "started": T0, "num_rollout": 20,
         "preset": "x"}))
    (run / "events.jsonl").write_text("".join(EVENTS_TINY.read_text().splitlines(True)[:40]))
    app = PPODeckApp(attach=str(run), now=T0 + 100.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await pilot.press("x")
        await wait_until(pilot, lambda: app.screen.id == "confirm-stop")
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: stopped == [run])


async def test_a_finished_run_offers_no_stop(recorded_run: Path) -> None:
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        screen = app.screen
        await wait_until(pilot, lambda: screen.state.finished)
        assert screen.check_action("stop_run", ()) is False
        await pilot.press("x")
        await pilot.pause(0.2)
        assert app.screen is screen  # no stop dialog


async def test_palette_opens_a_preset_by_name() -> None:
    app = PPODeckApp()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+p")
        await pilot.press(*"Open preset: tui-ppo")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "EditScreen")
        assert app.screen.preset_name == "tui-ppo"


async def test_unknown_run_is_a_notification_and_the_runs_list() -> None:
    app = PPODeckApp(attach="no-such-run")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen))
        assert any("no-such-run" in n.message for n in app._notifications)


async def test_a_grpo_run_has_no_critic_charts(tmp_path: Path, recorded_run: Path) -> None:
    """GRPO builds no critic: its value-loss chart and explained-variance line are not drawn."""
    from ppodeck.app.tui.screens.monitor import run_uses_critic
    from ppodeck.engine.presets import config_to_toml, load_preset, resolve_preset

    ppo = resolve_preset(load_preset("tiny-cpu"))
    runs = {"ppo": ppo, "grpo": ppo.with_values(advantage_estimator="grpo")}
    for name, config in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.toml").write_text(
            config_to_toml(config, name=name, description=""))
    assert run_uses_critic(tmp_path / "ppo") and not run_uses_critic(tmp_path / "grpo")
    assert run_uses_critic(None)  # a replay: unknown, so the charts stay
    (recorded_run / "config.toml").write_text((tmp_path / "grpo" / "config.toml").read_text())
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        charts = {chart.id: chart for chart in app.screen.query(MetricChart)}
        assert "chart-value-loss" not in charts
        assert "critic/explained_variance" not in charts["chart-policy"].keys
        assert "train/ppo_kl" in charts["chart-policy"].keys


async def test_the_gpu_view_shows_the_drivers_move_plan(recorded_run: Path) -> None:
    plan = ("moves: overlapped with generate, training and the weight sync (every role awake "
            "at once: 57.6 GiB of 90% x 134 GiB; PPODECK_OVERLAP_MOVES=0 waits on each)")
    events = recorded_run / "events.jsonl"
    lines = events.read_text().splitlines()
    first = json.loads(lines[0])
    event = {"v": first["v"], "ts": first["ts"], "kind": "log", "level": "info",
             "source": "driver", "msg": plan, "move_plan": "rollout"}
    events.write_text("\n".join([lines[0], json.dumps(event), *lines[1:]]) + "\n")
    messages: list = []
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        panel = app.screen.query_one(OffloadPanel)
        assert panel.move_plan == plan
        console = Console(width=SIZE[0], record=True, file=io.StringIO())
        console.print(panel.content)
        assert "moves: overlapped with generate" in console.export_text()


async def test_quitting_as_the_monitor_opens_ends_without_an_error() -> None:
    """A quit typed ahead of a launch reaches the app while the monitor mounts: the app closes
    its panels before the monitor's on_mount runs, which then has nothing to fill (it raised
    NoMatches into the user's terminal before)."""
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(MonitorScreen())
    assert app.return_code in (0, None)
