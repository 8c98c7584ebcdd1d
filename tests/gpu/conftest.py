"""Shared by the GPU tests (device only): a fresh nccl world of size 1 per test."""

from __future__ import annotations

import pytest

from ppodeck.engine.driver.cluster import free_port


@pytest.fixture
def megatron():
    """A fresh nccl world of size 1 per test (tests that build trainer ranks make their own)."""
    from ppodeck.engine.train.platform import Parallelism, init_distributed, shutdown_distributed

    init_distributed(0, 1, "127.0.0.1", free_port(), Parallelism(), seed=1234)
    yield
    shutdown_distributed()
