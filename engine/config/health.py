"""A preset's `[health]` table: the rules' codes and levels, their thresholds, and how the
table is read (`parse_health_table`) and written back (`health_toml`).

engine.presets reads the table when it loads a preset; engine.run.health judges runs with it.
Stdlib only, so loading a preset does not load the judge.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Rule:
    code: str
    level: str
    title: str


RULES = (
    Rule("health.clipfrac_high", "warning", "clip fraction too high"),
    Rule("health.kl_jump", "warning", "KL jumped against its recent level"),
    Rule("health.entropy_collapse", "warning", "entropy collapsing"),
    Rule("health.grad_norm_at_clip", "warning", "grad norm at the clip"),
    Rule("health.explained_variance_negative", "error", "critic explains no variance"),
    Rule("health.value_loss_diverging", "error", "value loss diverging"),
    Rule("health.nonfinite_loss", "error", "loss is NaN or infinite"),
    Rule("health.truncation", "warning", "responses cut at the max length"),
    Rule("health.reward_flat", "warning", "reward flat"),
    Rule("health.logprob_gap_climbing", "warning", "rollout/train log-prob gap climbing"),
    Rule("health.hang", "error", "no new event while the driver is alive"),
    Rule("health.reward_stall", "warning", "reward requests pending, none answered"),
    Rule("health.run_failed", "error", "the run failed"),
    Rule("health.pace_far_off", "warning", "steady rollouts far off their forecast pace"),
    Rule("health.speed_below_bound", "warning", "a phase far below what the machine can do"),
)
BY_CODE = {rule.code: rule for rule in RULES}


@dataclass(frozen=True)
class Thresholds:
    """Each rule's limits. Names match the `[health]` keys (with dashes instead of _)."""

    clipfrac_max: float = 0.5  # miles: "> 0.5 means policy is moving fast -> drop LR"
    kl_jump_factor: float = 5.0  # a rollout's KL above 5x the median of the ones before it
    kl_jump_window: int = 5
    kl_jump_floor: float = 0.05  # smaller KLs are noise, whatever the ratio (TRL stops at 0.1)
    entropy_collapse_ratio: float = 0.1  # entropy below 10% of its first measured value ...
    entropy_collapse_rollouts: int = 20  # ... within this many rollouts of the first actor step
    grad_norm_clip_steps: int = 10  # consecutive actor steps with grad_norm >= --clip-grad
    explained_variance_rollouts: int = 5  # consecutive rollouts with EV < 0 after the warmup
    value_loss_factor: float = 10.0  # value loss above 10x the best rollout so far ...
    value_loss_rollouts: int = 3  # ... for this many rollouts in a row
    truncation_max: float = 0.5  # share of responses cut at --rollout-max-response-len
    reward_flat_rollouts: int = 10
    reward_flat_tolerance: float = 1e-3  # max - min of the rollout mean rewards in the window
    logprob_gap_rollouts: int = 5  # rising in each of these rollouts ...
    logprob_gap_factor: float = 2.0  # ... to at least 2x where the climb started
    hang_minutes: float = 30.0  # no new event while the driver is alive
    reward_stall_seconds: float = 60.0  # reward requests pending and none answered this long
    pace_factor: float = 2.0  # steady rollouts 2x slower (or faster) than the forecast ...
    pace_rollouts: int = 3  # ... over at least this many steady rollouts
    speed_share_min: float = 0.25  # on GPU, a phase taking >= 25% of the step ...
    speed_bound_max: float = 0.05  # ... at <= 5% of its bound (engine/run/bounds.py) ...
    speed_rollouts: int = 2  # ... over at least this many steady rollouts
    disable: tuple[str, ...] = ()  # rule codes not to judge, e.g. ["health.reward_flat"]


class HealthConfigError(ValueError):
    """A bad `[health]` table; str() names the key and the fix."""


def parse_health_table(table: Mapping[str, Any], where: str = "[health]") -> dict[str, Any]:
    """Validate a preset's `[health]` table; returns {field: value} (only what it sets)."""
    known = {f.name.replace("_", "-"): f for f in fields(Thresholds)}
    out: dict[str, Any] = {}
    for key, value in table.items():
        spec = known.get(key) or known.get(str(key).replace("_", "-"))
        if spec is None:
            raise HealthConfigError(f"{where}: unknown key {key!r}. Fix: use one of "
                                    f"{', '.join(sorted(known))}.")
        out[spec.name] = _typed_threshold(spec.name, value, where, key)
    return out


def _typed_threshold(name: str, value: Any, where: str, key: str) -> Any:
    default = getattr(Thresholds(), name)
    if name == "disable":
        codes = {rule.code for rule in RULES}
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HealthConfigError(f"{where}: {key} must be a list of rule codes.")
        unknown = [v for v in value if v not in codes]
        if unknown:
            raise HealthConfigError(f"{where}: {key}: unknown rule {unknown[0]!r}. Fix: use "
                                    f"one of {', '.join(sorted(codes))}.")
        return tuple(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HealthConfigError(f"{where}: {key} must be a number (default {default}).")
    if isinstance(default, int) and (value != int(value) or value < 1):
        raise HealthConfigError(f"{where}: {key} must be a whole number >= 1 "
                                f"(default {default}).")
    if value < 0 or not math.isfinite(value):
        raise HealthConfigError(f"{where}: {key} must be a finite number >= 0.")
    return int(value) if isinstance(default, int) else float(value)


def health_toml(table: Mapping[str, Any]) -> str:
    """A `[health]` TOML table for parsed thresholds ({field: value})."""
    lines = ["[health]"]
    for name, value in table.items():
        key = name.replace("_", "-")
        lines.append(f"{key} = {json.dumps(list(value) if isinstance(value, tuple) else value)}")
    return "\n".join(lines) + "\n"
