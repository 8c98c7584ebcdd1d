"""--use-wandb / --use-tensorboard: offline files under the run directory, read back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config import resolve
from ppodeck.engine.driver.telemetry import Telemetry
from ppodeck.engine.driver.tracking import axis_step, wandb_mode
from ppodeck.engine.host.tracking_support import missing_extras, missing_message
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import EventWriter, read_events
from tests.tracking.files import read_tensorboard_scalars, read_wandb_run


def tiny_args(run_dir: Path, **flags: Any) -> dict[str, Any]:  # noqa: ANN401
    config = resolve_preset(load_preset("tiny-cpu")).with_values(run_dir=str(run_dir), **flags)
    return dict(resolve(config, os.environ))


def feed(tm: Telemetry) -> None:
    """What the driver logs in two rollouts: train steps, rollout and eval metrics."""
    for rollout_id in range(2):
        for i in range(4):
            tm.metrics("train/step", rollout_id * 4 + i, rollout_id,
                       {"train/critic-value_loss": 0.5 - 0.1 * i}, role="critic")
        tm.metrics("rollout/step", rollout_id, rollout_id,
                   {"rollout/raw_reward": 0.25 * (rollout_id + 1),
                    "critic/explained_variance": None})
        tm.metrics("eval/step", rollout_id, rollout_id, {"eval/held-out": 0.1 + rollout_id})


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    run_dir = tmp_path_factory.mktemp("run")
    args = tiny_args(run_dir, use_wandb=True, use_tensorboard=True, wandb_project="deck",
                     wandb_group="g1", disable_wandb_random_suffix=True,
                     tb_project_name="proj", tb_experiment_name="exp",
                     wandb_key=None)
    writer = EventWriter(run_dir / "events.jsonl")
    tm = Telemetry(writer, 0)
    tm.start_tracking(args)
    feed(tm)
    tm.close()
    writer.close()
    return run_dir, read_events(run_dir / "events.jsonl")[0]


def test_wandb_offline_run_holds_the_metrics_on_miles_step_axes(tracked_run) -> None:
    run_dir, _events = tracked_run
    run = read_wandb_run(run_dir)
    assert run["run"].project == "deck" and run["run"].run_group == "g1"
    assert run["run"].display_name == "g1"  # --disable-wandb-random-suffix: the group itself
    rows = run["history"]
    rewards = [(r["rollout/step"], r["rollout/raw_reward"]) for r in rows
               if "rollout/raw_reward" in r]
    assert rewards == [(0, 0.25), (1, 0.5)]
    assert [r["eval/step"] for r in rows if "eval/held-out" in r] == [0, 1]
    assert [r["train/step"] for r in rows if "train/critic-value_loss" in r] == list(range(8))
    # an undefined metric (null) is left out, never logged as a number
    assert not any("critic/explained_variance" in r for r in rows)
    assert run["config"]["rollout_batch_size"] == 32 and "wandb_key" not in run["config"]


def test_tensorboard_event_files_hold_the_same_scalars(tracked_run) -> None:
    run_dir, _events = tracked_run
    logdir = run_dir / "tensorboard" / "proj" / "exp"
    scalars = read_tensorboard_scalars(logdir)
    assert scalars["rollout/raw_reward"] == [(0, 0.25), (1, 0.5)]
    assert [step for step, _ in scalars["train/critic-value_loss"]] == list(range(8))
    assert scalars["eval/held-out"] == [(0, pytest.approx(0.1)), (1, pytest.approx(1.1))]


def test_the_driver_log_says_where_the_files_go(tracked_run) -> None:
    run_dir, events = tracked_run
    logs = [e["msg"] for e in events if e["kind"] == "log" and e["source"] == "tracking"]
    assert any(m.startswith("wandb offline") and str(run_dir) in m and "wandb sync" in m
               for m in logs), logs
    assert any(m.startswith("tensorboard: event files in") and "proj/exp" in m for m in logs)


def test_modes_and_step_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    args = tiny_args(tmp_path)
    assert wandb_mode(args) == "offline"
    assert wandb_mode({**args, "wandb_key": "k"}) == "online"
    assert wandb_mode({**args, "wandb_key": "k", "wandb_mode": "offline"}) == "offline"
    # 32 prompts x 4 samples / global batch 32: 4 train steps per rollout
    train_axis = {**args, "wandb_always_use_train_step": True}
    assert axis_step(train_axis, "rollout/step", 3) == 12
    assert axis_step(train_axis, "eval/step", 3) == 12
    assert axis_step(train_axis, "train/step", 5) == 5
    assert axis_step(args, "rollout/step", 3) == 3


def test_missing_extras_names_the_flag_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import ppodeck.engine.host.tracking_support as support

    assert missing_extras({"use_wandb": True, "use_tensorboard": True}) == []
    monkeypatch.setattr(support, "module_installed", lambda name: name != "wandb")
    assert missing_extras({"use_wandb": True, "use_tensorboard": True}) == ["--use-wandb"]
    assert missing_extras({"use_wandb": False, "use_tensorboard": True}) == []
    assert "pip install 'ppodeck[tracking]'" in missing_message("--use-wandb")
