"""Fixtures shared across test packages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PPODECK_RUNS_DIR pointed at a fresh directory of this test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(root))
    return root
