"""A line chart of one or more metric series (textual-plotext), drawn from RunState points."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual_plotext import PlotextPlot

from ....engine.run.state import SeriesPoints


@dataclass(frozen=True)
class Line:
    key: str           # miles metric name, e.g. "rollout/raw_reward"
    label: str
    color: str = "cyan"
    right: bool = False  # plot against the right-hand axis (a different scale)


class MetricChart(PlotextPlot):
    """Attributes down: the screen calls set_points({key: SeriesPoints | None})."""

    def __init__(self, title: str, lines: tuple[Line, ...], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.title = title
        # The title on the widget's border, not plotext's: plotext drops a title wider than
        # the plot, and two of the monitor's charts lost theirs on an 80-column terminal.
        self.border_title = f"{title} (no data yet)"
        self.lines = lines
        self.plotted: dict[str, tuple[list[float], list[float]]] = {}

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(line.key for line in self.lines)

    def on_mount(self) -> None:
        super().on_mount()
        self._replot()

    def set_lines(self, lines: tuple[Line, ...]) -> None:
        """Series known only at run time (eval datasets); the next set_points draws them."""
        if lines != self.lines:
            self.lines = lines
            self.plotted = {}

    def set_points(self, points: Mapping[str, SeriesPoints | None]) -> None:
        plotted = {key: (p.xs, p.means) for key, p in points.items() if p is not None and p.xs}
        if plotted == self.plotted:
            return
        self.plotted = plotted
        self._replot()

    def _replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        self.border_title = self.title if self.plotted else f"{self.title} (no data yet)"
        # A braille cell holds 2 x-dots: more points than that only cost drawing time.
        limit = max(16, 2 * self.size.width)
        for line in self.lines:
            data = self.plotted.get(line.key)
            if data is None:
                continue
            xs, ys = thin(*data, limit)
            plt.plot(xs, ys, label=line.label, color=line.color, marker="braille",
                     yside="right" if line.right else "left")
        ticks = whole_ticks([x for xs, _ in self.plotted.values() for x in xs])
        if ticks:
            plt.xticks(ticks)
        self.refresh()

    def on_resize(self) -> None:
        if self.plotted:
            self._replot()


def whole_ticks(xs: list[float], most: int = 6) -> list[int]:
    """Whole-number ticks for an axis of rollout ids or steps (plotext's own put ticks at
    0.75, 1.50 on a 3-rollout run); [] when the xs are not whole numbers."""
    if not xs or any(x != int(x) for x in xs):
        return []
    low, high = int(min(xs)), int(max(xs))
    step = max(1, -(-(high - low) // (most - 1)))  # ceiling division
    return list(range(low, high + 1, step))


def thin(xs: list[float], ys: list[float], limit: int) -> tuple[list[float], list[float]]:
    """At most `limit` evenly spaced points, always keeping the last one."""
    if len(xs) <= limit:
        return xs, ys
    step = len(xs) / limit
    picks = sorted({int(i * step) for i in range(limit)} | {len(xs) - 1})
    return [xs[i] for i in picks], [ys[i] for i in picks]
