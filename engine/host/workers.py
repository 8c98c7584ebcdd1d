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


def death_cause(err: BaseException, actor: Any = None) -> str:  # noqa: ANN401 - a handle
    """Why a worker died, naming the node when the node went with it: Ray's actor table says
    where the actor lived, its node table whether that node is still alive. A lost node is what
    a user must act on (replace it, then resume), so it is said first."""
    lost = _lost_node(actor)
    if lost is None:
        return f"the worker process died ({type(err).__name__})"
    node_id, ip = lost
    return (f"its node {node_id[:12]} ({ip}) was lost and the worker with it; replace the "
            "node, then `ppodeck run --resume RUN` continues from the last save")


NODE_VERDICT_S = 20.0  # how long a dead worker waits for Ray to say whether its node died


def _lost_node(actor: Any) -> tuple[str, str] | None:  # noqa: ANN401 - a ray ActorHandle
    """(node id, ip) of the actor's node when Ray lists that node as dead; None otherwise.

    Ray marks a node dead some seconds after it stops answering (its health checks), and a
    call on its actors can fail before that; so this waits, up to NODE_VERDICT_S, for either
    verdict: the node dead, or the actor dead on a node that is alive (its process died)."""
    if actor is None:
        return None
    deadline = time.monotonic() + NODE_VERDICT_S
    while True:
        verdict = _node_verdict(actor)
        if verdict is not None or time.monotonic() > deadline:
            return verdict or None
        time.sleep(0.5)


def _node_verdict(actor: Any) -> tuple[str, str] | tuple[()] | None:  # noqa: ANN401
    """(node id, ip) when the node is dead; () when the actor is dead on a live node (or Ray
    cannot say); None while neither is known yet."""
    import ray
    from ray._private.state import state as gcs

    try:
        info = gcs.actor_table(actor._actor_id.hex()) or {}
        node_id = info.get("Address", {}).get("NodeID")
        node = {n.get("NodeID"): n for n in ray.nodes()}.get(node_id)
    except Exception:  # noqa: BLE001 - naming the node is best effort; the failure stands
        return ()
    if node is not None and not node.get("Alive"):
        return str(node_id), str(node.get("NodeManagerAddress") or "?")
    return () if node is None or info.get("State") == "DEAD" else None


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
