"""A stand-in `sglang` for CPU tests: on PYTHONPATH of the test cluster's workers only.

`Engine(**kwargs)` records its arguments and where Ray put it (GPU ids, CUDA_VISIBLE_DEVICES),
so tests check what the real Ray scheduler did; generate answers with fixed tokens.
"""

from __future__ import annotations

import os
from typing import Any


class Engine:
    def __init__(self, **kwargs: Any) -> None:
        import ray

        self.kwargs = kwargs
        self.where = {"gpu_ids": [int(i) for i in ray.get_gpu_ids()],
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                      "node_id": ray.get_runtime_context().get_node_id(),
                      "pid": os.getpid()}

    def generate(self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]],
                 return_logprob: bool = True) -> list[dict[str, Any]]:
        return [{"output_ids": [3], "meta_info": {"output_token_logprobs": [[-0.5, 3, None]],
                                                  "finish_reason": {"type": "length"}},
                 "engine": self.where, "kwargs": self.kwargs} for _ in input_ids]

    def release_memory_occupation(self, tags: list[str] | None = None) -> None:
        return None

    def resume_memory_occupation(self, tags: list[str] | None = None) -> None:
        return None

    def flush_cache(self) -> None:
        return None

    def shutdown(self) -> None:
        return None
