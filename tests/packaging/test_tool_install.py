"""`pipx install` and `uv tool install` of the wheel give a working `ppodeck` (issue #36).

Slow and networked: each tool resolves the wheel's dependencies from the package index (pip's
find-links for the pinned CPU torch, where the machine has one), as a user's install does.
    pytest -m slow tests/packaging/test_tool_install.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_WHEELS = Path("/opt/wheels")  # where these machines cache the CPU torch wheel, if present

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the built wheel, bin/ of a venv holding pipx and uv)."""
    base = tmp_path_factory.mktemp("tools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", str(ROOT), "-w", str(base / "dist")], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=120)
    subprocess.run([str(base / "venv" / "bin" / "pip"), "install", "-q", "pipx", "uv"],
                   check=True, timeout=600)
    return next((base / "dist").glob("ppodeck-*.whl")), base / "venv" / "bin"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIPX_HOME=str(home / "pipx"), PIPX_BIN_DIR=str(home / "bin"),
               PIPX_MAN_DIR=str(home / "man"), UV_TOOL_DIR=str(home / "uv"),
               UV_TOOL_BIN_DIR=str(home / "bin"), PPODECK_RUNS_DIR=str(home / "runs"),
               PPODECK_CONFIG_DIR=str(home / "config"))
    return env


def _works(bin_dir: Path, env: dict[str, str], cwd: Path) -> None:
    def ppodeck(*args: str, timeout: float = 120) -> str:
        done = subprocess.run([str(bin_dir / "ppodeck"), *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout + done.stderr  # the run's progress and verdict are on stderr

    assert "built from commit" in ppodeck("--version")
    assert "tiny-cpu" in ppodeck("presets", "ls")
    ppodeck("validate", "tiny-cpu")
    assert "succeeded" in ppodeck("run", "tiny-cpu", "--set", "num-rollout=2", "--yes",
                                  timeout=600)


@pytest.mark.parametrize("tool", ["pipx", "uv"])
def test_a_tool_install_of_the_wheel_runs(tools: tuple[Path, Path], tool: str,
                                          tmp_path: Path) -> None:
    wheel, bin_dir = tools
    env = _env(tmp_path)
    links = ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []
    command = ([str(bin_dir / "pipx"), "install", str(wheel)] if tool == "pipx" else
               [str(bin_dir / "uv"), "tool", "install", *links, str(wheel)])
    installed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    _works(tmp_path / "bin", env, tmp_path)
