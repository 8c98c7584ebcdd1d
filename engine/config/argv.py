"""RunConfig <-> miles-style argv, and pasted shell command lines -> RunConfig.

Unknown flags never vanish: they are kept verbatim in RunConfig.passthrough with a warning, and
a near-miss of a known flag gets "did you mean --kl-coef?" in the fix.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from engine.config.model import RunConfig
from engine.config.resolve import expand_path
from engine.config.rules import Issue
from engine.config.schema import BY_NAME, FLAGS, MILES_PREFIXES, PATH_DESTS

_KNOWN_NAMES = tuple(BY_NAME)
MASK = "********"


def format_value(value: Any) -> str:
    """A typed value as miles' argparse would read it back (floats round-trip exactly)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_argv(config: RunConfig, *, show_secrets: bool = True,
            expand_paths: bool = False) -> list[str]:
    """miles-style argv in schema order, then the passthrough tokens.

    Bools emit `--x` when True; tristates emit `--x` / `--no-x` only when set. With
    expand_paths, ${PPODECK_HOME} and ~ in path flags are expanded (for a runnable command);
    without it the argv round-trips exactly.
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
            argv.append(flag.name if value else flag.negative)
        elif kind == "list":
            argv.append(flag.name)
            argv.extend(str(v) for v in value)
        elif flag.secret and not show_secrets:
            argv += [flag.name, MASK]
        elif expand_paths and flag.dest in PATH_DESTS and isinstance(value, str):
            argv += [flag.name, expand_path(value)]
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
    looks_miles = name.startswith(MILES_PREFIXES)
    why = "looks like a miles flag PPO Deck does not model" if looks_miles else \
        "is not a flag PPO Deck knows"
    return Issue("warning", "argv.unknown_flag", (name,),
                 f"{name} {why}; kept verbatim and passed through unvalidated.",
                 "check the spelling; keep it if miles accepts it")


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
    from engine.config.model import coerce

    try:
        return coerce(flag, raw)
    except ValueError:
        return raw


def _missing_value(name: str) -> Issue:
    return Issue("error", "argv.missing_value", (name,), f"{name} expects a value, got none.",
                 f"write {name} VALUE")


# --- pasted shell command lines ----------------------------------------------------------------

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(\[@\]|\[\*\])?(?::?-([^}]*))?\}|"
                  r"\$([A-Za-z_][A-Za-z0-9_]*)")
_SCRIPT_SUFFIXES = ("train.py", "train_async.py")


def parse_command_line(text: str, env: Mapping[str, str] | None = None
                       ) -> tuple[RunConfig, list[Issue]]:
    """Turn a pasted miles launch into a RunConfig.

    Accepts `python3 train.py ...`, `ray job submit ... -- python3 train.py ...`, bash with
    backslash continuations, `NAME=value` and `NAME=( ... )` array assignments, and ${VARS} /
    $VARS. Variables come from assignments in the text, then `env` (the CLI passes os.environ).
    An unresolved variable is named in a warning and kept verbatim.
    """
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    scalars: dict[str, str] = dict(env or {})
    arrays: dict[str, list[str]] = {}
    issues: list[Issue] = []
    unresolved: list[str] = []
    commands: list[str] = []
    lines = joined.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGN.match(line)
        if match and match.group(2).lstrip().startswith("("):
            body = match.group(2).lstrip()[1:]
            while ")" not in _strip_comment(body) and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            body = _strip_comment_lines(body.rsplit(")", 1)[0])
            arrays[match.group(1)] = _split(_expand(body, scalars, arrays, unresolved), issues)
            continue
        if match and _single_word(match.group(2)):
            words = _split(_expand(match.group(2), scalars, arrays, unresolved), issues)
            scalars[match.group(1)] = words[0] if words else ""
            continue
        commands.append(stripped)
    argv = _find_train_argv(commands, scalars, arrays, unresolved, issues)
    config, argv_issues = parse_argv(argv)
    for name in dict.fromkeys(unresolved):
        issues.append(Issue("warning", "command.unresolved_variable", (f"${name}",),
                            f"${{{name}}} is not defined in the pasted text; kept verbatim.",
                            f"define {name}=... above the command, or edit the value"))
    return config, issues + argv_issues


def _single_word(value: str) -> bool:
    try:
        return len(shlex.split(value, comments=True)) <= 1
    except ValueError:
        return False


def _strip_comment(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def _strip_comment_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


def _expand(text: str, scalars: dict[str, str], arrays: dict[str, list[str]],
            unresolved: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        if name in arrays:
            return " ".join(shlex.quote(v) for v in arrays[name])
        if name in scalars:
            return scalars[name]
        if match.group(3) is not None:
            return match.group(3)
        unresolved.append(name)
        return match.group(0)

    return _VAR.sub(replace, text) if "$" in text else text


def _split(text: str, issues: list[Issue]) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # unbalanced quotes: fall back to whitespace
        issues.append(Issue("warning", "command.unbalanced_quotes", (text[:40],),
                            f"could not split {text[:40]!r}...: {exc}; split on spaces instead.",
                            "check the quotes in the pasted command"))
        return text.split()


def _find_train_argv(commands: list[str], scalars: dict[str, str],
                     arrays: dict[str, list[str]], unresolved: list[str],
                     issues: list[Issue]) -> list[str]:
    """The argv after train.py (or the whole text when it is just flags)."""
    chosen: list[str] | None = None
    for command in commands:
        tokens = _split(_expand(command, scalars, arrays, unresolved), issues)
        if "--" in tokens and tokens[:1] == ["ray"]:
            tokens = tokens[tokens.index("--") + 1:]
        for index, token in enumerate(tokens):
            if token.endswith(_SCRIPT_SUFFIXES) or (
                    token.endswith(".py") and index > 0 and "python" in tokens[0]):
                chosen = tokens[index + 1:]
                break
        if chosen is not None:
            return chosen
    flat: list[str] = []
    for command in commands:
        flat += _split(_expand(command, scalars, arrays, unresolved), issues)
    first_flag = next((k for k, t in enumerate(flat) if t.startswith("--")), None)
    if first_flag:
        issues.append(Issue("warning", "command.no_train_script", (flat[0],),
                            f"no train.py found; ignoring {' '.join(flat[:first_flag])!r} before "
                            "the first flag.", "paste the full `python3 train.py ...` command"))
    return flat[first_flag:] if first_flag is not None else flat
