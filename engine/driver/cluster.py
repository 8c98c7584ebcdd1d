"""Ray at the edge: start or join the cluster, one placement group, its bundles in miles' order.

Layout follows miles (miles/ray/placement_group.py): the actor group takes one bundle per
rank, the critic group sits on the SAME bundles with fractional resources (it adds no
bundles), and the rollout side takes max(actor GPUs, rollout GPUs) bundles under colocate.
Bundles are used in (node IP, GPU id) order, as miles reorders them, so a TP > 1 engine's GPUs
are neighbours on one node.

Two kinds of Ray: the private local one (no address anywhere: every visible GPU, bound to the
loopback, rendezvous on 127.0.0.1) and an existing cluster (`--ray-address`, or RAY_ADDRESS as
Ray documents it: ray.init() reads it; no num_cpus/num_gpus when connecting; rendezvous on rank
0's node IP and a port free on that node).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..host.ports import free_port
from ..host.workers import SLOTS_ENV

# per-bundle shares, as miles: actor 0.4 + critic 0.4 + rollout 0.2 = one GPU
ACTOR_SHARE = 0.4
CRITIC_SHARE = 0.4
ROLLOUT_SHARE = 0.2

# Test-only switch: N > 0 makes the run ask Ray for GPUs (bundles {"GPU": 1}, 0.4/0.4/0.2
# shares) while every worker still computes on CPU; a private local Ray then declares N GPUs.
# It lets CPU machines test placement on a (fake-)GPU cluster. Never set it for real runs.
TEST_RAY_GPUS_ENV = "PPODECK_TEST_RAY_GPUS"

# Every cross-process wait is bounded (the workers' own: engine/host/workers.py).
PLACEMENT_TIMEOUT_S = 120.0   # the placement group's bundles reserved
PROBE_TIMEOUT_S = 60.0        # small tasks: bundle order, rendezvous port
CAPACITY_GRACE_S = 15.0       # nodes that just joined report their resources


def declared_test_gpus() -> int:
    raw = os.environ.get(TEST_RAY_GPUS_ENV, "").strip()
    return int(raw) if raw.isdigit() else 0


def joined_address(address: str | None) -> str | None:
    """The cluster this run joins: --ray-address, else RAY_ADDRESS; None: a private local Ray."""
    return address or os.environ.get("RAY_ADDRESS") or None


def start_ray(address: str | None, num_bundles: int,
              env_vars: dict[str, str] | None = None) -> str | None:
    """Join the cluster, or start a private local Ray with every visible GPU.

    `env_vars` must reach every worker of the run: a private local Ray's workers inherit this
    process's environment (the caller sets them there); on a joined cluster they go in the
    job's runtime_env (only there: a runtime_env keeps Ray from using its prestarted workers).
    Returns the joined address (None for the private local Ray).
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    joined = joined_address(address)
    runtime_env = {"env_vars": dict(env_vars)} if env_vars else None
    if joined:
        # address=None lets ray.init read RAY_ADDRESS itself, exactly as Ray documents
        ray.init(address=address or None, log_to_driver=True, runtime_env=runtime_env)
        return joined
    from ..host.machine import visible_gpus

    loopback_only()
    gpus = declared_test_gpus() or visible_gpus()
    # CPU counts are logical slots for scheduling, not cores; every bundle takes one.
    # "local": a new Ray even when `ray start` left an address file (ray.init() would join it)
    ray.init(address="local", num_cpus=max(4, os.cpu_count() or 1, num_bundles), num_gpus=gpus,
             include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=True)
    return None


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


class ClusterTooSmall(RuntimeError):
    """The cluster lacks what the layout needs; str() names both numbers and a fix."""


def check_capacity(num_bundles: int, use_gpu: bool, joined: str | None,
                   grace_s: float = CAPACITY_GRACE_S) -> None:
    """Fail before placement (which would wait PLACEMENT_TIMEOUT_S for nothing). Nodes that
    just joined may not have reported their resources yet: they get `grace_s`."""
    wanted = {"GPU": num_bundles} if use_gpu else {}
    wanted["CPU"] = num_bundles
    deadline = time.monotonic() + grace_s
    have = ray.cluster_resources()
    while any(have.get(k, 0) < n for k, n in wanted.items()) and time.monotonic() < deadline:
        time.sleep(0.5)
        have = ray.cluster_resources()
    where = f"the Ray cluster at {joined}" if joined else "this machine's private Ray"
    for resource, need in wanted.items():
        got = have.get(resource, 0)
        if got < need:
            raise ClusterTooSmall(
                f"the layout needs {need} {resource}s (one bundle of 1 {resource} per GPU of "
                f"the actor{' and rollout' if resource == 'GPU' else ''}) but {where} has "
                f"{got:g}. Fix: lower --actor-num-gpus-per-node / --rollout-num-gpus, or "
                "use a cluster with more.")


