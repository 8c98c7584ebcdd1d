"""A pytest plugin (`-p tests.parallel` in pyproject.toml): how `make test` splits the suite
over two pytest-xdist workers (`-n 2 --dist loadfile`).

Each test file is one unit of work, so module fixtures (a shared run) are made once, except
that the files which start Ray runs form two units (RAY_RUN_UNITS): the run the driver-kill
and verified-saves tests share (tests/conftest.py's killed_tiny_run) and the two-node cluster
of tests/cluster are then made once, and never more than two Ray runs share the two cores.
The Ray units are handed out first, one to each worker, so neither is the last one left; the
short files fill in around them. A new test file that starts Ray belongs in a Ray unit:
outside it, it would still pass, but could make a third run. tests/contracts/test_parallel.py
checks that every path listed is there.
"""

from __future__ import annotations

from typing import Any

import pytest

# the tests that start a Ray run or cluster (files, or folders ending in "/"), in two units of
# about the same length; the driver-kill and verified-saves files share a run, the cluster
# tests a cluster
RAY_RUN_UNITS = {
    "ray-runs-a": ("tests/engine/test_canary.py", "tests/engine/test_compile_cache.py",
                   "tests/health/test_verified_saves.py", "tests/reliability/test_ctrl_c.py",
                   "tests/reliability/test_driver_kill.py",
                   "tests/reliability/test_worker_death.py"),
    "ray-runs-b": ("tests/cluster/", "tests/engine/test_run_loop_flags.py",
                   "tests/engine/test_tiny_cpu_e2e.py"),
}


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled with: its Ray-runs unit, else its file."""
    path = nodeid.split("::", 1)[0]
    return next((unit for unit, paths in RAY_RUN_UNITS.items() if path.startswith(paths)), path)


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
    so their units lead the work queue: one to each worker."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: work_unit(item.nodeid) not in RAY_RUN_UNITS)
