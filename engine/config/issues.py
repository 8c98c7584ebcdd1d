"""Issue and Report: what check() returns, plus the helper rules use to add an issue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .derived import Derived
from .forecast import Forecast
from .schema import BY_DEST

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True, slots=True)
class Issue:
    level: Level
    code: str
    flags: tuple[str, ...]  # as on a command line, e.g. ("--kl-coef",)
    message: str  # why
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "code": self.code, "flags": list(self.flags),
                "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class Report:
    issues: tuple[Issue, ...]
    derived: Derived
    forecast: Forecast | None = None  # wall time and GPU-hours (engine/config/forecast.py)

    @property
    def ok(self) -> bool:
        return not any(i.level == "error" for i in self.issues)

    @property
    def errors(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if i.level == "error")

    @property
    def config_errors(self) -> tuple[Issue, ...]:
        """Errors in the config itself, leaving out what PPO Deck's engine (or this machine)
        cannot run: `command` and preset import still serve people who run miles itself."""
        return tuple(i for i in self.errors if not i.code.startswith("engine."))

    @property
    def warnings(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if i.level == "warning")

    @property
    def infos(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if i.level == "info")

    def codes(self, level: str | None = None) -> set[str]:
        return {i.code for i in self.issues if level is None or i.level == level}


Out = list[Issue]


def fl(dest: str) -> str:
    """The command-line name of a dest: "kl_coef" -> "--kl-coef"."""
    return BY_DEST[dest].name


def add(out: Out, level: Level, code: str, dests: tuple[str, ...], message: str,
        fix: str = "") -> None:
    """Append an Issue naming `dests` as command-line flags."""
    out.append(Issue(level, code, tuple(fl(d) for d in dests), message, fix))
