"""Ray workers as both the driver and the rollout manager see them (LIGHT at import: ray is
imported inside the functions that use it).

The driver places the trainers and the rollout manager; the manager's process places the
SGLang engines. Both hand a process its bundles in miles' order (SLOTS_ENV), bound every wait
(a timeout names the role, rank and call) and name a failed worker by role and rank.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

READY_TIMEOUT_S = 300.0       # a worker scheduled, its process up and its __init__ done
CALL_TIMEOUT_S = 4 * 3600.0   # one role call (init loads checkpoints, generate can be long)

SLOTS_ENV = "PPODECK_PLACEMENT_SLOTS"


def slots_from_env() -> list[dict[str, Any]]:
    """The bundle order `Placement.runtime_env` (engine/driver/cluster.py) handed to this
    process."""
    raw = os.environ.get(SLOTS_ENV)
    if not raw:
        raise RuntimeError(f"{SLOTS_ENV} is not set: this process was not started by "
                           "engine/driver/roles.py, so it does not know the bundle order")
    return json.loads(raw)


@dataclass
class WorkerFailure(RuntimeError):
    role: str
    rank: int
    cause: str

    def __str__(self) -> str:
        return f"{self.role} rank {self.rank} failed: {self.cause}"


def wait_ready(role: str, workers: Sequence[Any], asks: str,
               timeout: float | None = None) -> None:
    """Every worker placed, started and constructed, or an error naming the first one that
    is not (an unschedulable share would otherwise hang the first call forever)."""
    import ray

    timeout = READY_TIMEOUT_S if timeout is None else timeout
    refs = [w.__ray_ready__.remote() for w in workers]
    deadline = time.monotonic() + timeout
    for rank, ref in enumerate(refs):
        try:
            ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError as err:
            raise WorkerFailure(role, rank, f"not started within {timeout:.0f} s: it asks "
                                f"{asks}; is the bundle already full? (available: "
                                f"{ray.available_resources()})") from err
        except ray.exceptions.RayError as err:
            raise WorkerFailure(role, rank, f"did not start: {first_line(err)}") from err


def first_line(err: Exception) -> str:
    """A worker's error in one line: the remote cause's type and message."""
    cause = getattr(err, "cause", None) or err
    return f"{type(cause).__name__}: {cause}".splitlines()[0][:400]
