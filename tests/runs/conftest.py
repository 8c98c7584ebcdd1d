from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ppodeck.engine.run.rundir import RunDir, create_run_dir, write_status


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Run tests.runs.fake_driver instead of engine.driver; kills leftover groups at teardown.

    Tests append the pgids they start to the yielded list.
    """
    monkeypatch.setenv("PPODECK_DRIVER_MODULE", "tests.runs.fake_driver")
    monkeypatch.setenv("FAKE_DRIVER_MODE", "succeed")
    pgids: list[int] = []
    yield pgids
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def created_run(runs_dir: Path) -> RunDir:
    rundir = create_run_dir("smoke")
    write_status(rundir, state="created", preset="smoke", num_rollout=2, created=time.time())
    return rundir
