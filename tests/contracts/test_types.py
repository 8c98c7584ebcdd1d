"""mypy on the pure modules (the files and strictness in pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def import_name_tree(root: Path) -> Path:
    """A directory where the checkout's engine/ sits at ppodeck/engine, so mypy names each
    module as it is imported (ppodeck.engine.x) and follows the imports between them."""
    package = root / "ppodeck"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine").symlink_to(REPO / "engine", target_is_directory=True)
    return root


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is in the dev extra: pip install -e '.[dev]'")
def test_the_pure_modules_type_check(tmp_path: Path) -> None:
    with open(REPO / "pyproject.toml", "rb") as handle:
        files = tomllib.load(handle)["tool"]["mypy"]["files"]
    tree = import_name_tree(tmp_path / "tree")
    result = subprocess.run(  # a cold cache, so a stale one cannot hide errors
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), *(str(tree / "ppodeck" / f) for f in files)],
        cwd=tree, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
