"""Ray at the edge: start or join the cluster, one placement group, role groups on its bundles.

Layout follows miles (spec 3.4, 4.1): the actor group takes one bundle per rank, the critic
group sits on the SAME bundles with fractional resources (it adds no bundles), and the
rollout side takes max(actor GPUs, rollout GPUs) bundles under colocate.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

# per-bundle shares, as miles: actor 0.4 + critic 0.4 + rollout 0.2 = one GPU
ACTOR_SHARE = 0.4
CRITIC_SHARE = 0.4
ROLLOUT_SHARE = 0.2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ray(address: str | None, num_gpus: int) -> None:
    """Join `address`, or start a private local Ray bound to 127.0.0.1."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    loopback_only()
    # CPU counts are logical slots for scheduling, not cores
    ray.init(num_cpus=max(4, os.cpu_count() or 1), num_gpus=num_gpus,
             include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=True)


def loopback_only() -> None:
    """Make a private local Ray listen on 127.0.0.1 only.

    Why: ray.init turns _node_ip_address="127.0.0.1" into the machine's routable IP, and its
    gRPC servers (GCS, raylet, every worker) then listen on all interfaces (0.0.0.0 / ::),
    which exposes an unauthenticated cluster to the network. Ray's own switch for
    "single-machine" mode (used on macOS/Windows) keeps the node IP on the loopback, and the
    servers then bind to it. The variable reaches the raylet, agents and workers through the
    environment; this process read it when ray was imported, so the constant is set too.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def bundle_layout(args: dict[str, Any]) -> tuple[int, int]:
    """(total bundles, rollout offset), miles' `_get_placement_group_layout`."""
    actor_gpus = args["actor_num_nodes"] * args["actor_num_gpus_per_node"]
    rollout_gpus = args.get("rollout_num_gpus") or actor_gpus
    if args.get("debug_train_only"):
        return actor_gpus, 0
    if args.get("debug_rollout_only"):
        return rollout_gpus, 0
    if args.get("colocate"):
        return max(actor_gpus, rollout_gpus), 0
    return actor_gpus + rollout_gpus, actor_gpus


def create_placement_group(num_bundles: int, use_gpu: bool) -> PlacementGroup:
    bundle = {"GPU": 1, "CPU": 1} if use_gpu else {"CPU": 1}
    group = placement_group([dict(bundle) for _ in range(num_bundles)], strategy="PACK")
    ray.get(group.ready(), timeout=120)
    return group


def on_bundle(group: PlacementGroup, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=group,
                                            placement_group_bundle_index=index)


@dataclass
class WorkerFailure(RuntimeError):
    role: str
    rank: int
    cause: str

    def __str__(self) -> str:
        return f"{self.role} rank {self.rank} failed: {self.cause}"


class TrainGroup:
    """One Ray actor per rank; every rank forms the role's own torch.distributed world."""

    def __init__(self, role: str, worker_cls: type, args: dict[str, Any], group: PlacementGroup,
                 share: float, use_gpu: bool) -> None:
        self.role = role
        world_size = args["actor_num_nodes"] * args["actor_num_gpus_per_node"]
        port = free_port()
        remote_cls = ray.remote(worker_cls)
        self.workers = [
            remote_cls.options(
                num_cpus=share, num_gpus=share if use_gpu else 0,
                scheduling_strategy=on_bundle(group, rank),
                name=None, max_restarts=0,
            ).remote(role, rank, world_size, "127.0.0.1", port, args)
            for rank in range(world_size)
        ]

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call `method` on every rank and wait; a dead rank is named in the error."""
        refs = [getattr(w, method).remote(*args, **kwargs) for w in self.workers]
        return self.wait(refs)

    def call_per_rank(self, method: str, per_rank_args: Sequence[tuple]) -> list[Any]:
        refs = [getattr(w, method).remote(*a) for w, a in zip(self.workers, per_rank_args,
                                                                strict=True)]
        return self.wait(refs)

    def wait(self, refs: list[ray.ObjectRef]) -> list[Any]:
        results: list[Any] = [None] * len(refs)
        pending = {ref: rank for rank, ref in enumerate(refs)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            rank = pending.pop(done[0])
            try:
                results[rank] = ray.get(done[0])
            except ray.exceptions.RayActorError as err:
                self.kill()
                raise WorkerFailure(self.role, rank, "the worker process died "
                                    f"({type(err).__name__})") from err
            except ray.exceptions.RayTaskError as err:
                self.kill()
                raise WorkerFailure(self.role, rank, _first_line(err)) from err
        return results

    def kill(self) -> None:
        for worker in self.workers:
            ray.kill(worker, no_restart=True)


def _first_line(err: Exception) -> str:
    cause = getattr(err, "cause", None) or err
    return f"{type(cause).__name__}: {cause}".splitlines()[0][:400]


def shutdown(groups: Sequence[TrainGroup], group: PlacementGroup | None,
             extra: Sequence[Callable[[], None]] = ()) -> None:
    for train_group in groups:
        train_group.kill()
    for fn in extra:
        fn()
    if group is not None:
        remove_placement_group(group)
    ray.shutdown()
