"""The monitor's top line: status, rollout i/N, current phase, elapsed time and ETA."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from ....engine.run.state import rollout_text
from ....engine.vocabulary import State
from .. import fmt

STATE_STYLES = {
    State.RUNNING: "bold green", State.STARTING: "bold yellow", State.STOPPING: "bold yellow",
    State.CREATED: "yellow", State.SUCCEEDED: "bold cyan", State.FAILED: "bold red",
    State.LOST: "bold red", State.STOPPED: "bold magenta", State.ENDED: "bold cyan",
    "replay": "bold blue",
}


@dataclass(frozen=True)
class HeaderData:
    title: str = ""
    state: str = State.UNKNOWN
    detail: str = ""
    rollout_id: int | None = None  # 0-based, as samples, health and compare number them
    num_rollout: int | None = None
    phase: str | None = None
    elapsed: float | None = None
    eta: float | None = None
    pace: str = ""  # against the launch forecast (engine/run/pace.py)


class RunHeader(Static):
    """Attributes down: the screen calls show(HeaderData) after each batch."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.data = HeaderData()

    def show(self, data: HeaderData) -> None:
        if data == self.data:
            return
        self.data = data
        for state in STATE_STYLES:
            self.set_class(state == data.state, f"-{state}")
        self.update(self.render_text(data), layout=False)  # fixed height: repaint only

    @staticmethod
    def render_text(data: HeaderData) -> Text:
        text = Text()
        text.append(f" {data.state.upper()} ", STATE_STYLES.get(data.state, "bold") + " reverse")
        text.append(f"  rollout {rollout_text(data.rollout_id, data.num_rollout)}", "bold")
        text.append("  phase ")
        text.append(data.phase or "-", "bold magenta")
        text.append(f"  elapsed {fmt.duration(data.elapsed)}")
        eta = "done" if data.eta == 0 and data.state == State.SUCCEEDED else fmt.duration(data.eta)
        text.append(f"  ETA {eta}")
        if data.pace:
            text.append(f"  {data.pace}", "yellow" if "slower" in data.pace else "")
        second = "  ·  ".join(part for part in (data.title, data.detail) if part)
        if second:
            text.append(f"\n {second}", "dim")
        return text
