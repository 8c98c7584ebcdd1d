"""Synthetic event streams in the engine's shape (driver.report_rollout): a healthy PPO run, and
one metric bent per rule so that exactly that rule trips."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

STEPS = 4  # optimizer steps per rollout
T0 = 1_800_000_000.0

# metric -> f(rollout_id, step) for a healthy run: reward rises, EV becomes positive after the
# warmup, the value loss falls, the policy moves moderately.
Healthy = dict[str, Callable[[int, int], float | None]]


def healthy() -> Healthy:
    return {
        "rollout/raw_reward": lambda r, s: min(0.9, 0.1 + 0.03 * r) + 0.02 * (r % 3),
        "rollout/truncated_ratio": lambda r, s: 0.05,
        "rollout/response_len/mean": lambda r, s: 4.0,
        "critic/explained_variance": lambda r, s: -0.3 if r < 3 else 0.2 + 0.01 * r,
        "train/critic-value_loss": lambda r, s: 0.3 / (1 + 0.1 * r) + 0.001 * s,
        "train/pg_clipfrac": lambda r, s: 0.1 + 0.01 * (s % 2),
        "train/ppo_kl": lambda r, s: 0.01 + 0.002 * ((r + s) % 3),
        "train/kl_loss": lambda r, s: 0.02 + 0.002 * (r % 4),
        "train/entropy_loss": lambda r, s: 1.2 - 0.01 * r,
        "train/grad_norm": lambda r, s: 0.4 + 0.05 * (s % 3),
        "train/train_rollout_logprob_abs_diff": lambda r, s: 0.01 + 0.001 * ((r * 7) % 3),
    }


ROLLOUT_KEYS = ("rollout/raw_reward", "rollout/truncated_ratio", "rollout/response_len/mean",
                "critic/explained_variance")
CRITIC_KEYS = ("train/critic-value_loss",)
ACTOR_KEYS = ("train/pg_clipfrac", "train/ppo_kl", "train/kl_loss", "train/entropy_loss",
              "train/grad_norm", "train/train_rollout_logprob_abs_diff")


def stream(n: int = 30, warmup: int = 1, bend: dict[str, Any] | None = None,
           final: str | None = "succeeded") -> list[dict[str, Any]]:
    """Events of an n-rollout run; `bend` replaces healthy metric functions."""
    metrics = {**healthy(), **(bend or {})}
    events: list[dict[str, Any]] = [_ev(T0, "status", state="running", num_rollout=n)]
    for r in range(n):
        ts = T0 + 10 * (r + 1)
        events.append(_ev(ts, "phase", name="generate", state="start", rollout_id=r))
        for s in range(STEPS):
            events.append(_metrics(ts + 1, "train/step", r * STEPS + s, r, "critic",
                                   _values(metrics, CRITIC_KEYS, r, s)))
        if r >= warmup:
            for s in range(STEPS):
                events.append(_metrics(ts + 2, "train/step", r * STEPS + s, r, "actor",
                                       _values(metrics, ACTOR_KEYS, r, s)))
        events.append(_metrics(ts + 3, "rollout/step", r, r, None,
                               _values(metrics, ROLLOUT_KEYS, r, 0)))
    if final:
        events.append(_ev(T0 + 10 * (n + 1), "status", state=final))
    return events


def _values(metrics: Healthy, keys: tuple[str, ...], r: int, s: int) -> dict[str, Any]:
    return {k: metrics[k](r, s) for k in keys if k in metrics}


def _metrics(ts: float, step_key: str, step: int, rollout_id: int, role: str | None,
             values: dict[str, Any]) -> dict[str, Any]:
    return _ev(ts, "metrics", step_key=step_key, step=step, rollout_id=rollout_id, role=role,
               metrics=values)


def _ev(ts: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "ts": ts, "kind": kind, **fields}
