"""Placement as miles lays it out (spec 3.4): the critic shares the actor's bundles."""

from __future__ import annotations

import os

import pytest

from engine import cluster

A2 = {"actor_num_nodes": 1, "actor_num_gpus_per_node": 2}


@pytest.mark.parametrize(("extra", "layout"), [
    ({"rollout_num_gpus": 4}, (6, 2)),                     # disaggregated: A + rollout
    ({"rollout_num_gpus": 4, "colocate": True}, (4, 0)),   # colocate: max(A, rollout)
    ({"rollout_num_gpus": 1, "colocate": True}, (2, 0)),
    ({"debug_train_only": True}, (2, 0)),
    ({"rollout_num_gpus": 3, "debug_rollout_only": True}, (3, 0)),
])
def test_bundle_layout_matches_miles(extra, layout):
    assert cluster.bundle_layout({**A2, **extra}) == layout


class PlacementProbe:
    """A stand-in worker that reports where Ray put it."""

    def __init__(self, role, rank, world_size, master_addr, master_port, args) -> None:
        self.role, self.rank = role, rank

    def where(self) -> tuple[str, int, str | None]:
        import ray

        return self.role, self.rank, ray.get_runtime_context().get_placement_group_id()


def fits_on_bundle(ray, group, bundle: int, cpus: float, timeout: float = 3.0) -> bool:
    """Whether a task asking for `cpus` of bundle `bundle` gets scheduled."""
    probe = ray.remote(lambda: True).options(
        num_cpus=cpus, scheduling_strategy=cluster.on_bundle(group, bundle)).remote()
    ready, _ = ray.wait([probe], timeout=timeout)
    if not ready:
        ray.cancel(probe, force=True)
    return bool(ready)


@pytest.fixture
def local_ray():
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


def test_critic_group_adds_no_bundles_and_shares_the_actors(local_ray):
    args = {**A2, "colocate": True}
    total, _ = cluster.bundle_layout(args)
    group = cluster.create_placement_group(total, use_gpu=False)
    actor = cluster.TrainGroup("actor", PlacementProbe, args, group, cluster.ACTOR_SHARE, False)
    critic = cluster.TrainGroup("critic", PlacementProbe, args, group, cluster.CRITIC_SHARE, False)
    assert total == 2 and len(group.bundle_specs) == 2
    actor_where = actor.call("where")
    critic_where = critic.call("where")
    assert {w[2] for w in actor_where + critic_where} == {group.id.hex()}
    # actor 0.4 + critic 0.4 on every bundle: the rollout's 0.2 still fits, 0.3 does not,
    # so critic rank i really shares bundle i with actor rank i
    for bundle in range(total):
        assert fits_on_bundle(local_ray, group, bundle, cluster.ROLLOUT_SHARE)
        assert not fits_on_bundle(local_ray, group, bundle, 0.3)
    actor.kill()
    critic.kill()
