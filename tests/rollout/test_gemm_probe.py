"""bench/gpu_gemm_probe.py --smoke under Triton's CPU interpreter (a fresh process: triton.jit
reads TRITON_INTERPRET when it decorates): it runs on the H200 to tune the skinny GEMM's tiles, so
its every part runs here first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.rollout.interpreter import REPO

pytest.importorskip("triton")


# A GPU bench's CPU smoke run: it checks the bench tool, not what PPO Deck ships, so it runs
# with the nightly bench (`make nightly`) and before a device session (`pytest -m slow -k
# smoke`), not in every CI run.
@pytest.mark.slow
def test_gemm_probe_smoke_times_cublas_plan_and_sweep() -> None:
    done = subprocess.run(
        [sys.executable, "bench/gpu_gemm_probe.py", "--smoke", "--budget", "5"], cwd=REPO,
        env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for line in ("cublas", "skinny plan n", "=== summary", "one decode step's GEMMs"):
        assert line in out, out
    assert "failed:" not in out, out
