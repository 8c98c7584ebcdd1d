"""RunConfig: the values a user or preset set explicitly, plus typed coercion from text."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .schema import DEFAULTS, Flag

_TRUE = frozenset({"true", "1", "yes", "on", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "off", "n", "f"})


@dataclass(frozen=True)
class RunConfig:
    """Explicitly set flag values (dest -> typed value) and unknown argv tokens kept verbatim.

    Anything not in `values` takes the schema default; `get` returns it. Values are never
    rewritten by validation: miles' fallbacks live in `resolve()`.
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    passthrough: tuple[str, ...] = ()

    def get(self, dest: str) -> Any:
        value = self.values.get(dest)
        return DEFAULTS.get(dest) if value is None else value

    def is_set(self, dest: str) -> bool:
        return self.values.get(dest) is not None

    def with_values(self, **dest_values: Any) -> RunConfig:
        """A copy with `dest_values` applied; a value of None unsets the flag."""
        merged = dict(self.values)
        for dest, value in dest_values.items():
            if value is None:
                merged.pop(dest, None)
            else:
                merged[dest] = value
        return RunConfig(MappingProxyType(merged), self.passthrough)

    def with_passthrough(self, passthrough: tuple[str, ...]) -> RunConfig:
        return RunConfig(self.values, tuple(passthrough))


def coerce(flag: Flag, raw: str) -> Any:
    """Parse command-line text into the flag's type; ValueError names the flag and the value."""
    kind = flag.kind
    text = raw.strip()
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{flag.name} expects an integer, got {raw!r}") from None
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{flag.name} expects a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"{flag.name} expects a finite number, got {raw!r}")
        return value
    if kind in ("bool", "tristate"):
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"{flag.name} expects true or false, got {raw!r}")
    if kind == "choice":
        if text not in flag.choices:
            raise ValueError(
                f"{flag.name} expects one of {', '.join(flag.choices)}, got {raw!r}")
        return text
    if kind == "list":
        return tuple(text.split())
    return raw


def value_error(flag: Flag, value: Any) -> str | None:
    """Why `value` is not a valid typed value for `flag` (None when it is valid).

    Used by check() on every set value so garbage in RunConfig.values becomes an issue, never
    an exception. Strings are judged through coerce() so the message matches the argv one.
    """
    kind = flag.kind
    if kind == "int":
        ok = type(value) is int
    elif kind == "float":
        ok = type(value) in (float, int) and math.isfinite(value)
    elif kind in ("bool", "tristate"):
        ok = type(value) is bool
    elif kind == "choice":
        ok = type(value) is str and value in flag.choices
    elif kind == "list":
        ok = isinstance(value, (tuple, list)) and all(type(v) is str for v in value)
    else:
        ok = type(value) is str
    if ok:
        return None
    if isinstance(value, str):
        try:
            coerce(flag, value)
        except ValueError as exc:
            return str(exc)
    expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                "tristate": "true or false", "choice": "one of " + ", ".join(flag.choices),
                "list": "a list of strings", "str": "a string"}[kind]
    return f"{flag.name} expects {expected}, got {_short_repr(value)}"


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not break validation
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."
