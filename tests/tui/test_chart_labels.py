"""Chart axes and legends: whole rollout ticks, run labels that are not cut mid-word."""

from __future__ import annotations

from ppodeck.app.tui.screens.compare import run_label
from ppodeck.app.tui.widgets.metric_chart import whole_ticks


def test_rollout_ticks_are_whole_numbers() -> None:
    assert whole_ticks([0.0, 1.0, 2.0]) == [0, 1, 2]
    assert whole_ticks([float(x) for x in range(60)]) == [0, 12, 24, 36, 48]
    assert whole_ticks([0.5, 1.0]) == []  # not ids: plotext's own ticks


def test_a_run_label_keeps_preset_and_suffix_whole() -> None:
    assert run_label("261206-044348-tiny-cpu-8759") == "tiny-cpu-8759"
    assert run_label("my-run") == "my-run"
