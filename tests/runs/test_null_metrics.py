"""An undefined metric (explained variance with constant returns) travels as null: the events
carry it, the monitor's series skip it, the attached progress line shows '-'."""

from __future__ import annotations

import math
from pathlib import Path

from ppodeck.app.cli.progress import RunProgress
from ppodeck.engine.run.events import EventWriter, read_events
from ppodeck.engine.run.state import RunState

EV = "critic/explained_variance"


def _events(tmp_path: Path) -> list[dict]:
    writer = EventWriter(tmp_path / "events.jsonl")
    for step, ev in enumerate([0.5, None, math.nan, 0.75]):
        writer.emit("metrics", step_key="rollout/step", step=step, rollout_id=step, role=None,
                    metrics={EV: ev, "train/critic-value_loss": None})
    writer.close()
    return read_events(tmp_path / "events.jsonl")[0]


def test_undefined_metrics_are_null_in_the_events(tmp_path: Path) -> None:
    values = [e["metrics"][EV] for e in _events(tmp_path)]
    assert values == [0.5, None, None, 0.75]
    assert "NaN" not in (tmp_path / "events.jsonl").read_text()


def test_readers_skip_null_points(tmp_path: Path) -> None:
    events = _events(tmp_path)
    state = RunState()
    state.apply(events)
    points = state.points(EV)
    assert points is not None and points.means == [0.5, 0.75] and points.xs == [0, 3]
    progress = RunProgress("run", 4)
    for event in events:
        progress.apply(event)
    assert "value loss -" in progress.line()
