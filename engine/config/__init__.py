"""The pure config layer: flag schema, RunConfig, rules, derived values, resolution, argv.

A pasted launch command or script: engine.miles.script_import.parse_command_line (loaded
when used: its bash reader is the slowest module here to import).
"""

from __future__ import annotations

from .argv import parse_argv, to_argv
from .derived import Derived, derive
from .model import RunConfig, coerce
from .resolve import resolve
from .rules import Issue, Report, check
from .schema import BY_DEST, BY_NAME, FLAGS, Flag

__all__ = [
    "Flag", "FLAGS", "BY_DEST", "BY_NAME", "RunConfig", "Issue", "Report", "Derived", "check",
    "derive", "resolve", "to_argv", "parse_argv", "coerce",
]
