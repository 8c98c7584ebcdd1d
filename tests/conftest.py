"""Fixtures shared across test packages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ppodeck.engine.config.machine import Machine

if TYPE_CHECKING:
    from tests.reliability.killed_run import KilledRun

# env: this process's environment, live, as the edge's environment() hands it to check()
CPU_MACHINE = Machine(gpus=0, transformer_engine=False, sglang=False, host_memory_bytes=24 << 30,
                      env=os.environ)
GPU_MACHINE = Machine(gpus=4, transformer_engine=True, sglang=True, host_memory_bytes=512 << 30,
                      env=os.environ)


@pytest.fixture(autouse=True)
def cpu_machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Machine:
    """In-process check() judges against CI's machine (CPU, no transformer-engine, no sglang)
    so expected issues do not depend on where tests run; `gpu` tests keep the real probe."""
    if request.node.get_closest_marker("gpu"):
        return Machine(0, False, False, env=os.environ)
    monkeypatch.setattr("ppodeck.engine.config.rules_engine.this_machine", lambda: CPU_MACHINE)
    # nor on what this machine's GPUs and RAM hold now (tests/host/test_memory_seam.py reads it)
    monkeypatch.setattr("ppodeck.engine.config.rules_engine.live_holdings", lambda: None)
    return CPU_MACHINE


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PPODECK_RUNS_DIR pointed at a fresh directory of this test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(root))
    return root


@pytest.fixture(scope="module")
def megatron():
    """One gloo world of size 1 for the module; left as found (other modules may own one)."""
    import torch.distributed as dist

    from ppodeck.engine.driver.cluster import free_port
    from ppodeck.engine.train.platform import Parallelism, init_distributed, shutdown_distributed

    owner = not dist.is_initialized()
    if owner:
        init_distributed(0, 1, "127.0.0.1", free_port(), Parallelism(), seed=1234)
    yield
    if owner:
        shutdown_distributed()


@pytest.fixture(scope="session")
def killed_tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledRun]:
    """The one real tiny-cpu run SIGKILLed mid-phase that the driver-kill and verified-saves
    tests share (tests/reliability/killed_run.py says what it holds)."""
    pytest.importorskip("megatron.core")
    from tests.reliability import helpers
    from tests.reliability.killed_run import start_and_kill

    started: list[int] = []
    try:
        yield start_and_kill(tmp_path_factory.mktemp("killed"), started)
    finally:
        helpers.kill_everything(started)
