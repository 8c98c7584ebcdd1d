"""Compile caches under PPODECK_HOME: ours where the user set nothing, theirs kept, and every
Ray worker of a private local Ray sees them (a joined cluster: tests/cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppodeck.engine.driver.compile_cache import CACHE_VARS, apply_compile_caches, compile_caches


def test_unset_variables_get_folders_under_ppodeck_home(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    caches = apply_compile_caches(environ, home=str(tmp_path))
    assert caches.users == () and caches.unwritable == ()
    for var, folder in CACHE_VARS.items():
        assert environ[var] == caches.env[var] == str(tmp_path / "compile-cache" / folder)
        assert Path(environ[var]).is_dir()
    assert "(yours)" not in caches.message()


def test_a_variable_the_user_set_is_kept_and_named_as_theirs(tmp_path: Path) -> None:
    environ = {"TRITON_CACHE_DIR": "/data/triton"}
    caches = apply_compile_caches(environ, home=str(tmp_path))
    assert environ["TRITON_CACHE_DIR"] == caches.env["TRITON_CACHE_DIR"] == "/data/triton"
    assert caches.users == ("TRITON_CACHE_DIR",)
    assert "TRITON_CACHE_DIR=/data/triton (yours)" in caches.message()
    assert not (tmp_path / "compile-cache" / "triton").exists()


def test_an_unwritable_home_leaves_the_library_default_and_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder would go: mkdir fails
    environ: dict[str, str] = {}
    caches = apply_compile_caches(environ, home=str(blocker))
    assert set(caches.unwritable) == set(CACHE_VARS) and environ == {} and caches.env == {}
    assert "could not create the folder" in caches.message()


def test_ppodeck_home_is_read_from_the_environment(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path))
    env = compile_caches({}).env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile-cache" / "inductor")


def _cache_env() -> dict[str, str | None]:
    import os

    return {var: os.environ.get(var) for var in CACHE_VARS}


class _Probe:
    def env(self) -> dict[str, str | None]:
        return _cache_env()


def test_private_ray_workers_see_the_cache_dirs(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from ppodeck.engine.driver import cluster

    for var in CACHE_VARS:  # setenv first: monkeypatch records the old state only then, so
        monkeypatch.setenv(var, "-")  # what apply_compile_caches sets is undone after the test
        monkeypatch.delenv(var)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    caches = apply_compile_caches(home=str(tmp_path))
    try:
        assert cluster.start_ray(None, 1, caches.env) is None
        task = ray.get(ray.remote(_cache_env).options(num_cpus=0).remote(), timeout=60)
        # the rollout manager's way: an actor with its own runtime_env (the bundle order)
        probe = ray.remote(_Probe).options(
            num_cpus=0, runtime_env={"env_vars": {**caches.env, "PPODECK_X": "1"}}).remote()
        actor = ray.get(probe.env.remote(), timeout=60)
    finally:
        ray.shutdown()
    assert task == actor == caches.env
