"""bench/evidence.py's measures for a forecast against its run: a value in a JSON file, the span
between two stamps, a run's own wall time, and the percent error of one figure against another."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import evidence  # noqa: E402


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    (tmp_path / "validate.json").write_text(json.dumps({"forecast": {"seconds": 110.0}}))
    (tmp_path / "wall.json").write_text(json.dumps({"launch_ts": 1000.0, "done_ts": 1100.0}))
    (tmp_path / "events.jsonl").write_text(
        "\n".join(json.dumps({"kind": "log", "ts": ts}) for ts in (1003.0, 1050.0, 1097.5)))
    return tmp_path


def test_a_json_value_and_a_span_between_two_stamps(kept: Path) -> None:
    forecast = {"file": "validate.json", "measure": "json", "arg": "forecast.seconds"}
    wall = {"file": "wall.json", "measure": "json", "arg": "launch_ts..done_ts"}
    assert evidence.compute(kept, forecast) == 110.0
    assert evidence.compute(kept, wall) == 100.0
    assert evidence.compute(kept, {"file": "events.jsonl", "measure": "event_span"}) == 94.5


def test_the_percent_error_of_a_forecast_against_its_run(kept: Path) -> None:
    figure = {"measure": "error_pct",
              "numerator": {"file": "validate.json", "measure": "json", "arg": "forecast.seconds"},
              "denominator": {"file": "wall.json", "measure": "json", "arg": "launch_ts..done_ts"}}
    assert evidence.compute(kept, figure) == pytest.approx(10.0)


def test_a_missing_key_is_an_error_not_a_figure(kept: Path) -> None:
    with pytest.raises(KeyError):
        evidence.compute(kept, {"file": "validate.json", "measure": "json", "arg": "forecast.x"})
