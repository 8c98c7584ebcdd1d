"""The suite's split over xdist workers (tests/parallel.py) names real paths."""

from __future__ import annotations

from tests.checkout_root import CHECKOUT_ROOT
from tests.parallel import RAY_RUN_PATHS, RAY_RUNS, work_unit


def test_every_ray_run_path_is_in_the_checkout() -> None:
    missing = [path for path in RAY_RUN_PATHS if not (CHECKOUT_ROOT / path).exists()]
    assert not missing, f"tests/parallel.py names paths that are gone: {missing}"


def test_ray_runs_share_one_unit_and_other_files_keep_their_own() -> None:
    assert work_unit("tests/cluster/test_ray_address.py::test_x") == RAY_RUNS
    assert work_unit("tests/health/test_verified_saves.py::test_y[1]") == RAY_RUNS
    assert work_unit("tests/tui/test_pty_keys.py::test_z") == "tests/tui/test_pty_keys.py"
