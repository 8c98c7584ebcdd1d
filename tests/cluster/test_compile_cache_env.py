"""On a joined cluster the workers do not inherit the driver's environment: the compile cache
variables reach them through the job's runtime_env, and the rollout manager's own
runtime_env (Placement.runtime_env) keeps them."""

from __future__ import annotations

import os

from ppodeck.engine.driver import cluster
from ppodeck.engine.driver.compile_cache import CACHE_VARS, compile_caches


def _cache_env() -> dict[str, str | None]:
    return {var: os.environ.get(var) for var in CACHE_VARS}


class _Probe:
    def env(self) -> dict[str, str | None]:
        return _cache_env()


def test_workers_on_a_joined_cluster_see_the_cache_dirs(ray_cluster, tmp_path, monkeypatch):
    import ray

    env = compile_caches({}, home=str(tmp_path)).env
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        assert cluster.start_ray(ray_cluster.address, 4, env) == ray_cluster.address
        task = ray.get(ray.remote(_cache_env).options(num_cpus=0).remote(), timeout=60)
        probe = ray.remote(_Probe).options(
            num_cpus=0, runtime_env={"env_vars": {**env, "PPODECK_X": "1"}}).remote()
        actor = ray.get(probe.env.remote(), timeout=60)
    finally:
        ray.shutdown()
    assert task == actor == env
