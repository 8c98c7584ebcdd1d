"""The suite's split over xdist workers (tests/parallel.py) names real paths."""

from __future__ import annotations

from tests.checkout_root import CHECKOUT_ROOT
from tests.parallel import RAY_RUN_UNITS, work_unit


def test_every_ray_run_path_is_in_the_checkout() -> None:
    missing = [path for paths in RAY_RUN_UNITS.values() for path in paths
               if not (CHECKOUT_ROOT / path).exists()]
    assert not missing, f"tests/parallel.py names paths that are gone: {missing}"


def test_a_shared_run_keeps_its_tests_in_one_unit_and_other_files_keep_their_own() -> None:
    assert work_unit("tests/health/test_verified_saves.py::test_y[1]") == work_unit(
        "tests/reliability/test_driver_kill.py::test_x") in RAY_RUN_UNITS
    assert work_unit("tests/cluster/test_ray_address.py::test_x") == work_unit(
        "tests/cluster/test_moves_on_ray.py::test_y") in RAY_RUN_UNITS
    assert work_unit("tests/tui/test_pty_keys.py::test_z") == "tests/tui/test_pty_keys.py"
