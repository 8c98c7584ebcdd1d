"""setuptools' build_py for the wheel: records the commit it was built from (app/BUILD_COMMIT),
which `ppodeck --version` prints. Used only when a wheel is built (setup.py's cmdclass)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools.command.build_py import build_py

COMMIT_FILE = "BUILD_COMMIT"


def source_commit(root: Path) -> str | None:
    """`<sha>` of the checkout at `root`, `<sha>-dirty` with uncommitted changes; None without
    git."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        commit = source_commit(Path(__file__).resolve().parents[1])
        if commit and not self.editable_mode:
            target = Path(self.build_lib) / "ppodeck" / "app" / COMMIT_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n")
