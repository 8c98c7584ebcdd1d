"""Run a file of Triton-interpreter tests in a fresh process (triton.jit reads TRITON_INTERPRET
when it decorates, so the kernels must be built there, not in this test process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assert_interpreted_file_passes(test_file: Path, marks: str | None = None) -> None:
    """pytest on `test_file` with TRITON_INTERPRET=1: every test passed, none skipped.
    `marks`: a -m expression in place of the default suite's (e.g. "slow")."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file),
         *(["-m", marks] if marks else [])],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    summary = tail.strip().splitlines()[-1]  # pytest's last line: "N passed[, ...] in T s"
    assert re.search(r"\d+ passed", summary), tail
    assert not re.search(r"\d+ (failed|skipped|error)", summary), tail
