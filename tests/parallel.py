"""A pytest plugin (`-p tests.parallel` in pyproject.toml): how `make test` splits the suite
over two pytest-xdist workers (`-n 2 --dist loadfile`).

Each test file is one unit of work, so module fixtures (a shared run) are made once, except
that the files which start Ray runs form a single unit, RAY_RUNS. Three reasons: the run the
driver-kill and verified-saves tests share (tests/conftest.py's killed_tiny_run) and the
two-node cluster of tests/cluster are made once for the whole unit; two Ray runs never compete
for the two cores; and a run's waits (Ray's start, a driver's polls) leave room for the other
worker's single-threaded tests. The unit is handed out first, so it is never the last one
left. A new test file that starts Ray belongs in RAY_RUN_PATHS: outside it, it would still
pass, only slower, sharing the cores with another run. tests/contracts/test_parallel.py checks
that every path listed is there.
"""

from __future__ import annotations

from typing import Any

import pytest

RAY_RUNS = "ray-runs"
# paths (files, or folders ending in "/") of the tests that start a Ray run or cluster
RAY_RUN_PATHS = (
    "tests/cluster/",
    "tests/engine/test_canary.py",
    "tests/engine/test_compile_cache.py",
    "tests/engine/test_run_loop_flags.py",
    "tests/engine/test_tiny_cpu_e2e.py",
    "tests/health/test_verified_saves.py",
    "tests/reliability/test_ctrl_c.py",
    "tests/reliability/test_driver_kill.py",
    "tests/reliability/test_worker_death.py",
)


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled with: RAY_RUNS, else its file."""
    path = nodeid.split("::", 1)[0]
    return RAY_RUNS if path.startswith(RAY_RUN_PATHS) else path


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where xdist is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:  # noqa: ANN401
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayRunsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return RayRunsTogether(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the Ray runs' tests come first (a stable sort: each file keeps its order),
    so their unit leads the work queue."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: work_unit(item.nodeid) != RAY_RUNS)
