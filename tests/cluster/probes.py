"""Stand-in workers that report where Ray put them (importable by the cluster's workers)."""

from __future__ import annotations

import os
from typing import Any


class PlacementProbe:
    """Has the trainer ranks' constructor; reports its node, GPU ids and rendezvous."""

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
        from ppodeck.engine.model.shape import ModelShape
        from ppodeck.engine.rollout.sglang_backend import EngineLayout, start_engines

        shape = ModelShape.from_args(args)
        self.engines = start_engines(shape, "qwen3", args, EngineLayout.from_args(args))
        sampling = [{"max_new_tokens": 1}]
        return [engine.generate([[1, 2]], sampling, True)[0] for engine in self.engines]


class MoveProbe:
    """Has the trainer ranks' constructor and the calls train() makes; each call takes MOVE_S and
    records (name, start, end, awake before) on this worker's clock (one host: comparable)."""

    MOVE_S = 0.3

    def __init__(self, role: str, rank: int, world_size: int, master_addr: str,
                 master_port: int, args: dict[str, Any]) -> None:
        self.role, self.awake, self.calls = role, False, []
        self.memory_calls: list[float] = []

    def _call(self, name: str, awake_after: bool | None = None) -> dict[str, Any]:
        import time

        start = time.time()
        time.sleep(self.MOVE_S)
        self.calls.append((name, start, time.time(), self.awake))
        if awake_after is not None:
            self.awake = awake_after
        return {"bytes": 1 << 20, "seconds": self.MOVE_S, "noop": False, "where": "gpu"}

    def wake_up(self) -> dict[str, Any]:
        return self._call("wake_up", True)

    def sleep(self) -> dict[str, Any]:
        return self._call("sleep", False)

    def train_critic(self, rollout_id: int, batch: Any) -> dict[str, Any]:  # noqa: ANN401
        self._call("train_critic")
        return {"values": {0: [0.5]}, "step_metrics": [{"train/critic-value_loss": 0.1}],
                "rollout_metrics": {}}

    def train_actor(self, rollout_id: int, batch: Any, values: Any) -> dict[str, Any]:  # noqa: ANN401
        self._call("train_actor")
        return {"step_metrics": [{"train/pg_loss": 0.0}], "rollout_metrics": {}}

    def export_hf_weights_packed(self) -> None:
        self._call("export")

    def release_export(self) -> None:
        self._call("release_export")

    def recorded(self) -> list[tuple[str, float, float, bool]]:
        return self.calls

    def memory_times(self) -> list[float]:
        return self.memory_calls

    def memory(self) -> dict[str, Any]:
        """At once, as a trainer rank's memory() does (on the telemetry thread); records when."""
        import time

        self.memory_calls.append(time.time())
        return {"rss_bytes": 0, "cuda": {"device": 0, "reserved_bytes": 1 << 20}}
