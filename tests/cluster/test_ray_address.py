"""--ray-address and RAY_ADDRESS behave as Ray documents them, against the test cluster; the
private local Ray never joins a cluster by accident."""

from __future__ import annotations

import pytest

from ppodeck.engine.driver import cluster


@pytest.fixture
def disconnect():
    import ray

    yield ray
    ray.shutdown()


def test_ray_address_env_joins_without_cpu_or_gpu_counts(ray_cluster, monkeypatch, disconnect):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    assert cluster.joined_address(None) == ray_cluster.address
    # was: "When connecting to an existing cluster, num_cpus and num_gpus must not be provided"
    assert cluster.start_ray(None, num_bundles=4) == ray_cluster.address
    assert disconnect.cluster_resources()["GPU"] == 4  # both nodes' declared GPUs
    assert len({n["NodeID"] for n in disconnect.nodes() if n["Alive"]}) == 2


def test_ray_address_flag_wins_over_the_env(ray_cluster, monkeypatch, disconnect):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing there: must not be used
    assert cluster.start_ray(ray_cluster.address, num_bundles=4) == ray_cluster.address
    assert disconnect.cluster_resources()["GPU"] == 4
