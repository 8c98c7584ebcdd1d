"""Secret flag values (schema `secret`, e.g. --wandb-key) never reach the run directory.

The launcher writes config.toml `without_secrets` and hands the values to the driver in
PPODECK_SECRET_<DEST> variables (`secret_env`); the driver puts them back (`restore_secrets`).
LIGHT: both sides import it, so neither imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from engine.config import BY_DEST, RunConfig, coerce

SECRET_ENV_PREFIX = "PPODECK_SECRET_"


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
