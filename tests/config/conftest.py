"""Fixtures for the config layer: an isolated preset search path and PPODECK_HOME."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from ppodeck.engine.config import RunConfig
from tests.conftest import CPU_MACHINE, GPU_MACHINE  # noqa: F401 - re-exported


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """User config dir and PPODECK_HOME under tmp; no team dirs; nothing prepared."""
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PPODECK_PRESET_PATH", raising=False)
    return tmp_path


def make_config(**values: object) -> RunConfig:
    return RunConfig(MappingProxyType({k: v for k, v in values.items() if v is not None}))


def prepare_seed_files(home: Path) -> None:
    """What `ppodeck prepare qwen3-4b-ppo` leaves behind, as far as validation looks."""
    (home / "models" / "Qwen3-4B").mkdir(parents=True)
    dist = home / "models" / "Qwen3-4B_torch_dist"
    dist.mkdir(parents=True)
    (dist / "latest_checkpointed_iteration.txt").write_text("release")
