"""Shared fixtures for the Megatron tests: one gloo world of size 1 per module."""

from __future__ import annotations

import pytest

from engine.driver.cluster import free_port


@pytest.fixture(scope="module")
def megatron():
    """One gloo world of size 1 for the module; left as found (other modules may own one)."""
    import torch.distributed as dist

    from engine.train.platform import Parallelism, init_distributed, shutdown_distributed

    owner = not dist.is_initialized()
    if owner:
        init_distributed(0, 1, "127.0.0.1", free_port(), Parallelism(), seed=1234)
    yield
    if owner:
        shutdown_distributed()
