"""Small, pure formatters shared by the widgets (bytes, durations, flag values)."""

from __future__ import annotations

from typing import Any

GB = 1_000_000_000


def gb(nbytes: float | None) -> str:
    if nbytes is None:
        return "-"
    return f"{nbytes / GB:.1f} GB"


def duration(seconds: float | None) -> str:
    """'1:02:03' for an hour or more, '2:03' below; '-' when unknown."""
    if seconds is None:
        return "-"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def flag_value(value: Any) -> str:
    """A typed flag value as the user would type it into a field ('' for unset)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if abs(value) >= 1e-4 or value == 0 else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return " ".join(flag_value(item) for item in value)
    return str(value)
