"""TUI test fixtures: every user directory in a tmp dir, a recorded run, and a few helpers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EVENTS_TINY = FIXTURES / "events_tiny.jsonl"
RUN_ID = "260101-000000-qwen3-4b-ppo-abcd"
T0 = 1_767_225_600.0  # first event of events_tiny.jsonl
T_END = 1_767_227_895.497  # its last event

# A team preset the TUI tests own, so edits to the built-in presets never break them.
TEAM_PRESET = """\
schema_version = 1
name = "tui-ppo"
description = "Tiny PPO for the TUI tests (team preset)"

[provenance]
author = "tests/tui"
created = "2026-01-01"
tested_hardware = "CPU"
gpus = 1

[flags]
actor-num-nodes = 1
actor-num-gpus-per-node = 1
num-gpus-per-node = 1
colocate = true
rollout-temperature = 1.0
rollout-max-response-len = 6
rm-type = "copy-digit"
input-key = "prompt"
label-key = "label"
num-rollout = 60
rollout-batch-size = 16
n-samples-per-prompt = 4
global-batch-size = 32
lr = 0.001
lr-decay-style = "constant"
critic-lr = 0.002
num-critic-only-steps = 1
advantage-estimator = "ppo"
kl-coef = 0.0
entropy-coef = 0.01
normalize-advantages = true
use-dynamic-batch-size = true
max-tokens-per-gpu = 4096
num-layers = 2
hidden-size = 64
ffn-hidden-size = 256
num-attention-heads = 4
group-query-attention = true
num-query-groups = 2
kv-channels = 16
swiglu = true
normalization = "RMSNorm"
disable-bias-linear = true
use-rotary-position-embeddings = true
vocab-size = 32
seq-length = 64
max-position-embeddings = 64
rollout-backend = "hf"
synthetic-task = "copy-digit"
synthetic-num-prompts = 256
model-init = "random"
max-prompt-len = 16
"""


@pytest.fixture(autouse=True)
def tui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config, state, runs and team preset dirs under tmp; a fixed PPODECK_HOME so paths shown
    in issues are the same on every machine."""
    for name in ("config", "state", "runs", "team"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PPODECK_PRESET_PATH", str(tmp_path / "team"))
    monkeypatch.setenv("PPODECK_HOME", "/nonexistent/ppodeck-home")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team" / "tui-ppo.toml").write_text(TEAM_PRESET)
    return tmp_path


@pytest.fixture
def recorded_run(tui_env: Path) -> Path:
    """A finished run directory holding the recorded events_tiny.jsonl."""
    run = tui_env / "runs" / RUN_ID
    run.mkdir()
    shutil.copy(EVENTS_TINY, run / "events.jsonl")
    status = {"state": "succeeded", "detail": "20 rollouts done", "pid": None, "pgid": None,
              "started": T0, "ended": T_END, "rollout_id": 19, "num_rollout": 20,
              "preset": "qwen3-4b-ppo"}
    (run / "status.json").write_text(json.dumps(status))
    return run


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Pause until `condition()` holds (workers and deferred mounts), failing after timeout."""
    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)
        waited += 0.02


def freeze_cursors(pilot: Pilot) -> None:
    """A blinking cursor would make snapshots flaky."""
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False