def bundle_layout(args: dict[str, Any]) -> tuple[int, int]:
    """(total bundles, rollout offset): miles' `_get_placement_group_layout`, computed once by
    engine.config.resolve (check() refuses a layout without them)."""
    return int(args["placement_bundles"]), int(args["rollout_bundle_offset"])


@dataclass(frozen=True)
class Slot:
    """One bundle as the roles see it: its index in the group, node and GPU."""

    bundle: int
    node_ip: str
    node_id: str
    gpu_id: int | None


@dataclass(frozen=True)
class Placement:
    """The run's placement group, its bundles in miles' (node IP, GPU id) order."""

    group: PlacementGroup
    slots: tuple[Slot, ...]

    def on(self, slot: int) -> PlacementGroupSchedulingStrategy:
        return on_bundle(self.group, self.slots[slot].bundle)

    def jsonable(self) -> list[dict[str, Any]]:
        return [vars(s) for s in self.slots]

    def runtime_env(self, env_vars: dict[str, str] | None = None) -> dict[str, Any]:
        """For the process that places the SGLang engines (the rollout manager): the bundle
        order travels in its environment (it is not config, so not in its args). `env_vars`
        are the job's own (compile caches), restated here so they reach it however Ray
        combines an actor's runtime_env with the job's."""
        return {"env_vars": {**(env_vars or {}), SLOTS_ENV: json.dumps(self.jsonable())}}


def create_placement_group(num_bundles: int, use_gpu: bool) -> Placement:
    bundle = {"GPU": 1, "CPU": 1} if use_gpu else {"CPU": 1}
    group = placement_group([dict(bundle) for _ in range(num_bundles)], strategy="PACK")
    try:
        ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as err:
        remove_placement_group(group)
        raise ClusterTooSmall(
            f"Ray could not reserve {num_bundles} bundles of {bundle} within "
            f"{PLACEMENT_TIMEOUT_S:.0f} s (cluster resources: {ray.cluster_resources()}, "
            f"available: {ray.available_resources()}). Fix: free the cluster or ask for "
            "fewer GPUs.") from err
    return Placement(group, ordered_slots(group, use_gpu))


def _where_am_i() -> tuple[str, str, int | None]:
    ids = ray.get_gpu_ids()
    return (ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id(),
            int(ids[0]) if ids else None)


def ordered_slots(group: PlacementGroup, use_gpu: bool) -> tuple[Slot, ...]:
    """Probe each bundle once (miles' InfoActor) and sort by (node IP, node, GPU id)."""
    probe = ray.remote(_where_am_i)
    refs = [probe.options(num_cpus=0, num_gpus=1 if use_gpu else 0,
                          scheduling_strategy=on_bundle(group, i)).remote()
            for i in range(len(group.bundle_specs))]
    found = ray.get(refs, timeout=PROBE_TIMEOUT_S)
    slots = [Slot(i, ip, node, gpu) for i, (ip, node, gpu) in enumerate(found)]
    return tuple(sorted(slots, key=lambda s: (_ip_key(s.node_ip), s.node_id,
                                              -1 if s.gpu_id is None else s.gpu_id, s.bundle)))


def _ip_key(ip: str) -> tuple[int, str]:
    try:
        return int(ipaddress.ip_address(ip)), ip
    except ValueError:
        return 0, ip


def on_bundle(group: PlacementGroup, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=group,
                                            placement_group_bundle_index=index)


def _node_ip_and_port() -> tuple[str, int]:
    ip = ray.util.get_node_ip_address()
    return ip, free_port(ip)


def rendezvous(placement: Placement, private: bool) -> tuple[str, int]:
    """(master address, port) for a role's torch.distributed world.

    The private local Ray keeps the loopback (the store binds 127.0.0.1 only). On a cluster,
    rank 0's node IP and a port free on that node, found by a task on rank 0's bundle.
    """
    if private:
        return "127.0.0.1", free_port()
    ref = ray.remote(_node_ip_and_port).options(num_cpus=0, scheduling_strategy=placement.on(0))
    return tuple(ray.get(ref.remote(), timeout=PROBE_TIMEOUT_S))


def shutdown(groups: Sequence[Any], placement: Placement | None,
             extra: Sequence[Callable[[], None]] = ()) -> None:
    """Our actors (each group's kill()) and placement group go; an existing cluster itself
    is never stopped (ray.shutdown only disconnects from it)."""
    for train_group in groups:
        train_group.kill()
    for fn in extra:
        fn()
    if placement is not None:
        remove_placement_group(placement.group)
    ray.shutdown()
