"""RunConfig <-> miles-style argv, and pasted launch scripts -> RunConfig.

Unknown flags never vanish: they are kept verbatim in RunConfig.passthrough with a warning, and
a near-miss of a known flag gets "did you mean --kl-coef?" in the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, cast

from .model import RunConfig
from .resolve import expand_path
from .rules import Issue
from .schema import BY_NAME, FLAGS, MILES_PREFIXES, PATH_DESTS

_KNOWN_NAMES = tuple(BY_NAME)
MASK = "********"


def format_value(value: Any) -> str:
    """A typed value as miles' argparse would read it back (floats round-trip exactly)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_argv(config: RunConfig, *, show_secrets: bool = True,
            expand_paths: Mapping[str, str] | None = None) -> list[str]:
    """miles-style argv in schema order, then the passthrough tokens.

    Bools emit `--x` when True; tristates emit `--x` / `--no-x` only when set. With
    `expand_paths`, the environment the command runs in, ${PPODECK_HOME}, $VARS and ~ in path
    flags are expanded (for a runnable command); without it the argv round-trips exactly.
    """
    values = config.values
    argv: list[str] = []
    for flag in FLAGS:
        value = values.get(flag.dest)
        if value is None:
            continue
        kind = flag.kind
        if kind == "bool":
            if value is True:
                argv.append(flag.name)
        elif kind == "tristate":
            argv.append(flag.name if value else cast(str, flag.negative))  # set for tristates
        elif kind == "list":
            argv.append(flag.name)
            argv.extend(str(v) for v in value)
        elif flag.secret and not show_secrets:
            argv += [flag.name, MASK]
        elif expand_paths is not None and flag.dest in PATH_DESTS and isinstance(value, str):
            argv += [flag.name, expand_path(value, expand_paths)]
        else:
            argv += [flag.name, format_value(value)]
    argv.extend(config.passthrough)
    return argv


def suggest(name: str) -> str | None:
    """The closest known flag name to a misspelt one, or None."""
    close = difflib.get_close_matches(name, _KNOWN_NAMES, n=1, cutoff=0.8)
    return close[0] if close else None


def _unknown_flag_issue(name: str) -> Issue:
    guess = suggest(name)
    if guess:
        return Issue("warning", "argv.unknown_flag", (name,),
                     f"{name} is not a known flag; kept verbatim and passed through to miles.",
                     f"did you mean {guess}?")
    if name.startswith("--sglang-"):
        return _sglang_flag_issue(name)
    looks_miles = name.startswith(MILES_PREFIXES)
    why = "looks like a miles flag PPO Deck does not model" if looks_miles else \
        "is not a flag PPO Deck knows"
    return Issue("warning", "argv.unknown_flag", (name,),
                 f"{name} {why}; kept verbatim and passed through unvalidated.",
                 "check the spelling; keep it if miles accepts it")


def _sglang_flag_issue(name: str) -> Issue:
    """miles passes --sglang-X to SGLang's server argument X: check that X exists."""
    from .sglang_server_args import SGLANG_VERSION, is_sglang_flag

    stem = name.removeprefix("--sglang-")
    if is_sglang_flag(name):
        return Issue("warning", "argv.unknown_flag", (name,),
                     f"{name} is SGLang's server argument --{stem} (sglang {SGLANG_VERSION}); "
                     "kept verbatim for miles, and not used by PPO Deck's own SGLang engines.",
                     "keep it if you run the command with miles; PPO Deck ignores it")
    return Issue("warning", "argv.unknown_sglang_flag", (name,),
                 f"{name} maps to --{stem}, which is not an SGLang {SGLANG_VERSION} server "
                 f"argument: miles would reject it with SGLang {SGLANG_VERSION} (a newer SGLang "
                 "may have it).",
                 "check the spelling against `python -m sglang.launch_server --help`")


def _is_flag_token(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def parse_argv(tokens: list[str]) -> tuple[RunConfig, list[Issue]]:
    """Parse miles-style argv. Values are coerced where possible; a value that does not fit
    its flag's type is kept as text so that check() reports it ("--lr expects a number")."""
    values: dict[str, Any] = {}
    passthrough: list[str] = []
    issues: list[Issue] = []
    i, count = 0, len(tokens)
    while i < count:
        token = str(tokens[i])
        i += 1
        if not _is_flag_token(token):
            issues.append(Issue("warning", "argv.stray_token", (token,),
                                f"{token!r} is not attached to any flag; kept verbatim.",
                                "remove it, or put it after the flag it belongs to"))
            passthrough.append(token)
            continue
        name, eq, inline = token.partition("=")
        flag = BY_NAME.get(name)
        if flag is None:
            issues.append(_unknown_flag_issue(name))
            passthrough.append(token)
            while not eq and i < count and not _is_flag_token(str(tokens[i])):
                passthrough.append(str(tokens[i]))
                i += 1
            continue
        if flag.dest in values:
            issues.append(Issue("warning", "argv.repeated_flag", (flag.name,),
                                f"{flag.name} is given more than once; the last one wins.",
                                "keep one"))
        if flag.kind in ("bool", "tristate"):
            value: Any = name != flag.negative
            if eq:
                value = _bool_text(inline, value)
            values[flag.dest] = value
            continue
        if flag.kind == "list":
            items = [inline] if eq else []
            while not eq and i < count and not _is_flag_token(str(tokens[i])):
                items.append(str(tokens[i]))
                i += 1
            if not items:
                issues.append(_missing_value(flag.name))
                continue
            values[flag.dest] = tuple(items)
            continue
        if eq:
            raw = inline
        elif i < count and not _is_flag_token(str(tokens[i])):
            raw = str(tokens[i])
            i += 1
        else:
            issues.append(_missing_value(flag.name))
            continue
        values[flag.dest] = _coerce_or_text(flag, raw)
    return RunConfig(MappingProxyType(values), tuple(passthrough)), issues


def _bool_text(text: str, default: bool) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return default
    if lowered in ("false", "0", "no", "off"):
        return not default
    return text  # check() reports "expects true or false"


def _coerce_or_text(flag: Any, raw: str) -> Any:
    from .model import coerce

    try:
        return coerce(flag, raw)
    except ValueError:
        return raw


def _missing_value(name: str) -> Issue:
    return Issue("error", "argv.missing_value", (name,), f"{name} expects a value, got none.",
                 f"write {name} VALUE")
