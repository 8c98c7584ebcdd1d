"""PPO health in the monitor: a one-line strip under the header and a panel of findings.

Findings are `health` events (engine/run/health.py) that the monitor's reader judged; the widgets
only draw what the screen hands down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

LEVEL_STYLE = {"error": "bold red", "warning": "bold yellow", "ok": "bold green"}


def worst(findings: Sequence[Mapping[str, Any]]) -> str:
    levels = {f.get("level") for f in findings}
    return "error" if "error" in levels else "warning" if "warning" in levels else "ok"


class HealthStrip(Static):
    """`health OK`, or the counts by level and the latest finding."""

    DEFAULT_CSS = "HealthStrip { height: 1; padding: 0 1; background: $boost; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.shown: tuple[int, str] = (-1, "")

    def on_mount(self) -> None:
        self.show([])

    def show(self, findings: Sequence[Mapping[str, Any]], judged: bool = True) -> None:
        level = worst(findings)
        key = (len(findings), level)
        if key == self.shown:
            return
        self.shown = key
        text = Text("health ", "bold")
        text.append(level.upper(), LEVEL_STYLE[level])
        if findings:
            errors = sum(f.get("level") == "error" for f in findings)
            warnings = sum(f.get("level") == "warning" for f in findings)
            last = findings[-1]
            text.append(f"  {errors} error  {warnings} warning  latest: {last.get('code')}"
                        f" at rollout {last.get('rollout_id')}  (Timeline / log: all)", "dim")
        elif judged:
            text.append("  no rule fired (ppodeck health RUN judges it too)", "dim")
        self.update(text)


class HealthPanel(Static):
    """Every finding, oldest first: rollout, level, code, message and fix."""

    DEFAULT_CSS = "HealthPanel { height: auto; max-height: 8; padding: 0 1; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.lines_text: list[str] = []  # plain copies, for tests

    def on_mount(self) -> None:
        self.show([])

    def show(self, findings: Sequence[Mapping[str, Any]]) -> None:
        if not findings:
            self.lines_text = ["no health rule fired"]
            self.update(Text(self.lines_text[0], "dim"))
            return
        text = Text()
        self.lines_text = []
        for f in findings:
            line = (f"r{f.get('rollout_id')} {f.get('level', '')[:4]} {f.get('code')}: "
                    f"{f.get('message')}. Fix: {f.get('fix')}")
            self.lines_text.append(line)
            if len(text):
                text.append("\n")
            text.append(line, LEVEL_STYLE.get(str(f.get("level")), ""))
        self.update(text)
