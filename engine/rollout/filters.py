"""Dynamic sampling (DAPO) filters, with miles' signature: `fn(args, samples, **kwargs)` gets one
prompt group (its n samples, rewards set) and returns `DynamicFilterOutput(keep, reason)` or a
bool. A dropped group with a reason is counted under miles' metric name
`rollout/dynamic_filter/drop_<reason>`.

The two built-ins equal miles' `check_reward_nonzero_std` and `check_no_aborted`
(`miles.rollout.filter_hub.dynamic_sampling_filters`); a config naming miles' dotted path runs
these (engine/config/code_paths.py MILES_BUILTINS), so a miles command works unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# below this sample standard deviation a group's rewards count as equal (miles: 1e-8)
ZERO_STD = 1e-8
DROP_METRIC = "rollout/dynamic_filter/drop_"


@dataclass
class DynamicFilterOutput:
    """Same fields as miles' DynamicFilterOutput: keep the group or not, and why not."""

    keep: bool
    reason: str | None = None


def check_reward_nonzero_std(args: Any, samples: Sequence[Any],  # noqa: ANN401
                             **kwargs: Any) -> DynamicFilterOutput:
    """Keep a group whose rewards differ (sample std > 1e-8): a group that is all right or all
    wrong gives every sample the same advantage under GRPO, so nothing to learn from.
    A group of one sample has no std and is dropped, as in miles (torch's std is nan there)."""
    rewards = [float(s.get_reward_value(args)) for s in _flatten(samples)]
    std = statistics.stdev(rewards) if len(rewards) > 1 else math.nan
    keep = std > ZERO_STD
    return DynamicFilterOutput(keep, None if keep else f"zero_std_{round(rewards[0], 1)}")


def check_no_aborted(args: Any, samples: Sequence[Any],  # noqa: ANN401
                     **kwargs: Any) -> DynamicFilterOutput:
    """Drop a group in which any sample was aborted."""
    if any(s.status == s.Status.ABORTED for s in _flatten(samples)):
        return DynamicFilterOutput(False, "group_has_aborted")
    return DynamicFilterOutput(True)


def _flatten(samples: Iterable[Any]) -> Iterable[Any]:  # noqa: ANN401
    for s in samples:
        if isinstance(s, list):
            yield from s
        else:
            yield s


class FilterError(RuntimeError):
    """A filter that raised or answered something that is not a keep decision."""


def call_filter(fn: Callable[..., Any], name: str, args: Any,  # noqa: ANN401
                group: list[Any]) -> DynamicFilterOutput:
    """Run the filter on one group. Anything with a `keep` attribute (ours, or miles' own
    DynamicFilterOutput) or a bool is an answer; anything else fails the run, naming the
    filter and the group."""
    where = f"--dynamic-sampling-filter-path {name} on prompt group {group[0].group_index}"
    try:
        out = fn(args, group)
    except Exception as err:  # noqa: BLE001 - user code: any failure stops the run, named
        raise FilterError(f"{where} raised {type(err).__name__}: {err}") from err
    if hasattr(out, "keep"):
        return DynamicFilterOutput(_as_bool(out.keep, where), getattr(out, "reason", None))
    return DynamicFilterOutput(_as_bool(out, where))


def _as_bool(value: Any, where: str) -> bool:  # noqa: ANN401
    if isinstance(value, bool):
        return value
    item = getattr(value, "item", None)  # numpy / torch scalars (miles' own filter: a tensor)
    if callable(item) and getattr(value, "ndim", None) == 0 and isinstance(item(), bool):
        return bool(item())
    raise FilterError(f"{where} returned {value!r} ({type(value).__name__}): expected "
                      "DynamicFilterOutput(keep, reason) or a bool")


class DropCounter:
    """Groups dropped per reason, reported with miles' metric names, plus PPO Deck's totals."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.dropped = 0
        self.sampled = 0

    def record(self, out: DynamicFilterOutput) -> None:
        self.sampled += 1
        if out.keep:
            return
        self.dropped += 1
        if out.reason:  # miles counts only drops that give a reason
            self.reasons[out.reason] += 1

    def metrics(self) -> dict[str, float]:
        out = {f"{DROP_METRIC}{reason}": float(n) for reason, n in self.reasons.items()}
        out["rollout/dynamic_filter/dropped_groups"] = float(self.dropped)
        out["rollout/dynamic_filter/sampled_groups"] = float(self.sampled)
        return out
