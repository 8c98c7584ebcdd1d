"""bench/init_breakdown.py: init's plan, a step's parts and the first phases' pinning."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def breakdown():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("init_breakdown",
                                                  REPO / "bench" / "init_breakdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def event(ts: float, kind: str, **fields) -> dict:  # noqa: ANN003
    return {"v": 1, "ts": ts, "kind": kind, **fields}


def test_a_column_shows_the_plan_the_rollout_parts_and_pinning_inside_the_first_phase() -> None:
    events = [
        event(0.0, "status", state="running"),
        event(2.0, "phase", name="init", state="start", rollout_id=None),
        event(2.1, "log", level="info", source="driver",
              msg="init: the rollout engine, critic and actor start at once (14.1 GiB ...)"),
        event(9.0, "phase", name="rollout_start", state="end", rollout_id=None, parent="init",
              seconds=6.5, parts={"imports": 2.0, "model build": 0.4}),
        event(20.0, "phase", name="init", state="end", rollout_id=None, seconds=18.0),
        event(21.0, "phase", name="critic_train", state="start", rollout_id=0),
        event(22.0, "offload", model="critic", direction="onload", pin_seconds=0.0),
        event(25.0, "offload", model="critic", direction="offload", pin_seconds=0.01,
              prepinned_bytes=4.77e9),
        event(25.1, "phase", name="critic_train", state="end", rollout_id=0, seconds=4.1),
        event(25.2, "metrics", step_key="rollout/step", step=0, rollout_id=0, metrics={}),
    ]
    rows = breakdown().column(events, created=None)
    assert rows["init plan"].startswith("the rollout engine")
    assert rows["    rollout_start: model build"] == "0.40"
    assert rows["    critic_train: pin seconds"] == "0.01"
    assert rows["    critic_train: pinned ahead GB"] == "4.77"
    assert rows["launch -> first rollout metrics"] == "25.2"
