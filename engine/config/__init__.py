"""The pure config layer: flag schema, RunConfig, rules, derived values, resolution, argv.

A pasted launch command or script: engine.config.script_import.parse_command_line (loaded
when used: its bash reader is the slowest module here to import).
"""

from __future__ import annotations

from ppodeck.engine.config.argv import parse_argv, to_argv
from ppodeck.engine.config.derived import Derived, derive
from ppodeck.engine.config.model import RunConfig, coerce
from ppodeck.engine.config.resolve import resolve
from ppodeck.engine.config.rules import Issue, Report, check
from ppodeck.engine.config.schema import BY_DEST, BY_NAME, FLAGS, Flag

__all__ = [
    "Flag", "FLAGS", "BY_DEST", "BY_NAME", "RunConfig", "Issue", "Report", "Derived", "check",
    "derive", "resolve", "to_argv", "parse_argv", "coerce",
]
