"""Stand-in workers that report where Ray put them (importable by the cluster's workers)."""

from __future__ import annotations

import os
from typing import Any


class PlacementProbe:
    """Has TrainWorker's constructor; reports its node, GPU ids and rendezvous."""

    def __init__(self, role: str, rank: int, world_size: int, master_addr: str,
                 master_port: int, args: dict[str, Any]) -> None:
        self.role, self.rank, self.master = role, rank, (master_addr, master_port)

    def where(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"role": self.role, "rank": self.rank, "node_id": ctx.get_node_id(),
                "gpu_ids": [int(i) for i in ray.get_gpu_ids()], "master": self.master,
                "placement_group": ctx.get_placement_group_id(), "pid": os.getpid()}


class EngineStarter:
    """Plays the rollout manager: starts SGLang engines from inside the placement group."""

    def start(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        from engine.rollout.sglang_backend import EngineLayout, start_engines
        from engine.train.model import ModelShape

        shape = ModelShape.from_args(args)
        self.engines = start_engines(shape, "qwen3", args, EngineLayout.from_args(args))
        sampling = [{"max_new_tokens": 1}]
        return [engine.generate([[1, 2]], sampling, True)[0] for engine in self.engines]
