"""A machine whose miles setup departs from miles' image (sglang-side shims, a local layer spec)
records it in the file $PPODECK_MILES_DEPARTURES names; `validate --engine miles` shows each
departure beside miles' verdict, and an unreadable record is shown, never skipped."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ppodeck.app.cli import app


def _validate(monkeypatch, record: Path | None, engine: str = "miles") -> str:  # noqa: ANN001
    if record is None:
        monkeypatch.delenv("PPODECK_MILES_DEPARTURES", raising=False)
    else:
        monkeypatch.setenv("PPODECK_MILES_DEPARTURES", str(record))
    result = CliRunner().invoke(app, ["validate", "tiny-cpu", "--engine", engine, "--json"])
    return result.stdout


def _departures(stdout: str) -> list[str]:
    return [i["message"] for i in json.loads(stdout)["issues"] if i["code"] == "miles.departure"]


def test_each_recorded_departure_is_shown_with_a_miles_verdict(monkeypatch, tmp_path) -> None:
    record = tmp_path / "departures.json"
    record.write_text(json.dumps([{"what": "--transformer-impl local",
                                   "why": "transformer-engine is not installed"}]))
    shown = _departures(_validate(monkeypatch, record))
    assert len(shown) == 1 and "--transformer-impl local" in shown[0]
    assert "transformer-engine is not installed" in shown[0]
    assert _departures(_validate(monkeypatch, record, engine="ppodeck")) == []
    assert _departures(_validate(monkeypatch, None)) == []


def test_an_unreadable_record_is_itself_shown(monkeypatch, tmp_path) -> None:
    shown = _departures(_validate(monkeypatch, tmp_path / "missing.json"))
    assert len(shown) == 1 and "could not be read" in shown[0]
