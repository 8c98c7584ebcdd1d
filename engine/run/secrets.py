"""Secret flag values (schema `secret`, e.g. --wandb-key) never reach the run directory.

The launcher writes config.toml `without_secrets` and hands the values to the driver in
PPODECK_SECRET_<DEST> variables (`secret_env`); the driver puts them back (`restore_secrets`).
LIGHT: both sides import it, so neither imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..config import BY_DEST, RunConfig, coerce

SECRET_ENV_PREFIX = "PPODECK_SECRET_"
REDACTED = "<redacted>"


def without_secrets(config: RunConfig) -> RunConfig:
    return config.with_values(**{dest: None for dest in _set_secret_dests(config)})


def secret_env(config: RunConfig) -> dict[str, str]:
    """Environment variables that carry the set secret flags to the driver."""
    return {_secret_var(dest): str(config.get(dest)) for dest in _set_secret_dests(config)}


def restore_secrets(config: RunConfig, environ: Mapping[str, str] | None = None) -> RunConfig:
    """For the driver: put secret values from the environment back into the config."""
    environ = os.environ if environ is None else environ
    values = {}
    for flag in BY_DEST.values():
        raw = environ.get(_secret_var(flag.dest))
        if flag.secret and raw is not None:
            values[flag.dest] = coerce(flag, raw)
    return config.with_values(**values)


def _secret_var(dest: str) -> str:
    return f"{SECRET_ENV_PREFIX}{dest.upper()}"


def _set_secret_dests(config: RunConfig) -> list[str]:
    return [dest for dest, flag in BY_DEST.items() if flag.secret and config.is_set(dest)]


def redact_argv(words: list[str]) -> list[str]:
    """A command line fit for a log: the value of every secret flag masked, however it was typed.

    Covers `--wandb-key K`, `--wandb-key=K` and the CLI's `--set wandb-key=K` (or `wandb_key`,
    or `--set=wandb-key=K`).
    """
    names = _secret_names()
    out: list[str] = []
    mask_next = False
    for word in words:
        if mask_next:
            out.append(REDACTED)
            mask_next = False
            continue
        out.append(_redact_assignment(word, names))
        mask_next = word.startswith("--") and word[2:].replace("_", "-") in names
    return out


def scrub_secrets(text: str, words: list[str]) -> str:
    """`text` (a traceback, a message) with every secret value typed in `words` masked."""
    for typed, shown in zip(words, redact_argv(words), strict=True):
        value = typed[len(shown) - len(REDACTED):] if shown.endswith(REDACTED) else ""
        if shown == REDACTED:
            value = typed
        if len(value) >= 4:  # a one-letter "secret" would mask half the traceback
            text = text.replace(value, REDACTED)
    return text


def _redact_assignment(word: str, names: set[str]) -> str:
    """`...wandb-key=K` -> `...wandb-key=<redacted>` where the name starts the word or follows
    `-` or `=`."""
    spelled = word.replace("_", "-")
    for name in names:
        at = spelled.find(f"{name}=")
        if at >= 0 and (at == 0 or spelled[at - 1] in "-="):
            end = at + len(name) + 1
            return word[:end] + REDACTED
    return word


def _secret_names() -> set[str]:
    """Secret flags as the CLI and presets spell them: `wandb-key` (the dest with dashes)."""
    return {flag.name.removeprefix("--") for flag in BY_DEST.values() if flag.secret}
