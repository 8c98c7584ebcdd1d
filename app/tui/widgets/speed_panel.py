"""The speed verdict in the monitor's GPU view: the phase furthest below what this machine can do,
and MFU per train phase (engine/run/bounds.py). The screen hands down a `Speed`; this draws it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ....engine.run.bounds import Speed


class SpeedPanel(Static):
    """Two lines: `speed <verdict>` and `MFU critic x%  actor y%` (or why there is none)."""

    DEFAULT_CSS = "SpeedPanel { height: auto; padding: 0 1; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.speed: Speed | None = None

    def on_mount(self) -> None:
        self.show(self.speed)

    def show(self, speed: Speed | None) -> None:
        self.speed = speed
        text = Text("speed ", "bold")
        if speed is None:
            text.append("no run directory: no machine facts to hold phases against", "dim")
        elif speed.worst is None:
            text.append(speed.text, "dim")
        else:
            slow = speed.worst.fraction is not None and speed.worst.fraction < 0.05
            text.append(speed.text, "yellow" if slow else "")
        mfu = speed.mfu if speed is not None else {}
        text.append("\nMFU   ", "bold")
        if mfu:
            text.append("  ".join(f"{role} {value:.1%}" for role, value in mfu.items()))
        else:
            text.append("no train phase with FLOP/s and a peak yet", "dim")
        self.update(text)
