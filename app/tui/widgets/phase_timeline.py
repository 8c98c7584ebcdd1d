"""The phase timeline: one bar per recent rollout, each phase a coloured run of cells; under
them the start (init) as one bar of its steps, on its own scale, and each step's seconds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text
from textual.widget import Widget

from ....engine.run.state import PhaseSpan
from ....engine.vocabulary import INIT_STEPS, PHASES, InitStep, Phase

STYLE = {Phase.GENERATE: "green", Phase.ROLLOUT_OFFLOAD: "grey50", Phase.CRITIC_TRAIN: "yellow",
         Phase.ACTOR_TRAIN: "magenta", Phase.SAVE: "blue", Phase.ROLLOUT_ONLOAD: "grey62",
         Phase.UPDATE_WEIGHTS: "cyan", Phase.EVAL: "white"}
INIT_STYLE = {InitStep.RAY_START: "blue", InitStep.PLACEMENT: "grey62",
              InitStep.ROLLOUT_START: "green", InitStep.CRITIC_INIT: "yellow",
              InitStep.ACTOR_INIT: "magenta", InitStep.INITIAL_PUSH: "cyan"}
INIT_SHORT = {s.name: s.short for s in INIT_STEPS}
INIT_ROWS = 2  # the init bar and its steps' seconds


def short_seconds(seconds: float) -> str:
    """'490ms' below a second (sub-second phases read "0s" otherwise), else '12s'."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1.0 else f"{seconds:.0f}s"


def _group_by_rollout(spans: Iterable[PhaseSpan]) -> dict[int, list[PhaseSpan]]:
    rollouts: dict[int, list[PhaseSpan]] = {}
    for span in spans:
        if span.rollout_id >= 0:
            rollouts.setdefault(span.rollout_id, []).append(span)
    return rollouts


def _span_seconds(span: PhaseSpan, now: float | None) -> float:
    if span.seconds is not None:
        return span.seconds
    return max(0.0, (now or span.start) - span.start)


class PhaseTimeline(Widget):
    """Attributes down: show(spans, means, now)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rollouts: dict[int, list[PhaseSpan]] = {}
        self.means: dict[str, float] = {}
        self.now: float | None = None
        self.init_steps: list[PhaseSpan] = []

    def show(self, spans: Iterable[PhaseSpan], means: Mapping[str, float],
             now: float | None, init_steps: Iterable[PhaseSpan] = ()) -> None:
        self.rollouts = _group_by_rollout(spans)
        self.means = dict(means)
        self.now = now
        self.init_steps = list(init_steps)
        self.refresh()

    def render(self) -> Text:
        width = max(self.size.width, 20)
        rows = max(self.size.height - 1, 1)
        show_init = bool(self.init_steps) and rows > INIT_ROWS
        if show_init:
            rows -= INIT_ROWS
        text = self._legend()
        recent = sorted(self.rollouts)[-rows:][::-1]
        if not recent:
            text.append("\nno rollout phases yet", "dim")
        totals = {rid: sum(_span_seconds(s, self.now) for s in self.rollouts[rid])
                  for rid in recent}
        longest = max(totals.values(), default=0.0) or 1.0
        for rid in recent:
            text.append("\n")
            text.append_text(self._bar(rid, width - 12, longest))
            text.append(f" {short_seconds(totals[rid]):>6}", "dim")
        if show_init:
            text.append_text(self._init_rows(width - 12))
        return text

    def _init_rows(self, width: int) -> Text:
        """The start, oldest of all, under the rollouts: its steps side by side, then their
        seconds (init is often longer than all rollouts shown, so it has its own scale)."""
        seconds = [(s, _span_seconds(s, self.now)) for s in self.init_steps]
        total = sum(sec for _, sec in seconds)
        text = Text("\ninit ", "bold")
        cells = 0
        for span, sec in seconds:
            n = min(max(1, round(sec / (total or 1.0) * width)), width - cells)
            if n <= 0:
                break
            running = span.end is None
            text.append(("▒" if running else "█") * n, INIT_STYLE.get(span.name, "white"))
            cells += n
        text.append(" " * (width - cells))
        text.append(f" {short_seconds(total):>6}", "dim")
        text.append("\n     ")
        for span, sec in seconds:
            text.append("■", INIT_STYLE.get(span.name, "white"))
            text.append(f"{INIT_SHORT.get(span.name, span.name)} {short_seconds(sec)} ")
        return text

    def _legend(self) -> Text:
        text = Text()
        for phase in PHASES:
            mean = self.means.get(phase.name)
            if mean is None:
                continue
            text.append("■", STYLE[phase.name])
            text.append(f"{phase.short} {short_seconds(mean)} ")
        return text if text.plain else Text("phases (mean seconds)", "dim")

    def _bar(self, rollout_id: int, width: int, longest: float) -> Text:
        text = Text(f"r{rollout_id:<4}", "bold")
        cells = 0
        for span in self.rollouts[rollout_id]:
            share = _span_seconds(span, self.now) / longest
            n = max(1, round(share * width))
            n = min(n, width - cells)
            if n <= 0:
                break
            running = span.end is None
            text.append(("▒" if running else "█") * n, STYLE.get(span.name, "white"))
            cells += n
        text.append(" " * (width - cells))
        return text
