"""The monitor's GPU view shows the speed verdict (engine/run/bounds.py) and MFU per train phase
of a run whose machine kind has cached facts."""

from __future__ import annotations

import json
from pathlib import Path

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.messages import TailEnded
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.widgets.speed_panel import SpeedPanel
from ppodeck.engine.host.probe import MachineFacts, write_facts
from ppodeck.engine.run.bounds import run_speed
from tests.tui.conftest import wait_until

KIND = "gpu: NVIDIA H200 x4"  # events_tiny.jsonl: a 4-GPU run


async def test_the_gpu_view_shows_the_verdict_and_mfu(recorded_run: Path, tmp_path,
                                                      monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    write_facts(MachineFacts(KIND, 0.0, h2d_pinned_GBps=55.0, d2h_pinned_GBps=55.0,
                             hbm_read_write_GBps=4000.0, bf16_matmul_TFLOPs=800.0))
    status = json.loads((recorded_run / "status.json").read_text())
    (recorded_run / "status.json").write_text(json.dumps({**status, "machine": KIND}))
    with open(recorded_run / "events.jsonl", "a") as out:  # the last rollout's train FLOP/s
        out.write(json.dumps({"v": 1, "ts": 1767230000.0, "kind": "metrics",
                              "step_key": "rollout/step", "step": 19, "rollout_id": 19,
                              "metrics": {"perf/actor_train_tflops": 160.0}}) + "\n")
    expected = run_speed(recorded_run)
    assert expected.worst is not None and expected.mfu == {"actor": 160.0 / (4 * 800.0)}

    messages: list = []
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await wait_until(pilot, lambda: any(isinstance(m, TailEnded) for m in messages))
        await pilot.pause()
        panel = app.screen.query_one(SpeedPanel)
        assert panel.speed is not None and panel.speed.text == expected.text
        shown = str(panel.render())
        assert expected.text in shown
        assert "actor 5.0%" in shown  # 160 TFLOP/s against 4 x 800
