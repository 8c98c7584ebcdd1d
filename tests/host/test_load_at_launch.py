"""The load a forecast is scaled by: what runs now, not what ran a minute ago."""

from __future__ import annotations

import os

import pytest

from ppodeck.engine.host import kind


def test_runnable_now_is_the_median_count_less_the_reader() -> None:
    lines = iter(["0.50 0.40 0.30 3/200 99", "0.50 0.40 0.30 9/200 99",
                  "0.50 0.40 0.30 4/200 99"])
    assert kind.runnable_now(samples=3, gap_s=0, read=lambda: next(lines)) == 3.0


def test_runnable_now_without_proc_says_none() -> None:
    def missing() -> str:
        raise FileNotFoundError("/proc/loadavg")

    assert kind.runnable_now(read=missing) is None
    assert kind.runnable_now(samples=1, read=lambda: "garbled") is None


def test_a_run_that_just_ended_does_not_load_the_next_forecast(monkeypatch) -> None:
    """The 1-minute average still says 3.0 right after the user's last run; nothing runs now."""
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 2.0, 1.0))
    monkeypatch.setattr(kind, "runnable_now", lambda: 0.0)
    assert kind.load_average() == 0.0
    monkeypatch.setattr(kind, "runnable_now", lambda: 7.0)  # busier now than the average says
    assert kind.load_average() == pytest.approx(3.0)
    monkeypatch.setattr(kind, "runnable_now", lambda: None)
    assert kind.load_average() == pytest.approx(3.0)
