"""The run's event vocabulary, declared once: event kinds, phases, run states, metric keys.

The driver writes these words into events.jsonl and status.json; the TUI, `ppodeck run`,
`tail`, `health`, `compare` and the run readers look them up. Both sides import them from here,
so a renamed phase or metric breaks at import time instead of leaving a chart empty.

Why its own module and not engine/run/events.py: events.py is the stream's mechanics (a writer
thread, a tolerant reader); the words are needed by modules that never touch the stream
(engine.config's memory table, status.json in engine.run.rundir, widgets). It imports nothing, so it
sits at the bottom of the layers with engine.config and engine.algo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


class Kind:
    """The `kind` of an event (ARCHITECTURE.md, contract 4)."""

    METRICS: Final = "metrics"
    PHASE: Final = "phase"
    OFFLOAD: Final = "offload"
    GPU: Final = "gpu"
    STATUS: Final = "status"
    LOG: Final = "log"
    HEALTH: Final = "health"  # written by readers (engine.run.health), never by the driver


EVENT_KINDS: Final = (Kind.METRICS, Kind.PHASE, Kind.OFFLOAD, Kind.GPU, Kind.STATUS, Kind.LOG,
                      Kind.HEALTH)


class Phase:
    """The `name` of a `phase` event."""

    GENERATE: Final = "generate"
    ROLLOUT_OFFLOAD: Final = "rollout_offload"
    CRITIC_TRAIN: Final = "critic_train"
    ACTOR_TRAIN: Final = "actor_train"
    SAVE: Final = "save"
    ROLLOUT_ONLOAD: Final = "rollout_onload"
    UPDATE_WEIGHTS: Final = "update_weights"
    EVAL: Final = "eval"


# a `phase` event's `state`: one at each end of the span
PHASE_START: Final = "start"
PHASE_END: Final = "end"


@dataclass(frozen=True, slots=True)
class PhaseInfo:
    name: str
    short: str  # keeps the timeline legend on one line at 80 columns
    label: str  # for tables and panels


# miles' per-rollout order (its train.py: rollout onload comes before the weight update); eval runs
# before the first rollout and after every --eval-interval-th one
PHASES: Final = (
    PhaseInfo(Phase.GENERATE, "gen", "generate"),
    PhaseInfo(Phase.ROLLOUT_OFFLOAD, "r-off", "rollout offload"),
    PhaseInfo(Phase.CRITIC_TRAIN, "critic", "critic train"),
    PhaseInfo(Phase.ACTOR_TRAIN, "actor", "actor train"),
    PhaseInfo(Phase.SAVE, "save", "save"),
    PhaseInfo(Phase.ROLLOUT_ONLOAD, "r-on", "rollout onload"),
    PhaseInfo(Phase.UPDATE_WEIGHTS, "sync", "weight sync"),
    PhaseInfo(Phase.EVAL, "eval", "eval"),
)
PHASE_NAMES: Final = tuple(p.name for p in PHASES)
PHASE_LABEL: Final = {p.name: p.label for p in PHASES}


# the start before rollout 0 (rollout_id null): Ray, placement, the roles, the first push;
# not a per-rollout phase, so not in PHASES
INIT_PHASE: Final = "init"


class InitStep:
    """The steps of the `init` phase: `phase` events with `parent: "init"` (rollout_id null).

    Readers that only know phases see them as spans nested in init; the fold keeps them apart
    (RunState.init_steps) so per-rollout phase means and the "current phase" stay as before.
    """

    RAY_START: Final = "ray_start"
    PLACEMENT: Final = "placement"
    ROLLOUT_START: Final = "rollout_start"  # the generator (hf) or the SGLang engines
    CRITIC_INIT: Final = "critic_init"  # process group, model build, weights, optimizer, sleep
    ACTOR_INIT: Final = "actor_init"
    INITIAL_PUSH: Final = "initial_push"  # the actor's first weights to the rollout side


# in the driver's order (engine/driver/roles.py start_roles)
INIT_STEPS: Final = (
    PhaseInfo(InitStep.RAY_START, "ray", "Ray start"),
    PhaseInfo(InitStep.PLACEMENT, "place", "placement group"),
    PhaseInfo(InitStep.ROLLOUT_START, "rollout", "rollout engine start"),
    PhaseInfo(InitStep.CRITIC_INIT, "critic", "critic init"),
    PhaseInfo(InitStep.ACTOR_INIT, "actor", "actor init"),
    PhaseInfo(InitStep.INITIAL_PUSH, "push", "initial weight push"),
)
INIT_STEP_LABEL: Final = {s.name: s.label for s in INIT_STEPS}


class State:
    """A run's `state` in status.json and in `status` events."""

    CREATED: Final = "created"  # the run directory exists, the driver is not started yet
    STARTING: Final = "starting"
    RUNNING: Final = "running"
    STOPPING: Final = "stopping"
    STOPPED: Final = "stopped"
    SUCCEEDED: Final = "succeeded"
    FAILED: Final = "failed"
    LOST: Final = "lost"  # the driver died without saying so (a reader's verdict)
    ENDED: Final = "ended"  # a watched miles dump stopped growing; miles records no outcome
    UNKNOWN: Final = "unknown"  # status.json missing or unreadable


ACTIVE_STATES: Final = frozenset({State.STARTING, State.RUNNING, State.STOPPING})
FINAL_STATES: Final = frozenset({State.STOPPED, State.SUCCEEDED, State.FAILED, State.LOST,
                                State.ENDED})


class Metric:
    """miles' metric names that PPO Deck charts, judges or summarizes (as miles logs them)."""

    REWARD: Final = "rollout/raw_reward"
    REWARD_MIN: Final = "rollout/raw_reward/min"
    REWARD_MAX: Final = "rollout/raw_reward/max"
    RESPONSE_LEN: Final = "rollout/response_len/mean"
    TRUNCATED: Final = "rollout/truncated_ratio"
    LOSS: Final = "train/loss"
    PG_CLIPFRAC: Final = "train/pg_clipfrac"
    PPO_KL: Final = "train/ppo_kl"
    KL_LOSS: Final = "train/kl_loss"  # only with --use-kl-loss
    ENTROPY: Final = "train/entropy_loss"
    GRAD_NORM: Final = "train/grad_norm"
    LOGPROB_GAP: Final = "train/train_rollout_logprob_abs_diff"
    VALUE_LOSS: Final = "train/critic-value_loss"
    VALUE_CLIPFRAC: Final = "train/critic-value_clipfrac"
    CRITIC_GRAD_NORM: Final = "train/critic-grad_norm"
    EXPLAINED_VARIANCE: Final = "critic/explained_variance"


class StepKey:
    """The `step_key` of a `metrics` event: the axis its values are plotted against."""

    TRAIN: Final = "train/step"
    ROLLOUT: Final = "rollout/step"
    EVAL: Final = "eval/step"


EVAL_PREFIX: Final = "eval/"
# miles' per-dataset eval keys that are not the dataset's reward: eval/<name>-truncated_ratio...
EVAL_SIDE_SUFFIXES: Final = ("_ratio", "-pass@")


def is_eval_reward(key: str) -> bool:
    """eval/<dataset> is a dataset's mean reward; eval/<dataset>/... and the _ratio keys are
    not."""
    name = key[len(EVAL_PREFIX):] if key.startswith(EVAL_PREFIX) else ""
    return bool(name) and "/" not in name and not any(p in name for p in EVAL_SIDE_SUFFIXES)


# the models whose placement (gpu/cpu) `offload` events report
MODELS: Final = ("actor", "critic", "rollout")
