"""mypy on the pure modules (the files and strictness in pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is in the dev extra: pip install -e '.[dev]'")
def test_the_pure_modules_type_check() -> None:
    with tempfile.TemporaryDirectory() as cache:  # cold, so a stale cache cannot hide errors
        result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
