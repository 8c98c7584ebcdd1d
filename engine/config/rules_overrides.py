"""What PPO Deck's engine does at start-up to a value the user set, in one table.

Each row is a place where the engine follows miles or Megatron rather than the value as
written: the flag is ignored, replaced, or beaten by the environment. Nothing here is an error
(miles runs the same way), but none of it may be silent: check() reports each row that applies
as an info before launch, and the driver announces each once, as a warning in driver.log and
the run's events, so `tail` and the monitor show it.

A row reads the values the user set (`e`: defaults plus set values, `s`: the set dests), the
resolved values (`r`) and the environment the engine starts in (`env`; check() has none, being
pure, so rows about the environment speak only at start-up).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .issues import Issue, Out, fl
from .resolve import TRACKER

Values = Mapping[str, Any]


@dataclass(frozen=True)
class Override:
    code: str
    dests: tuple[str, ...]
    says: Callable[[Values, Values, set[str], Mapping[str, str]], str | None]  # None: n/a
    fix: str
    # who says it: "both" (check() as an info, the driver at start), "driver" (check() warns
    # of it under its own code), "check" (the rollout announces it at start, where it applies)
    speaks: str = "both"


# A --synthetic-task writes its records with these keys, whatever the data flags say (the
# rollout manager applies them); miles' own defaults of those flags are no request.
SYNTHETIC_KEYS = {"input_key": "prompt", "label_key": "label", "metadata_key": "metadata"}
MILES_KEY_DEFAULTS = {"input_key": "input", "label_key": None, "metadata_key": "metadata"}


def synthetic_keys_ignored(values: Values) -> list[str]:
    """The data-key flags a --synthetic-task replaces, as `--input-key question`."""
    return [f"--{dest.replace('_', '-')} {values.get(dest)}" for dest, key in SYNTHETIC_KEYS.items()
            if values.get(dest) not in (key, MILES_KEY_DEFAULTS[dest])]


def _num_query_groups(e: Values, r: Values, s: set[str], env: Mapping[str, str]) -> str | None:
    if "num_query_groups" not in s or r["group_query_attention"]:
        return None
    if e["num_query_groups"] == r["num_query_groups"]:
        return None
    return (f"--num-query-groups {e['num_query_groups']} is unused without "
            f"--group-query-attention: the model is built with {r['num_query_groups']} query "
            "groups, one per attention head (Megatron's rule).")


def _rope_forced(e: Values, r: Values, s: set[str], env: Mapping[str, str]) -> str | None:
    if "position_embedding_type" not in s or not e["use_rotary_position_embeddings"]:
        return None
    if e["position_embedding_type"] == "rope":
        return None
    return (f"--use-rotary-position-embeddings makes --position-embedding-type rope; the "
            f"{e['position_embedding_type']} you set is not used.")


def _load_not_a_checkpoint(e: Values, r: Values, s: set[str],
                           env: Mapping[str, str]) -> str | None:
    path = r["load_requested"]
    if not path or r["resume"] or not os.path.exists(path):
        return None  # a --load that does not exist yet is a fresh run by miles' rule
    start = r["load"] or "random weights"
    return (f"--load {path} holds no Megatron checkpoint (no {TRACKER}): the run starts from "
            f"{start} instead of resuming.")


def _tensorboard_dir_from_env(e: Values, r: Values, s: set[str],
                              env: Mapping[str, str]) -> str | None:
    where = env.get("TENSORBOARD_DIR")
    if not r["use_tensorboard"] or not where or not (r["tb_project_name"] or
                                                     r["tb_experiment_name"]):
        return None
    return (f"$TENSORBOARD_DIR ({where}) wins over --tb-project-name/--tb-experiment-name "
            "(miles' order): TensorBoard files go there.")


def _passthrough(e: Values, r: Values, s: set[str], env: Mapping[str, str]) -> str | None:
    flags = [t.split("=", 1)[0] for t in r.get("passthrough", ()) if str(t).startswith("--")]
    if not flags:
        return None
    return (f"{len(flags)} flag{'s' if len(flags) != 1 else ''} PPO Deck does not model "
            f"reach no engine code: {' '.join(flags[:8])}" + (" ..." if len(flags) > 8 else "")
            + ".")


def _command_only(e: Values, r: Values, s: set[str], env: Mapping[str, str]) -> str | None:
    from .rules_engine import differs
    from .schema import BY_DEST

    names = [BY_DEST[d].name for d in sorted(s)
             if BY_DEST[d].engine.cls == "command-only" and differs(d, e[d])]
    if not names:
        return None
    return (f"PPO Deck's engine does not read {' '.join(names[:8])}"
            + (" ..." if len(names) > 8 else "") + " (kept for miles' own train.py).")


def _synthetic_keys(e: Values, r: Values, s: set[str], env: Mapping[str, str]) -> str | None:
    if not r["synthetic_task"]:
        return None
    ignored = synthetic_keys_ignored(r)
    if not ignored:
        return None
    return (f"{', '.join(ignored)} ignored: --synthetic-task {r['synthetic_task']} writes its "
            f"records with the keys {', '.join(repr(k) for k in SYNTHETIC_KEYS.values())}.")


OVERRIDES: tuple[Override, ...] = (
    Override("override.num_query_groups_unused", ("num_query_groups", "group_query_attention"),
             _num_query_groups, "add --group-query-attention, or drop --num-query-groups"),
    Override("override.rope_forced",
             ("position_embedding_type", "use_rotary_position_embeddings"), _rope_forced,
             "drop --use-rotary-position-embeddings, or --position-embedding-type"),
    Override("override.load_not_a_checkpoint", ("load",), _load_not_a_checkpoint,
             "point --load at a --save directory, or drop --load"),
    Override("override.tensorboard_dir_env", ("use_tensorboard", "tb_project_name"),
             _tensorboard_dir_from_env, "unset $TENSORBOARD_DIR to use the project's folder"),
    Override("override.synthetic_data_keys", ("synthetic_task", "input_key", "label_key"),
             _synthetic_keys, "drop those flags, or use --prompt-data instead of the task",
             speaks="check"),
    Override("override.passthrough", (), _passthrough,
             "drop them, or run with --engine miles, which reads them", speaks="driver"),
    Override("override.command_only", (), _command_only,
             "drop them, or run with --engine miles, which reads them", speaks="driver"),
)


def applying(e: Values, r: Values, s: set[str],
             env: Mapping[str, str]) -> list[tuple[Override, str]]:
    """Each row that applies to this config, with what it says."""
    found = []
    for row in OVERRIDES:
        message = row.says(e, r, s, env)
        if message:
            found.append((row, message))
    return found


def override_rules(e: dict, r: dict, s: set, out: Out) -> None:
    """check(): each override that applies, as an info (the environment is the driver's)."""
    for row, message in applying(e, r, s, {}):
        if row.speaks != "driver":
            out.append(Issue("info", row.code, tuple(fl(d) for d in row.dests), message,
                             row.fix))


def start_announcements(config: Any, env: Mapping[str, str]) -> list[str]:
    """What the driver says once at start: every override that applies, with its fix."""
    from .resolve import resolve_values, split_values
    from .schema import DEFAULTS

    valid, _, _ = split_values(config)
    e = {**DEFAULTS, **valid}
    r = {**resolve_values(valid, env), "passthrough": tuple(config.passthrough)}
    return [f"{message} Fix: {row.fix}." for row, message in applying(e, r, set(valid), env)
            if row.speaks != "check"]
