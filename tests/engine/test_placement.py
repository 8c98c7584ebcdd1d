"""Placement as miles lays it out (miles/ray/placement_group.py): the critic shares the
actor's bundles.

Scheduled by real Ray with declared GPUs in tests/cluster/test_placement_on_cluster.py."""

from __future__ import annotations

import os

import pytest

from ppodeck.engine.driver import cluster

A2 = {"actor_num_nodes": 1, "actor_num_gpus_per_node": 2}


@pytest.mark.parametrize(("extra", "layout"), [
    ({"rollout_num_gpus": 4}, (6, 2)),                     # disaggregated: A + rollout
    ({"rollout_num_gpus": 4, "colocate": True}, (2, 0)),   # colocate: rollout set to A's
    ({"rollout_num_gpus": 1, "colocate": True}, (2, 0)),
    ({"debug_train_only": True}, (2, 0)),
    ({"rollout_num_gpus": 3, "debug_rollout_only": True}, (3, 0)),
])
def test_bundle_layout_matches_miles(extra, layout):
    from ppodeck.engine.config.resolve import resolve_values

    assert cluster.bundle_layout(resolve_values({**A2, **extra}, os.environ)) == layout
