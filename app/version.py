"""`ppodeck --version`: the version, and the commit the installed code was built from."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

COMMIT_FILE = Path(__file__).with_name("BUILD_COMMIT")  # written into wheels (app/build_hook.py)


def version_line() -> str:
    try:
        version = importlib.metadata.version("ppodeck")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    return f"ppodeck {version} ({_commit()})"


def _commit() -> str:
    if COMMIT_FILE.is_file():
        return f"built from commit {COMMIT_FILE.read_text().strip()}"
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / ".git").exists():
        from .build_hook import source_commit

        commit = source_commit(checkout)
        if commit:
            return f"checkout at commit {commit}"
    return "commit unknown"
