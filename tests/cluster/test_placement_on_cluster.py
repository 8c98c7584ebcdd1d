"""Placement through the real Ray scheduler on a two-node cluster with declared GPUs.

The seed recipe's layout (4 GPUs, PP2, colocated, four TP=1 SGLang engines) and a disaggregated
layout with 2-GPU engines, placed exactly as the driver places them; SGLang itself is the
stand-in in fake_sglang/ (it cannot run on CPU), everything else is Ray doing the scheduling.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from ppodeck.engine.driver import cluster
from ppodeck.engine.driver.roles import TrainGroup
from ppodeck.engine.host import workers
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.cluster.conftest import NODE_GPUS
from tests.cluster.probes import EngineStarter, PlacementProbe


def preset_args(name: str, **values) -> dict:
    from ppodeck.engine.config import resolve

    return dict(resolve(resolve_preset(load_preset(name)).with_values(**values), os.environ))


def fits(ray, placement: cluster.Placement, slot: int, **resources: float) -> bool:
    """Whether a task asking `resources` of this bundle is scheduled within a second."""
    probe = ray.remote(lambda: True).options(scheduling_strategy=placement.on(slot),
                                             **resources).remote()
    ready, _ = ray.wait([probe], timeout=1.0)
    if not ready:
        ray.cancel(probe, force=True)
    return bool(ready)


KEEP: list = []  # handles kept alive: Ray ends an actor once no handle refers to it


def place_roles(args: dict, placement: cluster.Placement,
                roles: tuple[str, ...] = ("actor", "critic")) -> list[list[dict]]:
    shares = {"actor": cluster.ACTOR_SHARE, "critic": cluster.CRITIC_SHARE}
    groups = [TrainGroup(role, args, placement, shares[role], use_gpu=True, private=False,
                         worker_cls=PlacementProbe) for role in roles]
    KEEP.extend(groups)
    return [where(group) for group in groups]


def where(group: TrainGroup) -> list[dict]:
    """Each rank's node and GPUs, asked of the probe that stands in for the train worker."""
    group.ensure_started()
    return group.wait([w.where.remote() for w in group.workers], "where")


def start_engines(ray, args: dict, placement: cluster.Placement) -> list[dict]:
    """Engines started from an actor on slot 0 that asks nothing (as the rollout manager)."""
    starter = ray.remote(EngineStarter).options(
        num_cpus=0, scheduling_strategy=placement.on(0),
        runtime_env=placement.runtime_env()).remote()
    outs = ray.get(starter.start.remote(args), timeout=120)
    KEEP.append(starter)
    return [{"where": o["engine"], "kwargs": o["kwargs"]} for o in outs]


def release(ray, placement: cluster.Placement) -> None:
    for handle in KEEP:
        if isinstance(handle, TrainGroup):
            handle.kill()
        else:
            ray.kill(handle)
    KEEP.clear()
    ray.util.remove_placement_group(placement.group)


def test_seed_recipe_fills_each_bundle_exactly(joined, ray_cluster):
    args = preset_args("qwen3-4b-ppo")
    assert args["pipeline_model_parallel_size"] == 2
    total, _ = cluster.bundle_layout(args)
    cluster.check_capacity(total, use_gpu=True, joined=ray_cluster.address)
    placement = cluster.create_placement_group(total, use_gpu=True)
    try:
        slots = placement.slots
        assert Counter(s.node_id for s in slots) == {n: NODE_GPUS for n in ray_cluster.node_ids}
        assert [s.gpu_id for s in slots] == [0, 1, 0, 1]  # (node, GPU id) order, as miles
        actor, critic = place_roles(args, placement)
        engines = start_engines(joined, args, placement)
        for rank in range(total):  # actor rank i and critic rank i share physical GPU i
            assert actor[rank]["node_id"] == critic[rank]["node_id"] == slots[rank].node_id
            assert actor[rank]["gpu_ids"] == critic[rank]["gpu_ids"] == [slots[rank].gpu_id]
        assert len(engines) == 4
        for i, engine in enumerate(engines):  # one TP=1 engine per bundle, Ray's GPU only
            assert engine["where"]["node_id"] == slots[i].node_id
            assert engine["where"]["gpu_ids"] == [slots[i].gpu_id]
            assert engine["kwargs"]["tp_size"] == 1 and engine["kwargs"]["base_gpu_id"] == 0
        # 0.4 + 0.4 + 0.2: every bundle is full, CPU and GPU alike (the manager asks nothing)
        for slot in range(total):
            assert not fits(joined, placement, slot, num_cpus=0.05)
            assert not fits(joined, placement, slot, num_cpus=0, num_gpus=0.05)
        # one rendezvous per role on rank 0's node (its IP here: both nodes are 127.0.0.1)
        assert {a["master"] for a in actor} == {actor[0]["master"]}
        assert actor[0]["master"][0] == slots[0].node_ip
        assert actor[0]["master"] != critic[0]["master"]
    finally:
        release(joined, placement)


def test_disaggregated_two_gpu_engine_spans_neighbour_bundles(joined, ray_cluster):
    args = preset_args("qwen3-4b-ppo", actor_num_gpus_per_node=2, colocate=False,
                       rollout_num_gpus=2, rollout_num_gpus_per_engine=2)
    total, offset = cluster.bundle_layout(args)
    assert (total, offset) == (4, 2)
    placement = cluster.create_placement_group(total, use_gpu=True)
    try:
        slots = placement.slots
        place_roles(args, placement, ("actor",))  # the critic shares these bundles only
        (engine,) = start_engines(joined, args, placement)
        first = slots[offset]
        # miles: the engine holds 0.2 of its first bundle and sees the node's GPUs (Ray does
        # not narrow CUDA_VISIBLE_DEVICES), starting at that bundle's GPU
        assert engine["where"]["node_id"] == first.node_id == slots[offset + 1].node_id
        assert engine["where"]["gpu_ids"] == [first.gpu_id]
        assert engine["where"]["cuda_visible_devices"] is None
        assert engine["kwargs"]["tp_size"] == 2
        assert engine["kwargs"]["base_gpu_id"] == first.gpu_id
        assert fits(joined, placement, offset, num_cpus=0, num_gpus=0.8)
        assert not fits(joined, placement, offset, num_cpus=0, num_gpus=0.85)
    finally:
        release(joined, placement)


def test_a_cluster_too_small_is_refused_with_both_numbers(joined, ray_cluster):
    with pytest.raises(cluster.ClusterTooSmall, match=r"needs 6 GPUs.* has 4\b"):
        cluster.check_capacity(6, use_gpu=True, joined=ray_cluster.address, grace_s=0)


def test_an_unschedulable_worker_is_named_after_a_timeout(joined, monkeypatch):
    args = {"actor_num_nodes": 1, "actor_num_gpus_per_node": 1}
    placement = cluster.create_placement_group(1, use_gpu=True)
    try:
        actor = TrainGroup("actor", args, placement, 0.6, True, False, worker_cls=PlacementProbe)
        KEEP.append(actor)
        where(actor)
        monkeypatch.setattr(workers, "READY_TIMEOUT_S", 2.0)  # the first one started in time
        critic = TrainGroup("critic", args, placement, 0.6, True, False, worker_cls=PlacementProbe)
        KEEP.append(critic)
        with pytest.raises(workers.WorkerFailure, match=r"critic rank 0 failed: not started "
                                                        r"within 2 s: it asks 0.6 CPU and 0.6"):
            where(critic)  # the first call names the worker that cannot be placed
    finally:
        release(joined, placement)
